// gRPC server and channel setup shared by the kvcast services.
//
//   GrpcServerOptions options;
//   options.listen = "[::]:50051";
//   ASSIGN_OR_RETURN(auto server, GrpcServer::Start(
//       options, {{kvcast::v1::Prefill::service_full_name(), &prefill_service}}));
//   ...
//   server->Shutdown(absl::Seconds(10));
//
// Server: TLS when cert_file + key_file are given (with ca_file: clients must
// present a certificate signed by it), insecure otherwise; messages up to
// 64 MiB; SO_REUSEPORT off (a second server on the same port is an error,
// not a silent split of traffic); the standard grpc.health.v1.Health service,
// SERVING for "" and each service's full name from Start until Shutdown or
// SetServing(false). Client keepalive pings as often as every second are
// accepted, and the server pings idle clients itself.
//
// Channels from MakeChannel ping every 4 s and give up on a peer that has
// not answered for 6 s more, with or without calls in flight, so a call to a
// worker that died (host or link down) fails with UNAVAILABLE within about
// 10 s instead of hanging (a killed process's reset sockets fail it at once); reconnection backoff is capped at 5 s so a
// restarted worker is found again quickly.
//
// Thread safety: GrpcServer's methods may be called from any thread;
// Shutdown is idempotent. The free functions are thread-safe.
#ifndef KVCAST_SERVICES_COMMON_GRPC_SERVER_H_
#define KVCAST_SERVICES_COMMON_GRPC_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace kvcast::services {

struct GrpcServerOptions {
  std::string listen;     // "HOST:PORT" or "[V6]:PORT"; port 0 picks a free port.
  std::string cert_file;  // PEM certificate chain; with key_file enables TLS.
  std::string key_file;   // PEM private key.
  std::string ca_file;    // PEM CA bundle: require and verify client certificates.
};

// A service and the name health checks use for it: the generated class's
// service_full_name() (grpc::Service does not expose its own name).
struct NamedService {
  std::string full_name;
  grpc::Service* service;  // Borrowed; must outlive the GrpcServer.
};

class GrpcServer {
 public:
  // Builds and starts the server. Errors: INVALID_ARGUMENT for a malformed
  // listen address, cert_file without key_file (or the reverse), ca_file
  // without them, or a file that is not PEM (naming it); the errno's code
  // naming the file when a PEM file cannot be read; "bind ADDRESS: <strerror>"
  // when the port cannot be bound; UNKNOWN when gRPC refuses to start
  // otherwise (e.g. a key that does not match its certificate).
  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(const GrpcServerOptions& options,
                                                          std::vector<NamedService> services);
  // Shutdown(absl::ZeroDuration()) unless already shut down.
  ~GrpcServer();
  GrpcServer(const GrpcServer&) = delete;
  GrpcServer& operator=(const GrpcServer&) = delete;

  int port() const { return port_; }
  bool tls() const { return tls_; }
  grpc::Server* server() { return server_.get(); }

  // Sets the health status of "" and every service (no effect after Shutdown).
  void SetServing(bool serving);
  // Marks every health status NOT_SERVING, stops accepting calls, lets calls
  // in flight finish for up to `grace`, then cancels the rest, and returns
  // once every handler has returned (handlers should watch
  // ServerContext::IsCancelled()). Later calls return at once.
  void Shutdown(absl::Duration grace);

 private:
  GrpcServer(std::unique_ptr<grpc::Server> server, int port, bool tls,
             std::vector<std::string> names);
  const std::unique_ptr<grpc::Server> server_;
  const int port_;
  const bool tls_;
  const std::vector<std::string> health_names_;  // "" first.
  absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

// Client credentials from PEM files: insecure when all three are empty,
// TLS otherwise (ca_file empty: the system roots; cert_file + key_file: a
// client certificate for mutual TLS). Errors as for GrpcServer::Start.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ClientCredentials(
    const std::string& cert_file, const std::string& key_file, const std::string& ca_file);

// A channel to `target` with the keepalive, message-size and reconnect
// settings described above. Connects lazily. `tls_name` (TLS only): the
// name the peer's certificate must carry instead of `target`'s host (for
// peers reached by IP address, e.g. pods).
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target,
                                           std::shared_ptr<grpc::ChannelCredentials> creds,
                                           const std::string& tls_name = "");

}  // namespace kvcast::services

#endif  // KVCAST_SERVICES_COMMON_GRPC_SERVER_H_
