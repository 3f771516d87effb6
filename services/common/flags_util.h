// Listen-address parsing shared by the kvcast service binaries.
//
// ParseListen accepts exactly "HOST:PORT" or "[IPV6]:PORT":
//   "0.0.0.0:8080", "localhost:0", "[::]:50051", "[::1]:9"  -> OK
//   "::1:80" (unbracketed IPv6), ":80" (no host), "h:" / "h:x" / "h:70000",
//   "h: 80" (anything but 1-5 decimal digits)               -> INVALID_ARGUMENT
// The brackets are removed from an IPv6 host. Port 0 means "pick a free port".
// The host is not resolved here.
//
// (transport/moqt/tools/tool_flags.h ParseHostPort is laxer: it accepts
// unbracketed IPv6, an empty host and a signed port, and lives in the MoQT
// tools library with its GnuTLS dependency; the services use this one.)
//
// Thread safety: a pure function.
#ifndef KVCAST_SERVICES_COMMON_FLAGS_UTIL_H_
#define KVCAST_SERVICES_COMMON_FLAGS_UTIL_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/statusor.h"

namespace kvcast::services {

// Returns {host, port}; INVALID_ARGUMENT (quoting the input) when malformed.
absl::StatusOr<std::pair<std::string, uint16_t>> ParseListen(std::string_view host_port);

}  // namespace kvcast::services

#endif  // KVCAST_SERVICES_COMMON_FLAGS_UTIL_H_
