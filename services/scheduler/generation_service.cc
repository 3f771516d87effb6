#include "services/scheduler/generation_service.h"

#include <optional>

#include "absl/strings/str_cat.h"

namespace kvcast::scheduler {

GenerationService::GenerationService(WorkerRegistry* registry,
                                     std::unique_ptr<Tokenizer> tokenizer,
                                     services::MetricsRegistry* metrics,
                                     GenerationOptions options)
    : registry_(registry),
      tokenizer_(std::move(tokenizer)),
      options_(std::move(options)),
      admission_(options_.max_queue, options_.tenant_limits) {
  auto& m = *metrics;
  m_ = RegisterSchedulerMetrics(&m);
  m.AddCallbackGauge("kvcast_queue_depth", "requests admitted and not finished",
                     [this] { return double(admission_.in_flight()); });
  m.AddCallbackGauge("kvcast_workers", "registered workers", [this] {
    return double(registry_->counts().prefill);
  }, {{"role", "prefill"}});
  m.AddCallbackGauge("kvcast_workers", "registered workers", [this] {
    return double(registry_->counts().decode);
  }, {{"role", "decode"}});
  m.AddCallbackGauge("kvcast_prefix_index_chunks", "KV chunks the workers of a role hold",
                     [this] { return double(registry_->counts().prefill_chunks); },
                     {{"role", "prefill"}});
  m.AddCallbackGauge("kvcast_prefix_index_chunks", "KV chunks the workers of a role hold",
                     [this] { return double(registry_->counts().decode_chunks); },
                     {{"role", "decode"}});
  // The model-server gauges the Gateway API Inference Extension (and vLLM
  // dashboards) read, summed over the workers' last heartbeats.
  m.AddCallbackGauge("vllm:num_requests_waiting", "requests queued on the workers",
                     [this] { return double(registry_->counts().waiting); });
  m.AddCallbackGauge("vllm:num_requests_running", "sequences in the workers' batches",
                     [this] { return double(registry_->counts().running); });
  m.AddCallbackGauge("vllm:kv_cache_usage_perc", "KV pages in use over all pages (0-1)", [this] {
    const auto c = registry_->counts();
    return c.pages_total > 0 ? double(c.pages_used) / double(c.pages_total) : 0.0;
  });
}

grpc::Status GenerationService::Run(grpc::ServerContext* context,
                                    const v1::GenerateRequest& request,
                                    const RequestRun::Emit& emit) {
  // With API keys, the key decides the tenant.
  v1::GenerateRequest keyed;
  const v1::GenerateRequest* req = &request;
  if (options_.api_keys != nullptr && options_.api_keys->enabled()) {
    auto md = context->client_metadata().find("authorization");
    std::optional<std::string> tenant;
    if (md != context->client_metadata().end()) {
      tenant = options_.api_keys->TenantOf(absl::string_view(md->second.data(), md->second.size()));
    }
    if (!tenant) {
      m_.rejected->Increment();
      return grpc::Status(grpc::UNAUTHENTICATED,
                          md == context->client_metadata().end()
                              ? "an API key is required (metadata authorization: Bearer KEY)"
                              : "invalid API key");
    }
    keyed = request;
    keyed.set_tenant(*tenant);
    req = &keyed;
  }
  const RequestServices services{registry_, tokenizer_.get(), &options_, &admission_,
                                &grammars_,  &watchdog_,       &m_};
  RequestRun r(services, context, *req,
               req->request_id().empty() ? absl::StrCat("req-", next_request_.fetch_add(1))
                                         : req->request_id(),
               emit);
  grpc::Status s = r.Run();
  if (!r.queue_full()) (s.ok() ? m_.ok : m_.failed)->Increment();
  return s;
}

grpc::Status GenerationService::Generate(grpc::ServerContext* context,
                                         const v1::GenerateRequest* request,
                                         grpc::ServerWriter<v1::GenerateResponse>* writer) {
  return Run(context, *request, [writer](const v1::GenerateResponse& r) { return writer->Write(r); });
}

grpc::Status GenerationService::GenerateUnary(grpc::ServerContext* context,
                                              const v1::GenerateRequest* request,
                                              v1::GenerateResult* result) {
  return Run(context, *request, [result](const v1::GenerateResponse& r) {
    if (r.has_delta()) {
      result->mutable_text()->append(r.delta().text());
      result->mutable_token_ids()->Add(r.delta().token_ids().begin(), r.delta().token_ids().end());
      result->mutable_logprobs()->Add(r.delta().logprobs().begin(), r.delta().logprobs().end());
      result->mutable_prompt_logprobs()->Add(r.delta().prompt_logprobs().begin(),
                                             r.delta().prompt_logprobs().end());
    } else {
      *result->mutable_final() = r.final();
    }
    return true;
  });
}

}  // namespace kvcast::scheduler
