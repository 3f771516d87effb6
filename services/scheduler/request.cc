#include "services/scheduler/request.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "services/common/grpc_status.h"
#include "services/common/log.h"
#include "transport/kvcache/naming.h"
#include "transport/moqt/codec.h"

namespace kvcast::scheduler {
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }
double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Codes a retry on another worker cannot fix.
bool Unretryable(grpc::StatusCode c) {
  return c == grpc::INVALID_ARGUMENT || c == grpc::FAILED_PRECONDITION ||
         c == grpc::OUT_OF_RANGE || c == grpc::UNIMPLEMENTED;
}

// How long `worker` may stay silent: `floor`, or 10 x its calibrated chunk
// time when longer (a slow model or backend).
absl::Duration StallBound(absl::Duration floor, const WorkerRef& worker) {
  return std::max(floor, absl::Milliseconds(10 * worker.chunk_ms));
}

struct PrefillCall {
  grpc::Status status;
  bool stalled = false;  // cancelled by the watchdog: silent for its bound
  int done_tokens = 0;   // the last progress reported
  v1::PrefillResponse response;
};

// Streams a Prefill call, cancelling it when no message comes for `bound`
// (progress, keepalive or the result).
PrefillCall CallPrefill(StallWatchdog* watchdog, const WorkerRef& worker,
                        const v1::PrefillRequest& request, grpc::ClientContext* ctx,
                        absl::Duration bound) {
  PrefillCall call;
  auto watch = watchdog->Start(ctx, bound);
  auto reader = v1::Prefill::NewStub(worker.channel)->Prefill(ctx, request);
  v1::PrefillReply reply;
  bool answered = false;
  while (reader->Read(&reply)) {
    watch->Extend(bound);
    if (reply.has_progress()) {
      call.done_tokens = std::max(call.done_tokens, reply.progress().done_tokens());
    } else if (reply.has_result()) {
      call.response = reply.result();
      answered = true;
    }
  }
  call.status = reader->Finish();
  call.stalled = watch->fired();
  if (call.status.ok() && !answered) {
    call.status = grpc::Status(grpc::INTERNAL, "the prefill stream ended without a result");
  }
  return call;
}

}  // namespace

SchedulerMetrics RegisterSchedulerMetrics(services::MetricsRegistry* registry) {
  services::MetricsRegistry& r = *registry;
  SchedulerMetrics m;
  const auto buckets = services::DefaultLatencyBuckets();
  m.ok = r.AddCounter("kvcast_requests_total", "generation requests by result", {{"result", "ok"}});
  m.failed =
      r.AddCounter("kvcast_requests_total", "generation requests by result", {{"result", "error"}});
  m.rejected = r.AddCounter("kvcast_requests_total", "generation requests by result",
                            {{"result", "rejected"}});
  m.retries = r.AddCounter("kvcast_retries_total", "worker failures recovered from");
  m.fused = r.AddCounter("kvcast_fused_requests_total",
                         "requests run on their decode worker alone (PD fusion)");
  m.prefill_stalls = r.AddCounter("kvcast_stalls_total", "worker calls cancelled for no progress",
                                  {{"phase", "prefill"}});
  m.decode_stalls = r.AddCounter("kvcast_stalls_total", "worker calls cancelled for no progress",
                                 {{"phase", "decode"}});
  m.transfer_failures = r.AddCounter("kvcast_kv_transfer_failures_total",
                                     "requests whose KV did not all land (recomputed)");
  m.prompt_tokens = r.AddCounter("kvcast_prompt_tokens_total", "prompt tokens");
  m.predicted_cached_tokens = r.AddCounter("kvcast_prefix_hit_tokens_total",
                                           "prompt tokens reusable per the router and as served",
                                           {{"source", "predicted"}});
  m.served_cached_tokens =
      r.AddCounter("kvcast_prefix_hit_tokens_total",
                   "prompt tokens reusable per the router and as served", {{"source", "served"}});
  m.generated_tokens = r.AddCounter("kvcast_generated_tokens_total", "tokens generated");
  m.transfer_bytes = r.AddCounter("kvcast_kv_transfer_bytes_total", "KV bytes landed in decode");
  m.ttft = r.AddHistogram("kvcast_ttft_seconds", "time to first token", buckets);
  m.tbt = r.AddHistogram("kvcast_time_between_tokens_seconds", "time between tokens", buckets);
  m.e2e = r.AddHistogram("kvcast_request_seconds", "end-to-end request latency", buckets);
  m.transfer = r.AddHistogram("kvcast_kv_transfer_seconds", "KV landing time", buckets);
  m.route = r.AddHistogram("kvcast_route_seconds", "routing time per attempt",
                           {1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1});
  return m;
}

