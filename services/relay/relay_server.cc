#include "services/relay/relay_server.h"

#include <sched.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "common/status_macros.h"
#include "services/common/grpc_server.h"
#include "services/common/log.h"
#include "services/common/metrics_server.h"
#include "services/common/moqt_auth_metrics.h"
#include "transport/moqt/moqt_endpoint.h"
#include "transport/moqt/relay.h"
#include "transport/moqt/tools/tool_flags.h"

namespace kvcast::moqt {
namespace {

// The disk tier, when asked for.
absl::StatusOr<std::unique_ptr<GroupSpill>> OpenSpill(const RelayServerOptions& o) {
  if (o.spill_dir.empty()) return nullptr;
  ASSIGN_OR_RETURN(auto spill, GroupSpill::Open(o.spill_dir, uint64_t(o.spill_mb) << 20));
  const GroupSpill::Stats s = spill->stats();
  services::Log().info("spill {}: {} groups ({} bytes) from before, {} rejected",
                       o.spill_dir.c_str(), (unsigned long long)s.groups,
                       (unsigned long long)s.bytes, (unsigned long long)s.rejected);
  return spill;
}

// The relay's gauges; its state lives on the loop thread and is read there.
void ExportMetrics(quic::EventLoop* loop, Relay* relay, MoqtServer* server, GroupSpill* spill,
                   const std::shared_ptr<HmacTokenAuthority>& authority,
                   services::MetricsRegistry* metrics) {
  auto on_loop = [loop](std::function<double()> read) {
    return [loop, read] {
      auto value = std::make_shared<std::atomic<double>>(0);
      auto done = std::make_shared<absl::Notification>();
      loop->Post([=] {
        value->store(read());
        done->Notify();
      });
      done->WaitForNotificationWithTimeout(absl::Seconds(1));
      return value->load();
    };
  };
  metrics->AddCallbackGauge("kvcast_relay_sessions", "MoQT sessions",
                            on_loop([server] { return double(server->num_sessions()); }));
  metrics->AddCallbackGauge("kvcast_relay_cache_bytes", "object cache size",
                            on_loop([relay] { return double(relay->cache().bytes()); }));
  if (spill != nullptr) {
    using S = GroupSpill::Stats;
    for (const auto& [what, field] : std::vector<std::pair<std::string, uint64_t S::*>>{
             {"bytes", &S::bytes}, {"groups", &S::groups}, {"writes", &S::writes},
             {"reads", &S::reads}, {"evictions", &S::evictions}, {"rejected", &S::rejected}}) {
      metrics->AddCallbackGauge(absl::StrCat("kvcast_relay_spill_", what),
                                absl::StrCat("cache disk tier: ", what),
                                [spill, field = field] { return double(spill->stats().*field); });
    }
  }
  metrics->AddCallbackGauge("kvcast_relay_cache_tracks", "tracks in the cache",
                            on_loop([relay] { return double(relay->cache().num_tracks()); }));
  metrics->AddCallbackGauge("kvcast_relay_served_from_cache", "requests answered from cache",
                            on_loop([relay] { return double(relay->stats().served_from_cache); }));
  metrics->AddCallbackGauge("kvcast_relay_upstream_requests", "subscribes + fetches sent upstream",
                            on_loop([relay] {
                              return double(relay->stats().upstream_subscribes +
                                            relay->stats().upstream_fetches);
                            }));
  metrics->AddCallbackGauge("kvcast_relay_paced_waits",
                            "times a downstream's send queue was full and objects waited",
                            on_loop([relay] { return double(relay->stats().paced_waits); }));
  metrics->AddCallbackGauge("kvcast_relay_too_far_behind",
                            "downstreams ended because the cache evicted what they still needed",
                            on_loop([relay] { return double(relay->stats().fell_behind_cache); }));
  if (authority) services::ExportMoqtAuthMetrics(authority, metrics);
}

// Stops `loop` on SIGINT or SIGTERM; returns the signalfd (to close).
absl::StatusOr<int> StopOnSignals(quic::EventLoop* loop) {
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGTERM);
  sigprocmask(SIG_BLOCK, &mask, nullptr);
  const int sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
  RETURN_IF_ERROR(loop->AddFd(sfd, [loop, sfd] {
    signalfd_siginfo info;
    while (read(sfd, &info, sizeof(info)) == sizeof(info)) {
    }
    loop->Stop();
  }));
  return sfd;
}

// `configured`, or (0) the cores this process may use: its CPU affinity,
// capped by its cgroup's CPU quota (a container's CPU limit).
int LoopThreads(int configured) {
  if (configured > 0) return configured;
  int affinity = int(std::thread::hardware_concurrency());
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) affinity = CPU_COUNT(&set);
  std::ifstream file("/sys/fs/cgroup/cpu.max");  // absent: no quota
  std::string cpu_max;
  std::getline(file, cpu_max);
  return DefaultLoopThreads(affinity, cpu_max);
}

}  // namespace

int DefaultLoopThreads(int affinity_cores, const std::string& cpu_max) {
  int cores = std::max(1, affinity_cores);
  std::vector<std::string> fields = absl::StrSplit(absl::StripAsciiWhitespace(cpu_max), ' ');
  double quota = 0, period = 0;
  if (fields.size() == 2 && absl::SimpleAtod(fields[0], &quota) &&
      absl::SimpleAtod(fields[1], &period) && quota > 0 && period > 0) {
    cores = std::min(cores, std::max(1, int(std::ceil(quota / period))));
  }
  return cores;
}

