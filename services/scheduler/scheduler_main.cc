// kvcast-scheduler: the entry point of a kvcast cluster (docs/services.md).
// Serves kvcast.v1.Generation to clients and kvcast.v1.Registry to workers,
// grpc.health.v1 on the same port, Prometheus /metrics, and (--http_listen)
// the OpenAI-compatible HTTP API (docs/openai-api.md).
#include <algorithm>
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/synchronization/mutex.h"
#include "absl/strings/str_cat.h"
#include "engine/chat/chat_template.h"
#include "engine/tokenizer/tokenizer.h"
#include "transport/kvcache/naming.h"
#include "services/common/api_keys.h"
#include "services/common/grpc_server.h"
#include "services/common/http_server.h"
#include "services/common/metrics_server.h"
#include "services/common/shutdown.h"
#include "services/openai/openai_frontend.h"
#include "services/scheduler/generation_service.h"

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
ABSL_FLAG(double, drain_s, 30, "on SIGTERM: finish in-flight requests for up to this long");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  // Debian's Abseil is built with its debug checks: every Mutex operation
  // would feed the deadlock detector's graph (7% of the scheduler's CPU per
  // request, docs/benchmarks.md). Tests keep it; the servers do not.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  using namespace kvcast;
  auto fail = [](const absl::Status& s) {
    std::fprintf(stderr, "kvcast-scheduler: %s\n", s.ToString().c_str());
    return absl::IsInvalidArgument(s) ? 2 : 1;
  };
  if (!(absl::GetFlag(FLAGS_lease_s) > 0) || absl::GetFlag(FLAGS_max_queue) < 1 ||
      absl::GetFlag(FLAGS_max_tokens_limit) < 1) {
    return fail(absl::InvalidArgumentError(
        "--lease_s, --max_queue and --max_tokens_limit must be positive"));
  }
  if (absl::GetFlag(FLAGS_tenant_max_in_flight) < 0 ||
      absl::GetFlag(FLAGS_tenant_prompt_tokens_per_minute) < 0) {
    return fail(absl::InvalidArgumentError(
        "--tenant_max_in_flight and --tenant_prompt_tokens_per_minute must be >= 0"));
  }
  if (auto f = kvcache::CompressionOfTrackName(absl::GetFlag(FLAGS_kv_compression));
      !f.ok() && absl::GetFlag(FLAGS_kv_compression) != kvcache::kAdaptiveCompression) {
    return fail(absl::InvalidArgumentError(absl::StrCat("--kv_compression: ", f.status().message())));
  }
  auto signal = services::ShutdownSignal::Create();
  if (!signal.ok()) return fail(signal.status());
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<ChatTemplate> chat_template;
  if (!absl::GetFlag(FLAGS_model).empty()) {
    auto tok = LoadTokenizer(absl::GetFlag(FLAGS_model));
    if (!tok.ok()) return fail(tok.status());
    tokenizer = std::move(*tok);
    auto tmpl = ChatTemplate::Load(absl::GetFlag(FLAGS_model));
    if (tmpl.ok()) {
      chat_template = std::move(*tmpl);
    } else if (!absl::GetFlag(FLAGS_http_listen).empty()) {
      std::fprintf(stderr, "kvcast-scheduler: no chat completions: %s\n",
                   std::string(tmpl.status().message()).c_str());
    }
  }
  const std::string cert = absl::GetFlag(FLAGS_grpc_cert), key = absl::GetFlag(FLAGS_grpc_key),
                    ca = absl::GetFlag(FLAGS_grpc_ca);
  // The workers' side: the internal port's TLS when there is one.
  const bool internal = !absl::GetFlag(FLAGS_internal_grpc_listen).empty();
  const std::string wcert = internal ? absl::GetFlag(FLAGS_internal_grpc_cert) : cert,
                    wkey = internal ? absl::GetFlag(FLAGS_internal_grpc_key) : key,
                    wca = internal ? absl::GetFlag(FLAGS_internal_grpc_ca) : ca;
  auto creds = services::ClientCredentials(wca.empty() ? "" : wcert, wca.empty() ? "" : wkey, wca);
  if (!creds.ok()) return fail(creds.status());
  scheduler::WorkerRegistry::Options ro;
  ro.lease = absl::Seconds(absl::GetFlag(FLAGS_lease_s));
  ro.quiet = absl::Seconds(absl::GetFlag(FLAGS_worker_quiet_s));
  ro.prefix_reuse = absl::GetFlag(FLAGS_prefix_reuse);
  ro.router.fuse_tokens = absl::GetFlag(FLAGS_pd_fusion_tokens);
  ro.router.host_weight = absl::GetFlag(FLAGS_router_host_weight);
  ro.router.disk_weight = absl::GetFlag(FLAGS_router_disk_weight);
  if (!(ro.router.host_weight >= 0) || !(ro.router.disk_weight >= 0)) {
    return fail(absl::InvalidArgumentError(
        "--router_host_weight and --router_disk_weight must be >= 0"));
  }
  if (ro.router.fuse_tokens < 0) {
    return fail(absl::InvalidArgumentError("--pd_fusion_tokens must be >= 0"));
  }
  ro.make_channel = [creds = *creds,
                     name = absl::GetFlag(FLAGS_worker_tls_name)](const std::string& address) {
    return services::MakeChannel(address, creds, name);
  };
  services::ApiKeys api_keys;
  if (!absl::GetFlag(FLAGS_api_keys_file).empty()) {
    auto keys = services::ApiKeys::Load(absl::GetFlag(FLAGS_api_keys_file));
    if (!keys.ok()) return fail(keys.status());
    api_keys = std::move(*keys);
  }
  scheduler::WorkerRegistry registry(ro);
  services::MetricsRegistry metrics;
  scheduler::GenerationOptions go;
  go.max_queue = absl::GetFlag(FLAGS_max_queue);
  go.max_tokens_limit = absl::GetFlag(FLAGS_max_tokens_limit);
  go.compression = absl::GetFlag(FLAGS_kv_compression);
  go.api_keys = &api_keys;
  if (!absl::GetFlag(FLAGS_moqt_auth_key_file).empty()) {
    auto authority = moqt::HmacTokenAuthority::FromFile(absl::GetFlag(FLAGS_moqt_auth_key_file));
    if (!authority.ok()) return fail(authority.status());
    go.moqt_auth = *authority;
  } else {
    std::fprintf(stderr, "kvcast-scheduler: no --moqt_auth_key_file: KV sources carry no MoQT "
                         "authorization token\n");
  }
  if (!(absl::GetFlag(FLAGS_kv_token_ttl_s) > 0)) {
    return fail(absl::InvalidArgumentError("--kv_token_ttl_s must be positive"));
  }
  go.kv_token_ttl = absl::Seconds(absl::GetFlag(FLAGS_kv_token_ttl_s));
  for (double s : {absl::GetFlag(FLAGS_decode_stall_s), absl::GetFlag(FLAGS_decode_first_message_s),
                   absl::GetFlag(FLAGS_prefill_stall_s)}) {
    if (!(s > 0)) {
      return fail(absl::InvalidArgumentError(
          "--decode_stall_s, --decode_first_message_s and --prefill_stall_s must be positive"));
    }
  }
  go.decode_stall_floor = absl::Seconds(absl::GetFlag(FLAGS_decode_stall_s));
  go.decode_first_message = absl::Seconds(absl::GetFlag(FLAGS_decode_first_message_s));
  go.prefill_stall_floor = absl::Seconds(absl::GetFlag(FLAGS_prefill_stall_s));
  go.tenant_limits.max_in_flight = absl::GetFlag(FLAGS_tenant_max_in_flight);
  go.tenant_limits.prompt_tokens_per_minute = absl::GetFlag(FLAGS_tenant_prompt_tokens_per_minute);
  const Tokenizer* http_tokenizer = tokenizer.get();
  scheduler::GenerationService generation(&registry, std::move(tokenizer), &metrics, go);
  services::GrpcServerOptions so;
  so.listen = absl::GetFlag(FLAGS_grpc_listen);
  so.cert_file = cert;
  so.key_file = key;
  so.ca_file = ca;
  std::vector<services::NamedService> public_services = {
      {v1::Generation::service_full_name(), &generation}};
  if (!internal) public_services.push_back({v1::Registry::service_full_name(), &registry});
  auto server = services::GrpcServer::Start(so, public_services);
  if (!server.ok()) return fail(server.status());
  std::unique_ptr<services::GrpcServer> internal_server;
  if (internal) {
    services::GrpcServerOptions io;
    io.listen = absl::GetFlag(FLAGS_internal_grpc_listen);
    io.cert_file = wcert;
    io.key_file = wkey;
    io.ca_file = wca;
    auto s = services::GrpcServer::Start(io, {{v1::Registry::service_full_name(), &registry}});
    if (!s.ok()) return fail(s.status());
    internal_server = std::move(*s);
  }
  std::unique_ptr<services::MetricsServer> metrics_server;
  if (!absl::GetFlag(FLAGS_metrics_listen).empty()) {
    auto ms = services::MetricsServer::Start(absl::GetFlag(FLAGS_metrics_listen), &metrics);
    if (!ms.ok()) return fail(ms.status());
    metrics_server = std::move(*ms);
  }
  std::unique_ptr<openai::OpenAiFrontend> frontend;
  std::unique_ptr<services::HttpServer> http;
  if (!absl::GetFlag(FLAGS_http_listen).empty()) {
    openai::FrontendHooks hooks;
    hooks.model = [&registry]() -> std::optional<openai::ServedModel> {
      auto m = registry.model();
      if (!m) return std::nullopt;
      return openai::ServedModel{m->name, m->max_sequence_len};
    };
    hooks.ready = [&registry] { return registry.counts().decode > 0; };
    hooks.metrics = [&metrics] { return metrics.Render(); };
    if (chat_template != nullptr) {
      hooks.tool_call_format = openai::ToolCallFormatOf(chat_template->source());
      hooks.render_chat = [t = chat_template.get()](const openai::Json& messages,
                                                    const openai::Json& tools, bool add_generation,
                                                    const openai::Json& kwargs) {
        openai::Json extra = kwargs.is_object() ? kwargs : openai::Json::object();
        if (!tools.is_null()) extra["tools"] = tools;
        return t->Render(messages, add_generation, extra);
      };
    }
    openai::FrontendOptions fo;
    fo.max_tokens_limit = go.max_tokens_limit;
    fo.work_threads = std::max(0, absl::GetFlag(FLAGS_http_work_threads));
    frontend = std::make_unique<openai::OpenAiFrontend>(
        (*server)->server()->InProcessChannel(grpc::ChannelArguments()), http_tokenizer,
        &api_keys, &metrics, std::move(hooks), fo);
    services::HttpServer::Options ho;
    ho.listen = absl::GetFlag(FLAGS_http_listen);
    ho.io_threads = absl::GetFlag(FLAGS_http_threads);
    ho.tls_cert_file = absl::GetFlag(FLAGS_http_cert);
    ho.tls_key_file = absl::GetFlag(FLAGS_http_key);
    auto hs = services::HttpServer::Start(
        ho, [f = frontend.get()](services::HttpRequest r, std::shared_ptr<services::HttpExchange> e) {
          f->Handle(std::move(r), std::move(e));
        });
    if (!hs.ok()) return fail(hs.status());
    http = std::move(*hs);
  }
  std::fprintf(stderr, "kvcast-scheduler: gRPC :%u, internal gRPC :%u%s, metrics :%u, http :%u%s%s\n",
               (*server)->port(), internal_server ? internal_server->port() : (*server)->port(),
               internal_server && internal_server->tls() ? " (mutual TLS)" : "",
               metrics_server ? metrics_server->port() : 0, http ? http->port() : 0,
               absl::GetFlag(FLAGS_http_cert).empty() ? "" : " (HTTPS)",
               api_keys.enabled() ? " (API keys required)" : "");
  (*signal)->Wait();
  std::fprintf(stderr, "kvcast-scheduler: draining\n");
  http.reset();  // open streams are cancelled; their calls end with the gRPC drain
  (*server)->Shutdown(absl::Seconds(absl::GetFlag(FLAGS_drain_s)));
  if (internal_server) internal_server->Shutdown(absl::Seconds(1));
  return 0;
}
