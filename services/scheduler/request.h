// RequestRun: one client request on the scheduler, from admission to its
// last message. Its states:
//
//   Validate ─▶ Admit (a ticket: tenant + queue slot) ─▶ ┌─ Route (a lease on a
//                                                         │  prefill? + decode worker;
//                                                         │  waits for the registry)
//                                                         ▼
//                       Attempt: open Decode ─▶ Prefill (first token) ─▶ relay Decode
//                                                         │
//        Outcome: kDone ─▶ Finish   kFail ─▶ the status   kRetryPrefill / kRetryDecode ─┘
//
// An attempt opens the decode stream first (the worker allocates pages and
// subscribes to the prompt's KV track at once), calls Prefill (which
// publishes each chunk as it is computed and answers with the first token,
// streamed to the client at once: TTFT), hands the first token to decode
// and relays decode's tokens. A failed or silent prefill is retried on
// another prefill worker (its published chunks are fetched, not recomputed);
// after max_attempts, decode computes the prompt itself. A decode stream that
// breaks or goes silent is resumed on another decode worker with prompt +
// tokens so far. Codes another worker cannot fix end the request at once.
// Client deadlines and cancellation propagate to every worker call.
//
// Who owns what: the ticket (admission.h) and the lease (RouteLease) release
// themselves when the request or attempt ends; the KV pages live on the
// workers (docs/architecture.md).
#ifndef KVCAST_SERVICES_SCHEDULER_REQUEST_H_
#define KVCAST_SERVICES_SCHEDULER_REQUEST_H_

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/time/time.h"
#include "engine/grammar/grammar_cache.h"
#include "engine/tokenizer/tokenizer.h"
#include "grpcpp/grpcpp.h"
#include "kvcast/v1/generation.pb.h"
#include "kvcast/v1/worker.grpc.pb.h"
#include "services/common/metrics.h"
#include "services/scheduler/admission.h"
#include "services/scheduler/request_validation.h"
#include "services/scheduler/stall_watchdog.h"
#include "services/scheduler/text_stream.h"
#include "services/scheduler/worker_registry.h"
#include "transport/moqt/authorization.h"

namespace kvcast::services {
class ApiKeys;
}

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
  // How long a request waits for a decode worker when none can take it
  // (all failed or suspended; heartbeats revive live ones). Workers it saw
  // fail become eligible again after `route_forgive`.
  absl::Duration route_wait = absl::Seconds(3);
  absl::Duration route_forgive = absl::Seconds(1);
};

// The scheduler's request metrics (registered by GenerationService).
struct SchedulerMetrics {
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

// Registers the series above in `registry` (once per registry).
SchedulerMetrics RegisterSchedulerMetrics(services::MetricsRegistry* registry);

// What every request borrows from its service.
struct RequestServices {
  WorkerRegistry* registry;
  const Tokenizer* tokenizer;  // may be null: token-id prompts only, no text
  const GenerationOptions* options;
  Admission* admission;
  GrammarCache* grammars;
  StallWatchdog* watchdog;
  const SchedulerMetrics* metrics;
};

class RequestRun {
 public:
  // `emit` gets every message for the client (false: the client is gone).
  using Emit = std::function<bool(const v1::GenerateResponse&)>;
  RequestRun(const RequestServices& services, grpc::ServerContext* ctx,
             const v1::GenerateRequest& request, std::string request_id, const Emit& emit);