absl::Status ValidateRelayOptions(const RelayServerOptions& o) {
  if (o.tls.cert_file.empty() || o.tls.key_file.empty()) {
    return absl::InvalidArgumentError(
        "--cert and --key are required (make development ones with kvcast-devcert)");
  }
  if (o.cache_mb <= 0) return absl::InvalidArgumentError("--cache_mb must be positive");
  if (o.send_window_kb <= 0) return absl::InvalidArgumentError("--send_window_kb must be positive");
  if (o.loop_threads < 0 || o.loop_threads > 128) {
    return absl::InvalidArgumentError("--loop_threads must be 0 (one per core) to 128");
  }
  if (o.auth_key_file.empty() && !o.insecure) {
    return absl::InvalidArgumentError(
        "--auth_key_file is required (the MoQT authorization keys the scheduler signs tokens "
        "with; `kvcast-devcert` writes one); --insecure serves requests without tokens, for "
        "development only");
  }
  const int32_t udp = o.quic_max_udp_payload;
  if (udp != 0 && (udp < 1200 || udp > 16384)) {
    return absl::InvalidArgumentError("--quic_max_udp_payload must be 0 or 1200..16384");
  }
  if ((!o.spill_dir.empty() || o.spill_mb != 0) && (o.spill_dir.empty() || o.spill_mb <= 0)) {
    return absl::InvalidArgumentError("--spill_dir and a positive --spill_mb go together");
  }
  return absl::OkStatus();
}

absl::Status RunRelay(const RelayServerOptions& o) {
  ASSIGN_OR_RETURN(auto addr, ParseHostPort(o.listen));
  RETURN_IF_ERROR(ValidateRelayOptions(o));
  SessionOptions session_options;
  std::shared_ptr<HmacTokenAuthority> authority;
  if (!o.auth_key_file.empty()) {
    ASSIGN_OR_RETURN(authority, HmacTokenAuthority::FromFile(o.auth_key_file));
    session_options.authorizer = authority;
  } else {
    services::Log().warn(
        "--insecure: any client that connects may publish, subscribe to and fetch any track");
  }
  ASSIGN_OR_RETURN(auto loop, quic::EventLoop::Create());
  // Before any thread starts (the spill's writer, the server's loops): they
  // inherit the blocked signals, so SIGTERM reaches the signalfd, not them.
  ASSIGN_OR_RETURN(const int sfd, StopOnSignals(loop.get()));
  quic::TransportOptions transport;
  transport.idle_timeout = o.idle_timeout;
  transport.max_udp_payload = o.quic_max_udp_payload;
  RelayOptions relay_options;
  relay_options.cache_bytes = uint64_t(o.cache_mb) << 20;
  relay_options.send_window_bytes = uint64_t(o.send_window_kb) << 10;
  relay_options.subscribe_wait = o.subscribe_wait;
  ASSIGN_OR_RETURN(std::unique_ptr<GroupSpill> spill, OpenSpill(o));
  relay_options.spill = spill.get();
  quic::EventLoop* l = loop.get();
  Relay relay(l, relay_options);
  ASSIGN_OR_RETURN(auto server, MoqtServer::Create(l, addr.first, addr.second, o.tls, transport,
                                                   session_options, &relay,
                                                   LoopThreads(o.loop_threads)));
  std::function<void()> print_stats = [&] {
    const auto& s = relay.stats();
    std::printf("sessions=%zu cache_bytes=%llu tracks=%zu upstream_subscribes=%llu "
                "upstream_fetches=%llu served_from_cache=%llu conflicts=%llu\n",
                server->num_sessions(), (unsigned long long)relay.cache().bytes(),
                relay.cache().num_tracks(), (unsigned long long)s.upstream_subscribes,
                (unsigned long long)s.upstream_fetches,
                (unsigned long long)s.served_from_cache, (unsigned long long)s.conflicts);
    std::fflush(stdout);
    l->RunAfter(absl::Seconds(o.stats_interval_s), print_stats);
  };
  if (o.stats_interval_s > 0) l->RunAfter(absl::Seconds(o.stats_interval_s), print_stats);
  // Health (gRPC) and metrics (HTTP) for Kubernetes probes and Prometheus.
  std::unique_ptr<services::GrpcServer> health;
  if (!o.grpc_listen.empty()) {
    services::GrpcServerOptions options;
    options.listen = o.grpc_listen;
    ASSIGN_OR_RETURN(health, services::GrpcServer::Start(options, {}));
  }
  services::MetricsRegistry metrics;
  std::unique_ptr<services::MetricsServer> metrics_server;
  if (!o.metrics_listen.empty()) {
    ExportMetrics(l, &relay, server.get(), spill.get(), authority, &metrics);
    ASSIGN_OR_RETURN(metrics_server, services::MetricsServer::Start(o.metrics_listen, &metrics));
  }
  std::printf("kvcast-relay listening on udp %s:%u (draft-14, ALPN moq-00, cache %lld MiB, "
              "%s)\n",
              addr.first.c_str(), server->port(), static_cast<long long>(o.cache_mb),
              authority ? "tokens required" : "NO authorization");
  std::fflush(stdout);
  l->Run();
  if (health) health->Shutdown(absl::ZeroDuration());
  metrics_server.reset();
  l->RemoveFd(sfd);
  close(sfd);
  server.reset();
  std::printf("kvcast-relay: shut down\n");
  return absl::OkStatus();
}

}  // namespace kvcast::moqt
