// kvcast.v1.Generation on the scheduler: validates and tokenizes a request,
// admits it (a bounded number in flight, RESOURCE_EXHAUSTED beyond), routes
// it (WorkerRegistry::Choose), then orchestrates the handoff:
//
//   1. opens the Decode stream on the decode worker (it allocates pages and
//      subscribes to the prompt's KV track at once);
//   2. calls Prefill on the prefill worker, which publishes each chunk as it
//      is computed and answers with the first token (streamed to the client
//      right away: TTFT);
//   3. sends the first token to decode and relays its tokens to the client.
//
// Failures: a prefill that fails is retried on another prefill worker; with
// none left, decode computes the prompt itself. A decode stream that breaks
// mid-generation is resumed on another decode worker with prompt + tokens
// generated so far (it fetches the prompt's published KV and recomputes the
// rest). Client deadlines and cancellation propagate to every worker call.
// Every request ends with a result or a clear error.
#ifndef KVCAST_SERVICES_SCHEDULER_GENERATION_SERVICE_H_
#define KVCAST_SERVICES_SCHEDULER_GENERATION_SERVICE_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "engine/grammar/grammar_cache.h"
#include "engine/tokenizer/tokenizer.h"
#include "kvcast/v1/generation.grpc.pb.h"
#include "services/common/api_keys.h"
#include "services/common/metrics.h"
#include "services/scheduler/stall_watchdog.h"
#include "services/scheduler/tenant_limits.h"
#include "services/scheduler/worker_registry.h"
#include "transport/moqt/authorization.h"

namespace kvcast::scheduler {

struct GenerationOptions {
  int max_queue = 256;         // requests admitted at once
  int max_tokens_limit = 4096; // largest max_tokens accepted
  int max_attempts = 3;        // per phase (prefill, decode)
  absl::Duration default_deadline = absl::Minutes(10);
  std::string compression = "fp16";  // KV track decode subscribes to
  // Borrowed; when it has keys, calls need metadata "authorization: Bearer
  // KEY" (UNAUTHENTICATED otherwise) and the key's tenant replaces the
  // request's.
  const services::ApiKeys* api_keys = nullptr;
  TenantLimitOptions tenant_limits;
  // Set: every KvSource carries a token for its prompt's namespace
  // (transport/moqt/authorization.h), valid for `kv_token_ttl`.
  std::shared_ptr<const moqt::HmacTokenAuthority> moqt_auth;
  absl::Duration kv_token_ttl = absl::Minutes(10);
  // Stalls (stall_watchdog.h): a bound on silence, never on the whole
  // prompt. Workers stream progress (prefill: every chunk; decode: tokens)
  // and a keepalive every 0.25 s while their model computes or KV lands, so
  // a long prompt is never mistaken for a stall. A decode stream silent for
  // max(floor, 10 x its mean time between token messages, 10 x the worker's
  // calibrated chunk time) is resumed on another decode worker; its first
  // message may take max(decode_first_message, that). A prefill stream
  // silent for max(prefill_stall_floor, 10 x the worker's calibrated chunk
  // time) is retried elsewhere.
  absl::Duration decode_stall_floor = absl::Seconds(2);
  absl::Duration decode_first_message = absl::Seconds(5);
  absl::Duration prefill_stall_floor = absl::Seconds(10);
};

class GenerationService final : public v1::Generation::Service {
 public:
  // `registry` and `metrics` are borrowed; `tokenizer` may be null (then
  // only token-id prompts are accepted and deltas carry no text).
  GenerationService(WorkerRegistry* registry, std::unique_ptr<Tokenizer> tokenizer,
                    services::MetricsRegistry* metrics, GenerationOptions options);

  grpc::Status Generate(grpc::ServerContext* context, const v1::GenerateRequest* request,
                        grpc::ServerWriter<v1::GenerateResponse>* writer) override;
  grpc::Status GenerateUnary(grpc::ServerContext* context, const v1::GenerateRequest* request,
                             v1::GenerateResult* result) override;

 private:
  class Request;
  // Runs a request; `emit` gets every message (false: the client is gone).
  grpc::Status Run(grpc::ServerContext* context, const v1::GenerateRequest& request,
                   const std::function<bool(const v1::GenerateResponse&)>& emit);

  WorkerRegistry* const registry_;
  const std::unique_ptr<Tokenizer> tokenizer_;
  const GenerationOptions options_;
  TenantLimits tenant_limits_;
  // response_formats checked (compiled) once per schema, not per request.
  GrammarCache grammars_;
  std::atomic<int> in_flight_{0};
  std::atomic<uint64_t> next_request_{1};
  StallWatchdog watchdog_;

 public:  // metrics, read by Request
  struct Metrics {
    services::Counter* ok;
    services::Counter* failed;
    services::Counter* rejected;
    services::Counter* retries;
    services::Counter* fused;
    services::Counter* prefill_stalls;
    services::Counter* decode_stalls;
    services::Counter* transfer_failures;
    services::Counter* prompt_tokens;
    services::Counter* predicted_cached_tokens;
    services::Counter* served_cached_tokens;
    services::Counter* generated_tokens;
    services::Counter* transfer_bytes;
    services::Histogram* ttft;
    services::Histogram* tbt;
    services::Histogram* e2e;
    services::Histogram* transfer;
    services::Histogram* route;
  };

 private:
  Metrics m_;
};

}  // namespace kvcast::scheduler

#endif  // KVCAST_SERVICES_SCHEDULER_GENERATION_SERVICE_H_