RequestRun::RequestRun(const RequestServices& services, grpc::ServerContext* ctx,
                       const v1::GenerateRequest& request, std::string request_id,
                       const Emit& emit)
    : s_(services),
      ctx_(ctx),
      req_(request),
      request_id_(std::move(request_id)),
      emit_(emit),
      t_admit_(Clock::now()) {}

grpc::Status RequestRun::Run() {
  std::optional<ModelInfo> model = s_.registry->model();
  if (!model) return grpc::Status(grpc::UNAVAILABLE, "no worker has registered with the scheduler yet");
  model_ = *model;
  absl::StatusOr<ValidRequest> valid =
      ValidateRequest(req_, model_, s_.tokenizer, s_.grammars, s_.options->max_tokens_limit);
  if (!valid.ok()) return services::ToGrpc(valid.status());
  v_ = std::move(*valid);
  if (s_.tokenizer != nullptr) text_.emplace(s_.tokenizer, v_.stops);
  Admission::Refusal refusal;
  absl::StatusOr<Admission::Ticket> ticket =
      s_.admission->Admit(req_.tenant(), int(v_.prompt.size()), &refusal);
  if (!ticket.ok()) return Refused(ticket.status(), refusal);
  s_.metrics->prompt_tokens->Increment(double(v_.prompt.size()));
  for (;;) {
    if (ctx_->IsCancelled()) return Interrupted();
    absl::StatusOr<RouteLease> lease = Route();
    if (!lease.ok()) {
      if (ctx_->IsCancelled()) return Interrupted();
      const std::string why(lease.status().message());
      return grpc::Status(grpc::UNAVAILABLE, last_error_.empty()
                                                 ? why
                                                 : absl::StrCat(why, "; last failure: ", last_error_));
    }
    const Outcome o = Attempt(*lease);
    switch (o.kind) {
      case Outcome::kDone:
        return Finish();
      case Outcome::kFail:
        return o.status;
      case Outcome::kRetryPrefill:
        if (++prefill_failures_ == s_.options->max_attempts) {
          services::Log().warn("{}: recomputing on decode", request_id_.c_str());
        }
        break;
      case Outcome::kRetryDecode:
        if (++decode_failures_ >= s_.options->max_attempts) {
          return grpc::Status(grpc::UNAVAILABLE,
                              absl::StrCat("gave up after ", decode_failures_,
                                           " decode failures; last: ", last_error_));
        }
        break;
    }
  }
}

grpc::Status RequestRun::Refused(const absl::Status& status, const Admission::Refusal& refusal) {
  s_.metrics->rejected->Increment();
  if (refusal.by_tenant) {
    ctx_->AddTrailingMetadata("kvcast-limit", "tenant");
  } else {
    queue_full_ = true;
  }
  ctx_->AddTrailingMetadata(
      "retry-after",
      absl::StrCat(absl::ToInt64Seconds(absl::Ceil(refusal.retry_after, absl::Seconds(1)))));
  return services::ToGrpc(status);
}

absl::StatusOr<RouteLease> RequestRun::Route() {
  const int so_far = int(generated_.size());
  const int tokens = int(v_.prompt.size()) + so_far;
  const absl::Time start = absl::Now();
  const absl::Time forgive = start + s_.options->route_forgive;
  absl::Time give_up = start + s_.options->route_wait;
  if (ctx_->deadline() != std::chrono::system_clock::time_point::max()) {
    give_up = std::min(give_up, absl::FromChrono(ctx_->deadline()));
  }
  for (;;) {
    const uint64_t seen = s_.registry->version();
    const auto t = Clock::now();
    absl::StatusOr<RouteLease> lease =
        s_.registry->Lease(v_.chain, tokens, v_.max_tokens - so_far, exclude_);
    s_.metrics->route->Observe(Seconds(Clock::now() - t));
    const absl::Time now = absl::Now();
    if (lease.ok() || now >= give_up || ctx_->IsCancelled()) return lease;
    // No decode worker right now (all failed or suspended): wait for the
    // registry to change (a heartbeat revives a live worker); one that
    // failed once is not failed forever.
    if (!exclude_.empty() && now >= forgive) {
      exclude_.clear();
      continue;
    }
    s_.registry->AwaitChange(seen, exclude_.empty() ? give_up : std::min(give_up, forgive));
  }
}

