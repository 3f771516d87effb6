#include "services/scheduler/scheduler_server.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/chat/chat_template.h"
#include "services/common/api_keys.h"
#include "services/common/grpc_server.h"
#include "services/common/http_server.h"
#include "services/common/log.h"
#include "services/common/metrics_server.h"
#include "services/openai/openai_frontend.h"
#include "services/scheduler/generation_service.h"
#include "services/scheduler/planner_task.h"
#include "transport/kvcache/naming.h"

namespace kvcast::scheduler {
namespace {

services::GrpcServerOptions ServerOptions(const std::string& listen, const TlsFiles& tls) {
  services::GrpcServerOptions o;
  o.listen = listen;
  o.cert_file = tls.cert;
  o.key_file = tls.key;
  o.ca_file = tls.ca;
  return o;
}

// The OpenAI-compatible API, calling Generation through the public gRPC
// server's in-process channel.
struct HttpApi {
  std::unique_ptr<openai::OpenAiFrontend> frontend;
  std::unique_ptr<services::HttpServer> server;
};

absl::StatusOr<HttpApi> StartHttpApi(const SchedulerServerOptions& o, WorkerRegistry* registry,
                                     services::MetricsRegistry* metrics,
                                     const ChatTemplate* chat_template,
                                     const Tokenizer* tokenizer, const services::ApiKeys* keys,
                                     grpc::Server* grpc) {
  openai::FrontendHooks hooks;
  hooks.model = [registry]() -> std::optional<openai::ServedModel> {
    auto m = registry->model();
    if (!m) return std::nullopt;
    return openai::ServedModel{m->name, m->max_sequence_len};
  };
  hooks.ready = [registry] { return registry->counts().decode > 0; };
  hooks.metrics = [metrics] { return metrics->Render(); };
  if (chat_template != nullptr) {
    hooks.tool_call_format = openai::ToolCallFormatOf(chat_template->source());
    hooks.render_chat = [chat_template](const openai::Json& messages, const openai::Json& tools,
                                        bool add_generation, const openai::Json& kwargs) {
      openai::Json extra = kwargs.is_object() ? kwargs : openai::Json::object();
      if (!tools.is_null()) extra["tools"] = tools;
      return chat_template->Render(messages, add_generation, extra);
    };
  }
  openai::FrontendOptions fo;
  fo.max_tokens_limit = o.generation.max_tokens_limit;
  fo.work_threads = std::max(0, o.http_work_threads);
  HttpApi api;
  api.frontend = std::make_unique<openai::OpenAiFrontend>(
      grpc->InProcessChannel(grpc::ChannelArguments()), tokenizer, keys, metrics,
      std::move(hooks), fo);
  services::HttpServer::Options ho;
  ho.listen = o.http_listen;
  ho.io_threads = o.http_threads;
  ho.tls_cert_file = o.http_cert;
  ho.tls_key_file = o.http_key;
  ASSIGN_OR_RETURN(api.server,
                   services::HttpServer::Start(
                       ho, [f = api.frontend.get()](services::HttpRequest r,
                                                    std::shared_ptr<services::HttpExchange> e) {
                         f->Handle(std::move(r), std::move(e));
                       }));
  return api;
}

}  // namespace

absl::Status ValidateSchedulerOptions(const SchedulerServerOptions& o) {
  const GenerationOptions& g = o.generation;
  if (!(o.registry.lease > absl::ZeroDuration()) || g.max_queue < 1 || g.max_tokens_limit < 1) {
    return absl::InvalidArgumentError(
        "--lease_s, --max_queue and --max_tokens_limit must be positive");
  }
  if (g.tenant_limits.max_in_flight < 0 || g.tenant_limits.prompt_tokens_per_minute < 0) {
    return absl::InvalidArgumentError(
        "--tenant_max_in_flight and --tenant_prompt_tokens_per_minute must be >= 0");
  }
  if (auto f = kvcache::CompressionOfTrackName(g.compression);
      !f.ok() && g.compression != kvcache::kAdaptiveCompression) {
    return absl::InvalidArgumentError(absl::StrCat("--kv_compression: ", f.status().message()));
  }
  const RouterOptions& r = o.registry.router;
  if (!(r.host_weight >= 0) || !(r.disk_weight >= 0)) {
    return absl::InvalidArgumentError("--router_host_weight and --router_disk_weight must be >= 0");
  }
  if (r.fuse_tokens < 0) return absl::InvalidArgumentError("--pd_fusion_tokens must be >= 0");
  if (!(g.kv_token_ttl > absl::ZeroDuration())) {
    return absl::InvalidArgumentError("--kv_token_ttl_s must be positive");
  }
  for (absl::Duration d : {g.decode_stall_floor, g.decode_first_message, g.prefill_stall_floor}) {
    if (!(d > absl::ZeroDuration())) {
      return absl::InvalidArgumentError(
          "--decode_stall_s, --decode_first_message_s and --prefill_stall_s must be positive");
    }
  }
  const PlannerOptions& p = o.planner;
  if (p.interval < absl::ZeroDuration() || !(p.slo_ttft_ms > 0) || !(p.slo_itl_ms > 0)) {
    return absl::InvalidArgumentError(
        "--planner_interval_s must be >= 0, --slo_ttft_ms and --slo_itl_ms positive");
  }
  return absl::OkStatus();
}

absl::Status RunScheduler(SchedulerServerOptions o, services::ShutdownSignal* shutdown) {
  RETURN_IF_ERROR(ValidateSchedulerOptions(o));
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<ChatTemplate> chat_template;
  if (!o.model.empty()) {
    ASSIGN_OR_RETURN(tokenizer, LoadTokenizer(o.model));
    auto tmpl = ChatTemplate::Load(o.model);
    if (tmpl.ok()) {
      chat_template = std::move(*tmpl);
    } else if (!o.http_listen.empty()) {
      services::Log().warn("no chat completions: {}", std::string(tmpl.status().message()).c_str());
    }
  }
  // The workers' side: the internal port's TLS when there is one.
  const bool internal = !o.internal_grpc_listen.empty();
  const TlsFiles& workers_tls = internal ? o.internal_tls : o.grpc_tls;
  ASSIGN_OR_RETURN(auto creds, services::ClientCredentials(
                                   workers_tls.ca.empty() ? "" : workers_tls.cert,
                                   workers_tls.ca.empty() ? "" : workers_tls.key, workers_tls.ca));
  o.registry.make_channel = [creds, name = o.worker_tls_name](const std::string& address) {
    return services::MakeChannel(address, creds, name);
  };
  services::ApiKeys api_keys;
  if (!o.api_keys_file.empty()) {
    ASSIGN_OR_RETURN(api_keys, services::ApiKeys::Load(o.api_keys_file));
  }
  o.generation.api_keys = &api_keys;
  if (!o.moqt_auth_key_file.empty()) {
    ASSIGN_OR_RETURN(o.generation.moqt_auth,
                     moqt::HmacTokenAuthority::FromFile(o.moqt_auth_key_file));
  } else {
    services::Log().warn("no --moqt_auth_key_file: KV sources carry no MoQT authorization token");
  }
  WorkerRegistry registry(o.registry);
  services::MetricsRegistry metrics;
  const Tokenizer* http_tokenizer = tokenizer.get();
  GenerationService generation(&registry, std::move(tokenizer), &metrics, o.generation);
  std::unique_ptr<PlannerTask> planner;
  if (o.planner.interval > absl::ZeroDuration()) {
    planner = std::make_unique<PlannerTask>(
        o.planner,
        // The load and work every replica sees: the workers' reports.
        [&registry] {
          const WorkerRegistry::Work w = registry.WorkDone();
          return LoadTotals{w.requests,     w.prefill_prompt_tokens, w.generated_tokens,
                            w.prefill_step_seconds, w.decode_steps, w.decode_step_sequences,
                            w.decode_step_seconds};
        },
        [&registry] {
          const WorkerRegistry::Fleet f = registry.Summary();
          return FleetNow{f.prefill_tokens_per_s, f.decode_step_ms, f.prefill_backlog_tokens,
                          f.decode_backlog_requests};
        },
        &metrics);
    planner->Start();
  }
  std::vector<services::NamedService> public_services = {
      {v1::Generation::service_full_name(), &generation}};
  if (!internal) public_services.push_back({v1::Registry::service_full_name(), &registry});
  ASSIGN_OR_RETURN(auto server,
                   services::GrpcServer::Start(ServerOptions(o.grpc_listen, o.grpc_tls),
                                               public_services));
  std::unique_ptr<services::GrpcServer> internal_server;
  if (internal) {
    ASSIGN_OR_RETURN(internal_server,
                     services::GrpcServer::Start(ServerOptions(o.internal_grpc_listen, o.internal_tls),
                                                 {{v1::Registry::service_full_name(), &registry}}));
  }
  std::unique_ptr<services::MetricsServer> metrics_server;
  if (!o.metrics_listen.empty()) {
    ASSIGN_OR_RETURN(metrics_server, services::MetricsServer::Start(o.metrics_listen, &metrics));
  }
  std::optional<HttpApi> http;
  if (!o.http_listen.empty()) {
    ASSIGN_OR_RETURN(http, StartHttpApi(o, &registry, &metrics, chat_template.get(),
                                        http_tokenizer, &api_keys, server->server()));
  }
  services::Log().info("gRPC :{}, internal gRPC :{}{}, metrics :{}, http :{}{}{}", server->port(),
                       internal_server ? internal_server->port() : server->port(),
                       internal_server && internal_server->tls() ? " (mutual TLS)" : "",
                       metrics_server ? metrics_server->port() : 0, http ? http->server->port() : 0,
                       o.http_cert.empty() ? "" : " (HTTPS)",
                       api_keys.enabled() ? " (API keys required)" : "");
  shutdown->Wait();
  services::Log().info("draining");
  http.reset();  // open streams are cancelled; their calls end with the gRPC drain
  server->Shutdown(o.drain);
  if (internal_server) internal_server->Shutdown(absl::Seconds(1));
  return absl::OkStatus();
}

}  // namespace kvcast::scheduler
