// The registry behind NewBackend: each backend library adds its factory at
// static-initialization time, so a binary has exactly the backends it links.
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "kernels/backend.h"

namespace kvcast {
namespace {

struct Registry {
  absl::Mutex mu;
  std::map<std::string, BackendFactory, std::less<>> factories;
};

Registry& Backends() {
  static Registry* r = new Registry;
  return *r;
}

}  // namespace

bool RegisterBackend(std::string_view name, BackendFactory factory) {
  Registry& r = Backends();
  absl::MutexLock lock(&r.mu);
  return r.factories.emplace(std::string(name), factory).second;
}

absl::StatusOr<std::unique_ptr<Backend>> NewBackend(std::string_view name, int device) {
  Registry& r = Backends();
  BackendFactory factory = nullptr;
  std::string known;
  {
    absl::MutexLock lock(&r.mu);
    auto it = r.factories.find(name);
    if (it != r.factories.end()) factory = it->second;
    for (const auto& [n, f] : r.factories) absl::StrAppend(&known, known.empty() ? "" : ", ", n);
  }
  if (factory == nullptr) {
    return absl::NotFoundError(absl::StrCat("no backend '", std::string(name),
                                            "' in this build (built in: ", known, ")"));
  }
  return factory(device);
}

}  // namespace kvcast