RequestRun::Outcome RequestRun::Attempt(RouteLease& lease) {
  if (!t_dispatch_) t_dispatch_ = Clock::now();
  decode_worker_ = lease->decode.worker_id;
  if (lease->decode_plan.fused && generated_.empty()) s_.metrics->fused->Increment();
  // Fused, or after max_attempts prefill failures: the decode worker
  // computes the prompt.
  const bool prefill = generated_.empty() && lease->prefill.has_value() &&
                       prefill_failures_ < s_.options->max_attempts;
  if (!prefill) lease.PrefillAnswered();  // chosen but not called: it owes nothing
  // Decode first: it allocates and subscribes while the prefill runs.
  DecodeCall decode = OpenDecode(lease->decode, prefill ? &*lease->prefill : nullptr);
  // A start that did not go out: the stream's status says why.
  if (prefill && decode.sent) {
    if (std::optional<Outcome> o = Prefill(lease, decode)) return *o;
  }
  decode.stream->WritesDone();
  return RelayDecode(lease, decode, prefill);
}

RequestRun::DecodeCall RequestRun::OpenDecode(const WorkerRef& decode, const WorkerRef* publisher) {
  DecodeCall call;
  call.ctx = WorkerContext();
  call.stub = v1::Decode::NewStub(decode.channel);
  call.stream = call.stub->Decode(call.ctx.get());
  v1::DecodeRequest start;
  *start.mutable_start() = DecodeStartFor(publisher);
  call.kv_tokens = start.start().kv_tokens();
  call.sent = call.stream->Write(start);
  return call;
}

std::optional<RequestRun::Outcome> RequestRun::Prefill(RouteLease& lease, DecodeCall& decode) {
  const WorkerRef& worker = *lease->prefill;
  const PrefillPlan& plan = lease->prefill_plan;
  const int n = int(v_.prompt.size());
  const int chunk = model_.chunk_tokens;
  const int planned = plan.cached_chunks + plan.fetched_chunks;
  s_.metrics->predicted_cached_tokens->Increment(planned * chunk);
  v1::PrefillRequest request;
  request.set_request_id(request_id_);
  *request.mutable_tokens() = {v_.prompt.begin(), v_.prompt.end()};
  *request.mutable_sampling() = v_.sampling;
  request.set_tenant(req_.tenant());
  // Prompt log-probabilities come from computing the whole prompt: nothing
  // published is fetched then.
  if (!v_.sampling.prompt_logprobs() && (plan.fetched_chunks > 0 || abandoned_.groups > planned)) {
    // Fetch what an earlier attempt published, or the router's published prefix.
    const bool resume = abandoned_.groups > planned;
    v1::KvSource* reuse = request.mutable_reuse();
    reuse->set_prompt_digest(resume ? v_.digest : lease->reuse.prompt_digest);
    reuse->set_groups(resume ? abandoned_.groups : planned);
    reuse->set_compression(s_.options->compression);
    reuse->set_moqt_address(resume ? abandoned_.publisher : lease->reuse.publisher);
    GrantRead(reuse);
  }
  auto ctx = WorkerContext();
  const absl::Duration bound = StallBound(s_.options->prefill_stall_floor, worker);
  const PrefillCall call = CallPrefill(s_.watchdog, worker, request, ctx.get(), bound);
  lease.PrefillAnswered();
  if (!call.status.ok()) {
    decode.Abandon();
    // Its last reported chunk may not have left it whole: leave it out.
    const int published = std::min(call.done_tokens / chunk - 1, (n - 1) / chunk);
    if (published > abandoned_.groups) abandoned_ = {worker.moqt_address, published};
    return Failed(Outcome::kRetryPrefill, worker, call.status, call.stalled,
                  call.stalled ? absl::StrCat("silent for ", absl::FormatDuration(bound), " after ",
                                              call.done_tokens, " of ", n, " prompt tokens")
                               : call.status.error_message());
  }
  const v1::PrefillResponse& r = call.response;
  t_prefilled_ = Clock::now();
  prefill_worker_ = worker.worker_id;
  kv_publisher_ = worker.moqt_address;
  cached_tokens_ = r.cached_tokens() + r.fetched_tokens();
  s_.metrics->served_cached_tokens->Increment(cached_tokens_);
  s_.registry->Published(r.prompt_digest(), kv_publisher_, v_.chain);
  prompt_logprobs_ = r.prompt_logprobs();
  if (OnToken(r.first_token(), r.has_first_logprob() ? &r.first_logprob() : nullptr)) {
    decode.Abandon();
    return Outcome{Outcome::kDone, {}};
  }
  v1::DecodeRequest first;
  first.set_first_token(r.first_token());
  decode.stream->Write(first);
  return std::nullopt;
}