  grpc::Status Run();
  // Whether Run refused the request for want of a --max_queue slot.
  bool queue_full() const { return queue_full_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Outcome {
    enum Kind { kDone, kFail, kRetryPrefill, kRetryDecode } kind;
    grpc::Status status;  // kFail's
  };
  // A Decode stream of one attempt.
  struct DecodeCall {
    std::unique_ptr<grpc::ClientContext> ctx;
    std::unique_ptr<v1::Decode::Stub> stub;
    std::unique_ptr<grpc::ClientReaderWriter<v1::DecodeRequest, v1::DecodeResponse>> stream;
    int kv_tokens = 0;  // the prompt tokens whose KV it fetches
    bool sent = false;  // the start went out
    void Abandon() {
      ctx->TryCancel();
      stream->Finish().IgnoreError();
    }
  };

  grpc::Status Refused(const absl::Status& status, const Admission::Refusal& refusal);
  // A lease on workers for the next attempt, waiting (route_wait) for the
  // registry when no decode worker can take the request.
  absl::StatusOr<RouteLease> Route();
  Outcome Attempt(RouteLease& lease);
  // Opens the decode stream; `publisher`: the prefill worker this attempt
  // calls, if any.
  DecodeCall OpenDecode(const WorkerRef& decode, const WorkerRef* publisher);
  // Prefills on the lease's prefill worker and hands its first token to
  // `decode`; nullopt: go on relaying decode's tokens.
  std::optional<Outcome> Prefill(RouteLease& lease, DecodeCall& decode);
  Outcome RelayDecode(const RouteLease& lease, DecodeCall& decode, bool prefilled);
  // Decode's report that the prompt's KV is in place (`kv_tokens` asked for).
  void KvReady(const v1::DecodeResponse& r, int kv_tokens, bool prefilled);
  // A worker failed (`stalled`: cancelled for silence): retry elsewhere, or
  // the status when no other worker could do better.
  Outcome Failed(Outcome::Kind retry, const WorkerRef& worker, const grpc::Status& status,
                 bool stalled, const std::string& what);
  // Appends a token and emits its delta; true when generation is over (stop
  // token or string, max_tokens, or the client gone). `logprob`: the
  // token's, when the request asked for them (else null).
  // The first token's delta also carries prompt_logprobs_ (when asked for).
  bool OnToken(int32_t token, const v1::TokenLogprob* logprob);
  grpc::Status Finish();

  // Whether a worker call ended because the client's call did (deadline or
  // cancellation propagate to worker calls): then there is nothing to retry.
  bool ClientDone(const grpc::Status& worker) const;
  grpc::Status Interrupted() const;
  v1::DecodeStart DecodeStartFor(const WorkerRef* publisher) const;
  void GrantRead(v1::KvSource* kv) const;
  std::unique_ptr<grpc::ClientContext> WorkerContext() const;

  const RequestServices s_;
  grpc::ServerContext* const ctx_;
  const v1::GenerateRequest& req_;
  const std::string request_id_;
  const Emit& emit_;
  const Clock::time_point t_admit_;
  bool queue_full_ = false;

  ModelInfo model_;
  ValidRequest v_;
  std::optional<TextStream> text_;  // with a tokenizer
  // With sampling.prompt_logprobs: from the worker that computed the prompt.
  google::protobuf::RepeatedPtrField<v1::TokenLogprob> prompt_logprobs_;

  // Across attempts.
  absl::flat_hash_set<WorkerSlot> exclude_;
  int prefill_failures_ = 0, decode_failures_ = 0, retries_ = 0;
  std::string last_error_;
  // The chunks a failed prefill attempt had published (its progress says
  // how far it got; decode's subscription took them into the relay's
  // cache): the next attempt fetches them instead of computing them again.
  struct Abandoned {
    std::string publisher;
    int groups = 0;
  } abandoned_;

  // The generation so far.
  std::vector<int32_t> generated_;
  std::optional<v1::FinishReason> finish_;
  bool client_gone_ = false;
  std::string kv_publisher_;  // set once a prefill published the prompt
  int cached_tokens_ = 0;
  std::string prefill_worker_, decode_worker_;
  std::optional<Clock::time_point> t_dispatch_, t_first_, t_prefilled_;
  double handoff_ms_ = 0;
  std::vector<double> gaps_ms_;
  Clock::time_point t_last_;
  int64_t transfer_bytes_ = 0;
  double transfer_ms_ = 0;
};

}  // namespace kvcast::scheduler

#endif  // KVCAST_SERVICES_SCHEDULER_REQUEST_H_
