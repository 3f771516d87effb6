// RunRelay: a kvcast-relay process, from its options to its shutdown: the
// caching MoQT relay (//transport/moqt:relay) on QUIC, its optional disk
// tier, gRPC health and Prometheus metrics. relay_main.cc only turns flags
// into RelayServerOptions.
#ifndef KVCAST_SERVICES_RELAY_RELAY_SERVER_H_
#define KVCAST_SERVICES_RELAY_RELAY_SERVER_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "transport/quic/endpoint.h"

namespace kvcast::moqt {

struct RelayServerOptions {
  std::string listen = "127.0.0.1:4433";  // UDP HOST:PORT
  quic::TlsOptions tls;                   // cert_file and key_file are required
  std::string auth_key_file;              // required unless `insecure`
  bool insecure = false;
  int64_t cache_mb = 1024;
  std::string spill_dir;  // with a positive spill_mb: the cache's disk tier
  int64_t spill_mb = 0;
  int64_t send_window_kb = 8192;
  // Loops serving the QUIC connections (decryption, encryption, system
  // calls), sessions and cache on the first (MoqtServer::Create); 0: one
  // per core this process may use (DefaultLoopThreads).
  int loop_threads = 0;
  absl::Duration subscribe_wait = absl::ZeroDuration();
  absl::Duration idle_timeout = absl::Seconds(30);
  int32_t quic_max_udp_payload = 0;  // 0: the default with path MTU discovery
  int64_t stats_interval_s = 0;      // > 0: a stats line on stdout this often
  std::string grpc_listen;           // grpc.health.v1; empty: off
  std::string metrics_listen;        // Prometheus /metrics; empty: off
};

// InvalidArgument naming the option (as its flag) when one is missing or
// out of range.
absl::Status ValidateRelayOptions(const RelayServerOptions& options);

// --loop_threads 0: the cores this process may use, `affinity_cores` (its
// CPU affinity) capped by a cgroup v2 CPU quota, `cpu_max` being the text
// of the cgroup's cpu.max ("QUOTA PERIOD", or "max PERIOD" for none; empty
// when there is no such file), rounded up; at least 1.
int DefaultLoopThreads(int affinity_cores, const std::string& cpu_max);

// Serves until SIGINT or SIGTERM, then closes every session
// (CONNECTION_CLOSE, no error). Errors: invalid options, a key file or
// spill directory that cannot be read, a port that cannot be bound.
absl::Status RunRelay(const RelayServerOptions& options);

}  // namespace kvcast::moqt

#endif  // KVCAST_SERVICES_RELAY_RELAY_SERVER_H_