RequestRun::Outcome RequestRun::RelayDecode(const RouteLease& lease, DecodeCall& decode,
                                            bool prefilled) {
  const WorkerRef& worker = lease->decode;
  // Any message (tokens, KV ready, or the worker's keepalive) is progress.
  auto watch = s_.watchdog->Start(decode.ctx.get(),
                                  StallBound(s_.options->decode_first_message, worker));
  double mean_gap_ms = 0;  // between messages with tokens
  int token_messages = 0;
  auto last_tokens = Clock::now();
  auto stall_bound = [&] {
    return std::max(StallBound(s_.options->decode_stall_floor, worker),
                    absl::Milliseconds(10 * mean_gap_ms));
  };
  v1::DecodeResponse r;
  bool done = false;
  while (!done && decode.stream->Read(&r)) {
    if (r.token_ids_size() > 0) {
      const auto now = Clock::now();
      if (token_messages++ > 0) {
        const double gap = Ms(now - last_tokens);
        mean_gap_ms = token_messages == 2 ? gap : 0.9 * mean_gap_ms + 0.1 * gap;
      }
      last_tokens = now;
    }
    watch->Extend(stall_bound());
    if (r.kv_ready()) KvReady(r, decode.kv_tokens, prefilled);
    if (r.prompt_logprobs_size() > 0) prompt_logprobs_ = r.prompt_logprobs();
    for (int i = 0; i < r.token_ids_size() && !done; ++i) {
      done = OnToken(r.token_ids(i), i < r.logprobs_size() ? &r.logprobs(i) : nullptr);
    }
    if (r.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
      if (!finish_) finish_ = r.finish_reason();
      done = true;
    }
  }
  if (done) decode.ctx->TryCancel();
  const grpc::Status status = decode.stream->Finish();
  const bool stalled = watch->fired() && !done;
  watch.reset();
  if (finish_) return Outcome{Outcome::kDone, {}};
  return Failed(Outcome::kRetryDecode, worker, status, stalled,
                stalled     ? absl::StrCat("stalled (no token within ",
                                           absl::FormatDuration(stall_bound()), ")")
                : status.ok() ? "stream ended early"
                              : status.error_message());
}

void RequestRun::KvReady(const v1::DecodeResponse& r, int kv_tokens, bool prefilled) {
  if (t_prefilled_ && handoff_ms_ == 0) handoff_ms_ = Ms(Clock::now() - *t_prefilled_);
  transfer_bytes_ += r.transfer_bytes();
  transfer_ms_ += r.transfer_ms();
  s_.metrics->transfer_bytes->Increment(double(r.transfer_bytes()));
  if (r.transfer_bytes() > 0) s_.metrics->transfer->Observe(r.transfer_ms() / 1000);
  if (kv_tokens > r.local_cached_tokens() + r.landed_tokens()) {
    s_.metrics->transfer_failures->Increment();
  }
  if (generated_.empty() && !prefilled) cached_tokens_ = r.local_cached_tokens();
}

