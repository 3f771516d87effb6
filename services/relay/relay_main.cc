// kvcast-relay: a caching MoQT (draft-14) relay over raw QUIC.
//
//   kvcast-relay --listen 0.0.0.0:4433 --cert relay.pem --key relay-key.pem \
//                --auth_key_file moqt-auth.key --cache_mb 1024
//
// SIGINT/SIGTERM: closes every session (CONNECTION_CLOSE, no error) and
// exits 0.
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "services/common/grpc_server.h"
#include "services/common/metrics_server.h"
#include "services/common/moqt_auth_metrics.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "transport/moqt/moqt_endpoint.h"
#include "transport/moqt/relay.h"
#include "transport/moqt/tools/tool_flags.h"

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
ABSL_FLAG(int64_t, subscribe_wait_ms, 0,
          "how long a SUBSCRIBE for an unannounced namespace waits for a publisher");
ABSL_FLAG(int64_t, idle_timeout_s, 30, "QUIC idle timeout in seconds");
ABSL_FLAG(int32_t, quic_max_udp_payload, 0,
          "largest QUIC datagram sent, bytes (0: 1452 with path MTU discovery; up to 16384 on "
          "paths that carry them)");
ABSL_FLAG(int64_t, stats_interval_s, 0, "print cache/session stats every N seconds (0: off)");
ABSL_FLAG(std::string, grpc_listen, "", "gRPC HOST:PORT serving grpc.health.v1 (empty: off)");
ABSL_FLAG(std::string, metrics_listen, "", "HTTP HOST:PORT of Prometheus /metrics (empty: off)");

namespace kvcast::moqt {
namespace {

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "kvcast-relay: %s\n", std::string(s.ToString()).c_str());
  return 1;
}

