// Private to services/common: a listening TCP socket for metrics_server and
// the bind-failure diagnosis in grpc_server.
#ifndef KVCAST_SERVICES_COMMON_INTERNAL_LISTEN_SOCKET_H_
#define KVCAST_SERVICES_COMMON_INTERNAL_LISTEN_SOCKET_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace kvcast::services::internal {

// A non-blocking, close-on-exec socket bound to the first address of
// `host`:`port` that accepts (SO_REUSEADDR; IPv6 sockets also take IPv4) and
// listening. The caller owns (closes) the fd. `what` names the address in
// errors: INVALID_ARGUMENT when `host` does not resolve, else the errno's
// code with "bind WHAT: <strerror>".
absl::StatusOr<int> ListenTcp(const std::string& host, uint16_t port, const std::string& what);

// The local port of a bound socket, 0 on error.
uint16_t LocalPort(int fd);

}  // namespace kvcast::services::internal

#endif  // KVCAST_SERVICES_COMMON_INTERNAL_LISTEN_SOCKET_H_