RequestRun::Outcome RequestRun::Failed(Outcome::Kind retry, const WorkerRef& worker,
                                       const grpc::Status& status, bool stalled,
                                       const std::string& what) {
  if (!stalled && ClientDone(status)) return Outcome{Outcome::kFail, Interrupted()};
  if (Unretryable(status.error_code())) return Outcome{Outcome::kFail, status};
  const bool prefill = retry == Outcome::kRetryPrefill;
  if (stalled) (prefill ? s_.metrics->prefill_stalls : s_.metrics->decode_stalls)->Increment();
  last_error_ = absl::StrCat(prefill ? "prefill " : "decode ", worker.worker_id, ": ", what);
  services::Log().warn("{}: {} after {} tokens; retrying", request_id_.c_str(), last_error_.c_str(),
                       generated_.size());
  // Unreachable or frozen: no more requests until its next heartbeat.
  if (status.error_code() == grpc::UNAVAILABLE || stalled) s_.registry->MarkFailed(worker.slot);
  exclude_.insert(worker.slot);
  ++retries_;
  s_.metrics->retries->Increment();
  return Outcome{retry, {}};
}

bool RequestRun::OnToken(int32_t token, const v1::TokenLogprob* logprob) {
  const auto now = Clock::now();
  if (!t_first_) {
    t_first_ = now;
    s_.metrics->ttft->Observe(Seconds(now - t_admit_));
  } else {
    gaps_ms_.push_back(Ms(now - t_last_));
    s_.metrics->tbt->Observe(gaps_ms_.back() / 1000);
  }
  t_last_ = now;
  generated_.push_back(token);
  const auto& eos = model_.eos_token_ids;
  const auto& stop_ids = req_.stop_token_ids();
  bool done = false;
  // Before min_tokens, workers mask EOS and stop tokens, and stop strings
  // do not count.
  const bool may_stop = int(generated_.size()) > v_.sampling.min_tokens();
  if (may_stop && (std::find(stop_ids.begin(), stop_ids.end(), token) != stop_ids.end() ||
                   (!req_.ignore_eos() && std::find(eos.begin(), eos.end(), token) != eos.end()))) {
    finish_ = v1::FINISH_REASON_STOP;
    done = true;
  } else if (int(generated_.size()) >= v_.max_tokens ||
             int(v_.prompt.size() + generated_.size()) >= model_.max_sequence_len) {
    finish_ = v1::FINISH_REASON_LENGTH;
    done = true;
  }
  v1::GenerateResponse out;
  v1::Delta* delta = out.mutable_delta();
  delta->add_token_ids(token);
  if (logprob != nullptr && v_.sampling.logprobs()) *delta->add_logprobs() = *logprob;
  if (generated_.size() == 1) {
    delta->set_prompt_tokens(int(v_.prompt.size()));
    delta->set_cached_prompt_tokens(cached_tokens_);
    if (v_.sampling.prompt_logprobs()) *delta->mutable_prompt_logprobs() = prompt_logprobs_;
  }
  if (text_) {
    TextStream::Piece piece = text_->Push(token, may_stop, done);
    if (piece.stopped) {
      finish_ = v1::FINISH_REASON_STOP;
      done = true;
    }
    delta->set_text(std::move(piece.text));
  }
  if (!client_gone_ && !emit_(out)) client_gone_ = true;
  return done || client_gone_;
}

grpc::Status RequestRun::Finish() {
  if (client_gone_) return Interrupted();
  const auto now = Clock::now();
  v1::GenerateResponse out;
  v1::Final* f = out.mutable_final();
  f->set_finish_reason(*finish_);
  f->set_request_id(request_id_);
  f->set_prefill_worker(prefill_worker_);
  f->set_decode_worker(decode_worker_);
  f->set_retries(retries_);
  v1::Usage* u = f->mutable_usage();
  u->set_prompt_tokens(int(v_.prompt.size()));
  u->set_cached_prompt_tokens(cached_tokens_);
  u->set_generated_tokens(int(generated_.size()));
  v1::Timings* t = f->mutable_timings();
  t->set_queue_ms(t_dispatch_ ? Ms(*t_dispatch_ - t_admit_) : 0);
  t->set_ttft_ms(t_first_ ? Ms(*t_first_ - t_admit_) : 0);
  if (!gaps_ms_.empty()) {
    double sum = 0;
    for (double g : gaps_ms_) sum += g;
    t->set_mean_tbt_ms(sum / gaps_ms_.size());
    std::vector<double> sorted = gaps_ms_;
    std::sort(sorted.begin(), sorted.end());
    t->set_p99_tbt_ms(sorted[std::min(sorted.size() - 1, size_t(std::ceil(0.99 * sorted.size())) - 1)]);
  }
  t->set_e2e_ms(Ms(now - t_admit_));
  t->set_transfer_bytes(transfer_bytes_);
  t->set_transfer_ms(transfer_ms_);
  t->set_handoff_ms(handoff_ms_);
  s_.metrics->e2e->Observe(Seconds(now - t_admit_));
  s_.metrics->generated_tokens->Increment(double(generated_.size()));
  if (!emit_(out)) return Interrupted();
  return grpc::Status::OK;
}

