// kvcast-relay: a caching MoQT (draft-14) relay over raw QUIC.
//
//   kvcast-relay --listen 0.0.0.0:4433 --cert relay.pem --key relay-key.pem \
//                --auth_key_file moqt-auth.key --cache_mb 1024
//
// SIGINT/SIGTERM: closes every session (CONNECTION_CLOSE, no error) and
// exits 0.
// (Flags become RelayServerOptions; relay_server.h runs them.)
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/synchronization/mutex.h"
#include "services/common/log.h"
#include "services/relay/relay_server.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:4433", "UDP address to listen on (HOST:PORT)");
ABSL_FLAG(std::string, cert, "", "server certificate chain (PEM)");
ABSL_FLAG(std::string, key, "", "server private key (PEM)");
ABSL_FLAG(std::string, client_ca, "", "CA (PEM) that client certificates must chain to");
ABSL_FLAG(bool, require_client_cert, false, "mutual TLS: refuse clients without a certificate");
ABSL_FLAG(std::string, auth_key_file, "",
          "MoQT authorization keys (one per line, >= 32 bytes): PUBLISH_NAMESPACE, SUBSCRIBE, "
          "FETCH, TRACK_STATUS, SUBSCRIBE_NAMESPACE and PUBLISH need a token signed with one; "
          "required unless --insecure");
ABSL_FLAG(bool, insecure, false,
          "development only: serve MoQT requests without an AUTHORIZATION TOKEN");
ABSL_FLAG(int64_t, cache_mb, 1024, "object cache budget in MiB");
ABSL_FLAG(std::string, spill_dir, "",
          "directory of the cache's disk tier: complete groups evicted from memory go there "
          "and are served again, also after a restart; empty: none");
ABSL_FLAG(int64_t, spill_mb, 0, "disk tier budget in MiB (with --spill_dir)");
ABSL_FLAG(int64_t, send_window_kb, 8192,
          "per downstream request: KiB its send queue may hold before objects wait in the "
          "cache for it (a slow subscriber costs about this much)");
ABSL_FLAG(int32_t, loop_threads, 0,
          "loops serving the QUIC connections (decryption, encryption, system calls), "
          "connections placed round robin; the sessions and the cache run on the first. "
          "0: one per core this process may use (its CPU affinity, capped by a cgroup CPU "
          "quota: a container's CPU limit)");
ABSL_FLAG(int64_t, subscribe_wait_ms, 0,
          "how long a SUBSCRIBE for an unannounced namespace waits for a publisher");
ABSL_FLAG(int64_t, idle_timeout_s, 30, "QUIC idle timeout in seconds");
ABSL_FLAG(int32_t, quic_max_udp_payload, 0,
          "largest QUIC datagram sent, bytes (0: by path: 16376 to a peer on this host, path MTU "
          "discovery up to the route's MTU on jumbo-frame routes, else 1452 and discovery; set: "
          "up to 16384 from the first packet, for paths that carry them, e.g. 8952 on a "
          "jumbo-frame network): fewer packets, less CPU per KV byte");
ABSL_FLAG(int64_t, stats_interval_s, 0, "print cache/session stats every N seconds (0: off)");
ABSL_FLAG(std::string, grpc_listen, "", "gRPC HOST:PORT serving grpc.health.v1 (empty: off)");
ABSL_FLAG(std::string, metrics_listen, "", "HTTP HOST:PORT of Prometheus /metrics (empty: off)");
ABSL_FLAG(std::string, log_level, "info",
          "log lines at this level and above: trace, debug, info, warn, error, critical, off");

namespace {

kvcast::moqt::RelayServerOptions OptionsFromFlags() {
  kvcast::moqt::RelayServerOptions o;
  o.listen = absl::GetFlag(FLAGS_listen);
  o.tls.cert_file = absl::GetFlag(FLAGS_cert);
  o.tls.key_file = absl::GetFlag(FLAGS_key);
  o.tls.ca_file = absl::GetFlag(FLAGS_client_ca);
  o.tls.require_client_cert = absl::GetFlag(FLAGS_require_client_cert);
  o.auth_key_file = absl::GetFlag(FLAGS_auth_key_file);
  o.insecure = absl::GetFlag(FLAGS_insecure);
  o.cache_mb = absl::GetFlag(FLAGS_cache_mb);
  o.spill_dir = absl::GetFlag(FLAGS_spill_dir);
  o.spill_mb = absl::GetFlag(FLAGS_spill_mb);
  o.send_window_kb = absl::GetFlag(FLAGS_send_window_kb);
  o.loop_threads = absl::GetFlag(FLAGS_loop_threads);
  o.subscribe_wait = absl::Milliseconds(absl::GetFlag(FLAGS_subscribe_wait_ms));
  o.idle_timeout = absl::Seconds(absl::GetFlag(FLAGS_idle_timeout_s));
  o.quic_max_udp_payload = absl::GetFlag(FLAGS_quic_max_udp_payload);
  o.stats_interval_s = absl::GetFlag(FLAGS_stats_interval_s);
  o.grpc_listen = absl::GetFlag(FLAGS_grpc_listen);
  o.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  // Debian's Abseil is built with its debug checks: every Mutex operation
  // would feed the deadlock detector's graph (7% of the scheduler's CPU per
  // request, docs/benchmarks.md). Tests keep it; the servers do not.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  absl::Status s = kvcast::services::InitLogging("kvcast-relay", absl::GetFlag(FLAGS_log_level));
  if (s.ok()) s = kvcast::moqt::RunRelay(OptionsFromFlags());
  if (s.ok()) return 0;
  std::fprintf(stderr, "kvcast-relay: %s\n", s.ToString().c_str());
  return 1;
}
