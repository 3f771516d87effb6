// kvcast-scheduler: the entry point of a kvcast cluster (docs/services.md).
// Serves kvcast.v1.Generation to clients and kvcast.v1.Registry to workers,
// grpc.health.v1 on the same port, Prometheus /metrics, and (--http_listen)
// the OpenAI-compatible HTTP API (docs/openai-api.md).
// Flags become SchedulerServerOptions; scheduler_server.h runs them.
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/synchronization/mutex.h"
#include "services/common/log.h"
#include "services/common/shutdown.h"
#include "services/scheduler/scheduler_server.h"

ABSL_FLAG(std::string, grpc_listen, "0.0.0.0:50051", "gRPC HOST:PORT");
ABSL_FLAG(std::string, grpc_cert, "", "gRPC server certificate (PEM); TLS when set");
ABSL_FLAG(std::string, grpc_key, "", "gRPC server key (PEM)");
ABSL_FLAG(std::string, grpc_ca, "", "CA (PEM): require client certificates, verify workers");
ABSL_FLAG(std::string, internal_grpc_listen, "",
          "HOST:PORT of kvcast.v1.Registry for the workers, apart from the public API; "
          "empty: Registry is served on --grpc_listen");
ABSL_FLAG(std::string, internal_grpc_cert, "",
          "certificate (PEM) of the internal port, also presented to workers when calling them");
ABSL_FLAG(std::string, internal_grpc_key, "", "its key (PEM)");
ABSL_FLAG(std::string, internal_grpc_ca, "",
          "CA (PEM): mutual TLS with the workers on the internal port and on calls to them");
ABSL_FLAG(std::string, worker_tls_name, "",
          "name the workers' gRPC certificates must carry (they are called at their advertised "
          "address, e.g. a pod IP); empty: that address");
ABSL_FLAG(std::string, metrics_listen, "0.0.0.0:9090", "HTTP HOST:PORT of /metrics; empty: off");
ABSL_FLAG(std::string, http_listen, "",
          "HOST:PORT of the OpenAI-compatible HTTP API (e.g. 0.0.0.0:8000); empty: off");
ABSL_FLAG(int, http_threads, 2, "I/O threads of the HTTP API");
ABSL_FLAG(int, http_work_threads, 2,
          "threads that parse, render and tokenize HTTP API requests (0: on the I/O threads)");
ABSL_FLAG(std::string, http_cert, "",
          "certificate chain (PEM) of the HTTP API: HTTPS (TLS 1.2+); empty: plaintext, e.g. "
          "behind a gateway that terminates TLS");
ABSL_FLAG(std::string, http_key, "", "its private key (PEM)");
ABSL_FLAG(std::string, api_keys_file, "",
          "file of `KEY TENANT` lines: the HTTP API and kvcast.v1.Generation then need "
          "`Authorization: Bearer KEY`");
ABSL_FLAG(int, tenant_max_in_flight, 0,
          "requests one tenant may have in flight (0: no limit); more get RESOURCE_EXHAUSTED "
          "(HTTP 429)");
ABSL_FLAG(int64_t, tenant_prompt_tokens_per_minute, 0,
          "prompt tokens one tenant may send per minute (0: no limit); more get "
          "RESOURCE_EXHAUSTED (HTTP 429) with a retry-after");
ABSL_FLAG(std::string, moqt_auth_key_file, "",
          "MoQT authorization keys (the workers' and the relay's file): each KV source handed "
          "to a worker carries a token for that prompt only; empty: no tokens (workers and "
          "relays that require them then refuse, and decode recomputes)");
ABSL_FLAG(double, kv_token_ttl_s, 600, "lifetime of those tokens");
ABSL_FLAG(double, decode_stall_s, 2,
          "a decode stream silent for max(this, 10 x its mean time between tokens) is resumed "
          "on another decode worker");
ABSL_FLAG(double, decode_first_message_s, 5,
          "how long a decode stream may take to its first message (decode workers send a "
          "keepalive every 0.5 s while they land KV or compute)");
ABSL_FLAG(double, prefill_stall_s, 10,
          "a prefill call unanswered after this + 10 x the observed time per prompt token x "
          "its tokens is retried on another prefill worker");
ABSL_FLAG(double, lease_s, 10, "a worker silent this long is dropped");
ABSL_FLAG(double, worker_quiet_s, 3,
          "a worker not heard from this long gets new requests only when no other worker of "
          "its role is left (it may be frozen); above the workers' --heartbeat_s");
ABSL_FLAG(int, max_queue, 256, "requests in flight at most; more get RESOURCE_EXHAUSTED");
ABSL_FLAG(int, max_tokens_limit, 4096, "largest max_tokens a request may ask for");
ABSL_FLAG(std::string, model, "", "model (.gguf file or HF directory) to read the tokenizer from (text prompts)");
ABSL_FLAG(std::string, kv_compression, "fp16",
          "KV track decode workers subscribe to, or \"abr\": each decode worker picks a track "
          "per 128-token group from the bandwidth it measures (its --kv_abr_* flags)");
ABSL_FLAG(int, pd_fusion_tokens, kvcast::scheduler::RouterOptions().fuse_tokens,
          "PD fusion: a request whose decode worker would compute at most this many prompt "
          "tokens itself (short, or a prefix it holds) runs there, without prefill or KV "
          "handoff; 0: always disaggregate");
