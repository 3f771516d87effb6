#include "services/common/flags_util.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kvcast::services {
namespace {

absl::Status Bad(std::string_view input, std::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(
      "bad listen address \"", std::string(input), "\": ", std::string(why),
      " (want HOST:PORT or [IPV6]:PORT, e.g. 0.0.0.0:8080 or [::]:8080)"));
}

}  // namespace

absl::StatusOr<std::pair<std::string, uint16_t>> ParseListen(std::string_view host_port) {
  std::string_view host, port;
  if (!host_port.empty() && host_port.front() == '[') {
    size_t close = host_port.find(']');
    if (close == std::string_view::npos) return Bad(host_port, "missing ']'");
    host = host_port.substr(1, close - 1);
    if (host.empty()) return Bad(host_port, "empty IPv6 address");
    if (host.find(':') == std::string_view::npos) {
      return Bad(host_port, "brackets are only for IPv6 addresses");
    }
    if (close + 1 >= host_port.size() || host_port[close + 1] != ':') {
      return Bad(host_port, "missing ':PORT' after ']'");
    }
    port = host_port.substr(close + 2);
  } else {
    size_t colon = host_port.rfind(':');
    if (colon == std::string_view::npos) return Bad(host_port, "missing ':PORT'");
    host = host_port.substr(0, colon);
    port = host_port.substr(colon + 1);
    if (host.empty()) return Bad(host_port, "missing host");
    if (host.find(':') != std::string_view::npos) {
      return Bad(host_port, "an IPv6 address needs brackets");
    }
  }
  if (port.empty() || port.size() > 5) return Bad(host_port, "port must be 0..65535");
  uint32_t value = 0;
  for (char c : port) {
    if (c < '0' || c > '9') return Bad(host_port, "port must be decimal digits");
    value = value * 10 + static_cast<uint32_t>(c - '0');
  }
  if (value > 65535) return Bad(host_port, "port must be 0..65535");
  return std::make_pair(std::string(host), static_cast<uint16_t>(value));
}

}  // namespace kvcast::services
