// A minimal HTTP/1.1 endpoint for Prometheus scrapes and liveness probes.
//
//   GET /metrics   200, Content-Type: text/plain; version=0.0.4, registry->Render()
//   GET /healthz   200, "ok"
//   GET other      404          non-GET   405 (Allow: GET)
//   malformed      400          request head > max_request_bytes   431
// Every response carries Content-Length and `Connection: close`, and the
// connection is closed after it (no keep-alive, no request bodies). A query
// string is ignored. A connection that has not completed within
// connection_timeout (from accept) is closed, so idle or slow clients cannot
// pin the server; at most max_connections are open at once (others wait in
// the listen backlog).
//
// One thread, plain POSIX sockets and poll(2). Render() and so the registry's
// callback gauges run on that thread.
//
// Thread safety: port() may be called from any thread. Destruction stops the
// thread and closes every socket (prompt: it does not wait for clients).
#ifndef KVCAST_SERVICES_COMMON_METRICS_SERVER_H_
#define KVCAST_SERVICES_COMMON_METRICS_SERVER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "services/common/metrics.h"

namespace kvcast::services {

struct MetricsServerOptions {
  absl::Duration connection_timeout = absl::Seconds(5);
  size_t max_request_bytes = 8192;
  int max_connections = 64;
};

class MetricsServer {
 public:
  // Listens on `host_port` ("HOST:PORT", "[::]:PORT", "0.0.0.0:PORT"; port 0
  // picks a free port; "[::]" also accepts IPv4) and starts serving.
  // `registry` is borrowed and must outlive the server.
  // Errors: INVALID_ARGUMENT for a malformed address or a host that does not
  // resolve; the errno's code with "bind HOST:PORT: <strerror>" (e.g.
  // "Address already in use") when socket/bind/listen fail.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const std::string& host_port, const MetricsRegistry* registry,
      const MetricsServerOptions& options = {});

  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // The bound port (the chosen one when started with port 0).
  uint16_t port() const { return port_; }

 private:
  struct Connection;
  MetricsServer(int listen_fd, int wake_read, int wake_write, uint16_t port,
                const MetricsRegistry* registry, const MetricsServerOptions& options);
  void Loop();
  // Handles a complete or oversized request head; returns the response.
  std::string Respond(const std::string& request) const;

  const int listen_fd_, wake_read_, wake_write_;
  const uint16_t port_;
  const MetricsRegistry* const registry_;
  const MetricsServerOptions options_;
  std::thread thread_;
};

}  // namespace kvcast::services

#endif  // KVCAST_SERVICES_COMMON_METRICS_SERVER_H_