ABSL_FLAG(double, router_host_weight, kvcast::scheduler::RouterOptions().host_weight,
          "router: cost of promoting a token's KV from a worker's host tier, relative to "
          "computing it (the default is this project's 2-core CPU; GPUs: higher)");
ABSL_FLAG(double, router_disk_weight, kvcast::scheduler::RouterOptions().disk_weight,
          "router: the same from a worker's disk tier");
ABSL_FLAG(bool, prefix_reuse, true,
          "route to cached prefixes and fetch published ones (false: for A/B runs)");
ABSL_FLAG(std::string, log_level, "info",
          "log lines at this level and above: trace, debug, info, warn, error, critical, off");
ABSL_FLAG(double, drain_s, 30, "on SIGTERM: finish in-flight requests for up to this long");
ABSL_FLAG(double, planner_interval_s, 30,
          "how often the planner sizes each role for the SLOs and exports "
          "kvcast_planner_desired_replicas (0: off)");
ABSL_FLAG(double, slo_ttft_ms, 2000, "the planner's time-to-first-token target");
ABSL_FLAG(double, slo_itl_ms, 100, "the planner's inter-token latency target");

namespace {

using kvcast::scheduler::SchedulerServerOptions;

SchedulerServerOptions OptionsFromFlags() {
  SchedulerServerOptions o;
  o.grpc_listen = absl::GetFlag(FLAGS_grpc_listen);
  o.grpc_tls = {absl::GetFlag(FLAGS_grpc_cert), absl::GetFlag(FLAGS_grpc_key),
                absl::GetFlag(FLAGS_grpc_ca)};
  o.internal_grpc_listen = absl::GetFlag(FLAGS_internal_grpc_listen);
  o.internal_tls = {absl::GetFlag(FLAGS_internal_grpc_cert), absl::GetFlag(FLAGS_internal_grpc_key),
                    absl::GetFlag(FLAGS_internal_grpc_ca)};
  o.worker_tls_name = absl::GetFlag(FLAGS_worker_tls_name);
  o.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  o.http_listen = absl::GetFlag(FLAGS_http_listen);
  o.http_threads = absl::GetFlag(FLAGS_http_threads);
  o.http_work_threads = absl::GetFlag(FLAGS_http_work_threads);
  o.http_cert = absl::GetFlag(FLAGS_http_cert);
  o.http_key = absl::GetFlag(FLAGS_http_key);
  o.api_keys_file = absl::GetFlag(FLAGS_api_keys_file);
  o.moqt_auth_key_file = absl::GetFlag(FLAGS_moqt_auth_key_file);
  o.model = absl::GetFlag(FLAGS_model);
  o.registry.lease = absl::Seconds(absl::GetFlag(FLAGS_lease_s));
  o.registry.quiet = absl::Seconds(absl::GetFlag(FLAGS_worker_quiet_s));
  o.registry.prefix_reuse = absl::GetFlag(FLAGS_prefix_reuse);
  o.registry.router.fuse_tokens = absl::GetFlag(FLAGS_pd_fusion_tokens);
  o.registry.router.host_weight = absl::GetFlag(FLAGS_router_host_weight);
  o.registry.router.disk_weight = absl::GetFlag(FLAGS_router_disk_weight);
  kvcast::scheduler::GenerationOptions& g = o.generation;
  g.max_queue = absl::GetFlag(FLAGS_max_queue);
  g.max_tokens_limit = absl::GetFlag(FLAGS_max_tokens_limit);
  g.compression = absl::GetFlag(FLAGS_kv_compression);
  g.kv_token_ttl = absl::Seconds(absl::GetFlag(FLAGS_kv_token_ttl_s));
  g.decode_stall_floor = absl::Seconds(absl::GetFlag(FLAGS_decode_stall_s));
  g.decode_first_message = absl::Seconds(absl::GetFlag(FLAGS_decode_first_message_s));
  g.prefill_stall_floor = absl::Seconds(absl::GetFlag(FLAGS_prefill_stall_s));
  g.tenant_limits.max_in_flight = absl::GetFlag(FLAGS_tenant_max_in_flight);
  g.tenant_limits.prompt_tokens_per_minute = absl::GetFlag(FLAGS_tenant_prompt_tokens_per_minute);
  o.drain = absl::Seconds(absl::GetFlag(FLAGS_drain_s));
  o.planner.interval = absl::Seconds(absl::GetFlag(FLAGS_planner_interval_s));
  o.planner.slo_ttft_ms = absl::GetFlag(FLAGS_slo_ttft_ms);
  o.planner.slo_itl_ms = absl::GetFlag(FLAGS_slo_itl_ms);
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  // Debian's Abseil is built with its debug checks: every Mutex operation
  // would feed the deadlock detector's graph (7% of the scheduler's CPU per
  // request, docs/benchmarks.md). Tests keep it; the servers do not.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  absl::Status s =
      kvcast::services::InitLogging("kvcast-scheduler", absl::GetFlag(FLAGS_log_level));
  auto signal = kvcast::services::ShutdownSignal::Create();
  if (s.ok()) s = signal.status();
  if (s.ok()) s = kvcast::scheduler::RunScheduler(OptionsFromFlags(), signal->get());
  if (s.ok()) return 0;
  std::fprintf(stderr, "kvcast-scheduler: %s\n", s.ToString().c_str());
  return absl::IsInvalidArgument(s) ? 2 : 1;
}
