#include "transport/moqt/tools/tool_flags.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace kvcast::moqt {

absl::StatusOr<std::pair<std::string, uint16_t>> ParseHostPort(const std::string& s) {
  size_t colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return absl::InvalidArgumentError(absl::StrCat("want HOST:PORT, got \"", s, "\""));
  }
  std::string host = s.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  uint32_t port = 0;
  if (!absl::SimpleAtoi(s.substr(colon + 1), &port) || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("bad port in \"", s, "\""));
  }
  return std::make_pair(host, static_cast<uint16_t>(port));
}

absl::StatusOr<TrackNamespace> ParseNamespace(const std::string& s, char separator) {
  TrackNamespace ns;
  for (absl::string_view part : absl::StrSplit(s, separator)) {
    if (part.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("empty element in namespace \"", s, "\""));
    }
    ns.emplace_back(part);
  }
  if (ns.empty() || ns.size() > 32) {
    return absl::InvalidArgumentError("a namespace has 1 to 32 elements");
  }
  return ns;
}

}  // namespace kvcast::moqt
