// API keys of the public endpoints (gRPC kvcast.v1.Generation and the
// OpenAI-compatible HTTP API), each naming the tenant its requests belong to.
//
// The file (--api_keys_file) has one key per line, `KEY TENANT`, separated by
// spaces or tabs; blank lines and lines starting with '#' are skipped. Keys
// are at least 16 characters of printable ASCII without spaces; a key listed
// twice is an error.
//
// Clients send `Authorization: Bearer KEY` (HTTP header, or gRPC metadata
// "authorization"). Lookups compare in time independent of where a wrong
// key first differs.
//
// Thread safety: immutable after Load; safe for concurrent use.
#ifndef KVCAST_SERVICES_COMMON_API_KEYS_H_
#define KVCAST_SERVICES_COMMON_API_KEYS_H_

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvcast::services {

class ApiKeys {
 public:
  // No keys: every request is accepted, in the default tenant.
  ApiKeys() = default;
  // INVALID_ARGUMENT naming the file and line for malformed lines, short or
  // duplicate keys, and an empty file; the errno's code when unreadable.
  static absl::StatusOr<ApiKeys> Load(const std::string& path);
  static absl::StatusOr<ApiKeys> Parse(absl::string_view text, const std::string& origin);

  bool enabled() const { return !keys_.empty(); }
  // The tenant of an `Authorization` value ("Bearer KEY"); nullopt when the
  // value is missing, malformed or names no key.
  std::optional<std::string> TenantOf(absl::string_view authorization) const;

 private:
  std::vector<std::pair<std::string, std::string>> keys_;  // key, tenant
};

}  // namespace kvcast::services

#endif  // KVCAST_SERVICES_COMMON_API_KEYS_H_