int Main() {
  auto addr = ParseHostPort(absl::GetFlag(FLAGS_listen));
  if (!addr.ok()) return Fail(addr.status());
  if (absl::GetFlag(FLAGS_cert).empty() || absl::GetFlag(FLAGS_key).empty()) {
    return Fail(absl::InvalidArgumentError(
        "--cert and --key are required (make development ones with kvcast-devcert)"));
  }
  if (absl::GetFlag(FLAGS_cache_mb) <= 0) {
    return Fail(absl::InvalidArgumentError("--cache_mb must be positive"));
  }
  if (absl::GetFlag(FLAGS_send_window_kb) <= 0) {
    return Fail(absl::InvalidArgumentError("--send_window_kb must be positive"));
  }
  SessionOptions session_options;
  const std::string auth_keys = absl::GetFlag(FLAGS_auth_key_file);
  std::shared_ptr<HmacTokenAuthority> authority;
  if (!auth_keys.empty()) {
    auto a = HmacTokenAuthority::FromFile(auth_keys);
    if (!a.ok()) return Fail(a.status());
    authority = *a;
    session_options.authorizer = authority;
  } else if (absl::GetFlag(FLAGS_insecure)) {
    std::fprintf(stderr, "kvcast-relay: WARNING: --insecure: any client that connects may "
                         "publish, subscribe to and fetch any track\n");
  } else {
    return Fail(absl::InvalidArgumentError(
        "--auth_key_file is required (the MoQT authorization keys the scheduler signs tokens "
        "with; `kvcast-devcert` writes one); --insecure serves requests without tokens, for "
        "development only"));
  }
  auto loop = quic::EventLoop::Create();
  if (!loop.ok()) return Fail(loop.status());

  quic::TlsOptions tls;
  tls.cert_file = absl::GetFlag(FLAGS_cert);
  tls.key_file = absl::GetFlag(FLAGS_key);
  tls.ca_file = absl::GetFlag(FLAGS_client_ca);
  tls.require_client_cert = absl::GetFlag(FLAGS_require_client_cert);
  quic::TransportOptions transport;
  transport.idle_timeout = absl::Seconds(absl::GetFlag(FLAGS_idle_timeout_s));
  const int32_t udp = absl::GetFlag(FLAGS_quic_max_udp_payload);
  if (udp != 0 && (udp < 1200 || udp > 16384)) {
    return Fail(absl::InvalidArgumentError("--quic_max_udp_payload must be 0 or 1200..16384"));
  }
  transport.max_udp_payload = udp;
  RelayOptions relay_options;
  relay_options.cache_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_cache_mb)) << 20;
  relay_options.send_window_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_send_window_kb)) << 10;
  relay_options.subscribe_wait = absl::Milliseconds(absl::GetFlag(FLAGS_subscribe_wait_ms));
  std::unique_ptr<GroupSpill> spill;
  if (!absl::GetFlag(FLAGS_spill_dir).empty() || absl::GetFlag(FLAGS_spill_mb) != 0) {
    if (absl::GetFlag(FLAGS_spill_dir).empty() || absl::GetFlag(FLAGS_spill_mb) <= 0) {
      return Fail(absl::InvalidArgumentError("--spill_dir and a positive --spill_mb go together"));
    }
    auto opened = GroupSpill::Open(absl::GetFlag(FLAGS_spill_dir),
                                   static_cast<uint64_t>(absl::GetFlag(FLAGS_spill_mb)) << 20);
    if (!opened.ok()) return Fail(opened.status());
    spill = std::move(*opened);
    const GroupSpill::Stats s = spill->stats();
    std::fprintf(stderr, "kvcast-relay: spill %s: %llu groups (%llu bytes) from before, %llu rejected\n",
                 absl::GetFlag(FLAGS_spill_dir).c_str(), (unsigned long long)s.groups,
                 (unsigned long long)s.bytes, (unsigned long long)s.rejected);
    relay_options.spill = spill.get();
  }

  Relay relay(loop->get(), relay_options);
  auto server = MoqtServer::Create(loop->get(), addr->first, addr->second, tls, transport,
                                   session_options, &relay);
  if (!server.ok()) return Fail(server.status());

  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGTERM);
  sigprocmask(SIG_BLOCK, &mask, nullptr);
  int sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
  quic::EventLoop* l = loop->get();
  absl::Status st = l->AddFd(sfd, [l, sfd] {
    signalfd_siginfo info;
    while (read(sfd, &info, sizeof(info)) == sizeof(info)) {
    }
    l->Stop();
  });
  if (!st.ok()) return Fail(st);

  int64_t interval = absl::GetFlag(FLAGS_stats_interval_s);
  std::function<void()> print_stats = [&] {
    const auto& s = relay.stats();
    std::printf("sessions=%zu cache_bytes=%llu tracks=%zu upstream_subscribes=%llu "
                "upstream_fetches=%llu served_from_cache=%llu conflicts=%llu\n",
                (*server)->num_sessions(), (unsigned long long)relay.cache().bytes(),
                relay.cache().num_tracks(), (unsigned long long)s.upstream_subscribes,
                (unsigned long long)s.upstream_fetches,
                (unsigned long long)s.served_from_cache, (unsigned long long)s.conflicts);
    std::fflush(stdout);
    l->RunAfter(absl::Seconds(interval), print_stats);
  };
  if (interval > 0) l->RunAfter(absl::Seconds(interval), print_stats);

  // Health (gRPC) and metrics (HTTP) for Kubernetes probes and Prometheus.
  std::unique_ptr<services::GrpcServer> health;
  if (!absl::GetFlag(FLAGS_grpc_listen).empty()) {
    services::GrpcServerOptions options;
    options.listen = absl::GetFlag(FLAGS_grpc_listen);
    auto h = services::GrpcServer::Start(options, {});
    if (!h.ok()) return Fail(h.status());
    health = std::move(*h);
  }
  services::MetricsRegistry metrics;
  std::unique_ptr<services::MetricsServer> metrics_server;
  if (!absl::GetFlag(FLAGS_metrics_listen).empty()) {
    // Relay state lives on the loop thread: read it there.
    auto on_loop = [l](std::function<double()> read) {
      return [l, read] {
        auto value = std::make_shared<std::atomic<double>>(0);
        auto done = std::make_shared<absl::Notification>();
        l->Post([=] {
          value->store(read());
          done->Notify();
        });
        done->WaitForNotificationWithTimeout(absl::Seconds(1));
        return value->load();
      };
    };
    Relay* r = &relay;
    MoqtServer* srv = server->get();
    metrics.AddCallbackGauge("kvcast_relay_sessions", "MoQT sessions",
                             on_loop([srv] { return double(srv->num_sessions()); }));
    metrics.AddCallbackGauge("kvcast_relay_cache_bytes", "object cache size",
                             on_loop([r] { return double(r->cache().bytes()); }));
    if (GroupSpill* sp = spill.get()) {
      using S = GroupSpill::Stats;
      for (const auto& [what, field] : std::vector<std::pair<std::string, uint64_t S::*>>{
               {"bytes", &S::bytes}, {"groups", &S::groups}, {"writes", &S::writes},
               {"reads", &S::reads}, {"evictions", &S::evictions}, {"rejected", &S::rejected}}) {
        metrics.AddCallbackGauge(absl::StrCat("kvcast_relay_spill_", what),
                                 absl::StrCat("cache disk tier: ", what),
                                 [sp, field = field] { return double(sp->stats().*field); });
      }
    }
    metrics.AddCallbackGauge("kvcast_relay_cache_tracks", "tracks in the cache",
                             on_loop([r] { return double(r->cache().num_tracks()); }));
    metrics.AddCallbackGauge("kvcast_relay_served_from_cache", "requests answered from cache",
                             on_loop([r] { return double(r->stats().served_from_cache); }));
    metrics.AddCallbackGauge("kvcast_relay_upstream_requests", "subscribes + fetches sent upstream",
                             on_loop([r] {
                               return double(r->stats().upstream_subscribes +
                                             r->stats().upstream_fetches);
                             }));
    metrics.AddCallbackGauge("kvcast_relay_paced_waits",
                             "times a downstream's send queue was full and objects waited",
                             on_loop([r] { return double(r->stats().paced_waits); }));
    metrics.AddCallbackGauge("kvcast_relay_too_far_behind",
                             "downstreams ended because the cache evicted what they still needed",
                             on_loop([r] { return double(r->stats().fell_behind_cache); }));
    if (authority) services::ExportMoqtAuthMetrics(authority, &metrics);
    auto ms = services::MetricsServer::Start(absl::GetFlag(FLAGS_metrics_listen), &metrics);
    if (!ms.ok()) return Fail(ms.status());
    metrics_server = std::move(*ms);
  }

  std::printf("kvcast-relay listening on udp %s:%u (draft-14, ALPN moq-00, cache %lld MiB, "
              "%s)\n",
              addr->first.c_str(), (*server)->port(),
              static_cast<long long>(absl::GetFlag(FLAGS_cache_mb)),
              authority ? "tokens required" : "NO authorization");
  std::fflush(stdout);
  l->Run();
  if (health) health->Shutdown(absl::ZeroDuration());
  metrics_server.reset();
  l->RemoveFd(sfd);
  close(sfd);
  server->reset();
  std::printf("kvcast-relay: shut down\n");
  return 0;
}

}  // namespace
}  // namespace kvcast::moqt

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  // Debian's Abseil is built with its debug checks: every Mutex operation
  // would feed the deadlock detector's graph (7% of the scheduler's CPU per
  // request, docs/benchmarks.md). Tests keep it; the servers do not.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return kvcast::moqt::Main();
}