bool RequestRun::ClientDone(const grpc::Status& worker) const {
  return client_gone_ || ctx_->IsCancelled() || worker.error_code() == grpc::DEADLINE_EXCEEDED ||
         ctx_->deadline() <= std::chrono::system_clock::now();
}

grpc::Status RequestRun::Interrupted() const {
  return ctx_->deadline() <= std::chrono::system_clock::now() || !ctx_->IsCancelled()
             ? grpc::Status(grpc::DEADLINE_EXCEEDED, "the request's deadline passed")
             : grpc::Status(grpc::CANCELLED, "the client cancelled the request");
}

v1::DecodeStart RequestRun::DecodeStartFor(const WorkerRef* publisher) const {
  v1::DecodeStart start;
  start.set_request_id(request_id_);
  *start.mutable_prompt() = {v_.prompt.begin(), v_.prompt.end()};
  start.mutable_prompt()->Add(generated_.begin(), generated_.end());
  *start.mutable_sampling() = v_.sampling;
  start.mutable_sampling()->set_min_tokens(
      std::max(0, v_.sampling.min_tokens() - int(generated_.size())));
  start.mutable_sampling()->mutable_response_format()->set_generated_tokens(int(generated_.size()));
  start.set_max_tokens(v_.max_tokens - int(generated_.size()));
  *start.mutable_stop_token_ids() = req_.stop_token_ids();
  start.set_ignore_eos(req_.ignore_eos());
  start.set_tenant(req_.tenant());
  // The prompt's KV: being published by this attempt's prefill, or by the
  // earlier one when resuming after a decode failure.
  const std::string from = !kv_publisher_.empty() ? kv_publisher_
                           : publisher != nullptr ? publisher->moqt_address
                                                  : "";
  if (!from.empty()) {
    v1::KvSource* kv = start.mutable_kv();
    kv->set_prompt_digest(v_.digest);
    kv->set_groups(int((v_.prompt.size() + model_.chunk_tokens - 1) / model_.chunk_tokens));
    kv->set_compression(s_.options->compression);
    kv->set_moqt_address(from);
    GrantRead(kv);
    start.set_kv_tokens(int(v_.prompt.size()));
  }
  // Decode makes the prompt's log-probabilities only when it computes the
  // whole prompt before the first token.
  start.mutable_sampling()->set_prompt_logprobs(v_.sampling.prompt_logprobs() && from.empty() &&
                                                generated_.empty());
  return start;
}

void RequestRun::GrantRead(v1::KvSource* kv) const {
  const auto& auth = s_.options->moqt_auth;
  if (auth == nullptr) return;
  kv->set_auth_token(moqt::SerializeAuthToken(
      auth->Mint(kvcache::NamespaceOf(model_.model_id, kv->prompt_digest()), moqt::kAuthRead,
                 absl::Now() + s_.options->kv_token_ttl)));
}

std::unique_ptr<grpc::ClientContext> RequestRun::WorkerContext() const {
  auto c = grpc::ClientContext::FromServerContext(*ctx_);
  if (ctx_->deadline() == std::chrono::system_clock::time_point::max()) {
    c->set_deadline(std::chrono::system_clock::now() +
                    absl::ToChronoSeconds(s_.options->default_deadline));
  }
  return c;
}

}  // namespace kvcast::scheduler
