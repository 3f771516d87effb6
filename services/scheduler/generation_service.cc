#include "services/scheduler/generation_service.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/grammar/grammar_cache.h"
#include "engine/sampling/logprobs.h"
#include "engine/sampling/sampler.h"
#include "services/scheduler/text_stream.h"
#include "services/common/grpc_status.h"
#include "services/common/sampling_proto.h"
#include "transport/kvcache/naming.h"
#include "transport/moqt/codec.h"

namespace kvcast::scheduler {
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// Codes a retry on another worker cannot fix.
bool Unretryable(grpc::StatusCode c) {
  return c == grpc::INVALID_ARGUMENT || c == grpc::FAILED_PRECONDITION ||
         c == grpc::OUT_OF_RANGE || c == grpc::UNIMPLEMENTED;
}

}  // namespace

class GenerationService::Request {
 public:
  Request(GenerationService* svc, grpc::ServerContext* ctx, const v1::GenerateRequest& req,
          const std::function<bool(const v1::GenerateResponse&)>& emit)
      : svc_(svc), ctx_(ctx), req_(req), emit_(emit), t_admit_(Clock::now()) {}

  grpc::Status Run();
  // Whether Run refused the request for want of a --max_queue slot.
  bool queue_full() const { return queue_full_; }

 private:
  grpc::Status Validate();
  // Appends a token, emits its delta; true when generation is over (stop
  // token or string, or max_tokens).
  // `logprob`: the token's, when the request asked for them (else null).
  bool OnToken(int32_t token, const v1::TokenLogprob* logprob);
  grpc::Status Finish();
  // Whether a worker call ended because the client's call did (deadline or
  // cancellation propagate to worker calls): then there is nothing to retry.
  bool ClientDone(const grpc::Status& worker) const {
    return client_gone_ || ctx_->IsCancelled() ||
           worker.error_code() == grpc::DEADLINE_EXCEEDED ||
           ctx_->deadline() <= std::chrono::system_clock::now();
  }
  grpc::Status Interrupted() const {
    return ctx_->deadline() <= std::chrono::system_clock::now() || !ctx_->IsCancelled()
               ? grpc::Status(grpc::DEADLINE_EXCEEDED, "the request's deadline passed")
               : grpc::Status(grpc::CANCELLED, "the client cancelled the request");
  }
  // `prefill`: the worker publishing the prompt in this attempt, if any.
  v1::DecodeStart DecodeStartFor(const WorkerRef* prefill) const;
  // Grants the reader of `kv` SUBSCRIBE/FETCH on its prompt's namespace
  // (with --moqt_auth_key_file).
  void GrantRead(v1::KvSource* kv) const {
    const auto& auth = svc_->options_.moqt_auth;
    if (auth == nullptr) return;
    kv->set_auth_token(moqt::SerializeAuthToken(
        auth->Mint(kvcache::NamespaceOf(model_.model_id, kv->prompt_digest()), moqt::kAuthRead,
                   absl::Now() + svc_->options_.kv_token_ttl)));
  }
  // How long `worker` may stay silent: `floor`, or 10 x its calibrated
  // chunk time when longer (a slow model or backend).
  static absl::Duration StallBound(absl::Duration floor, const WorkerRef& worker) {
    return std::max(floor, absl::Milliseconds(10 * worker.chunk_ms));
  }
  struct PrefillCall {
    grpc::Status status;
    bool stalled = false;  // cancelled by the watchdog: silent for its bound
    int done_tokens = 0;   // the last progress reported
    v1::PrefillResponse response;
  };
  // Streams the Prefill call, cancelling it when no message comes for
  // `bound` (progress, keepalive or the result).
  PrefillCall CallPrefill(const WorkerRef& worker, const v1::PrefillRequest& request,
                          grpc::ClientContext* ctx, absl::Duration bound) {
    PrefillCall call;
    auto watch = svc_->watchdog_.Start(ctx, bound);
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
  // A context for a worker call: the client's deadline and cancellation,
  // or the default deadline when the client set none.
  std::unique_ptr<grpc::ClientContext> WorkerContext() const {
    auto c = grpc::ClientContext::FromServerContext(*ctx_);
    if (ctx_->deadline() == std::chrono::system_clock::time_point::max()) {
      c->set_deadline(std::chrono::system_clock::now() +
                      absl::ToChronoSeconds(svc_->options_.default_deadline));
    }
    return c;
  }

  GenerationService* const svc_;
  grpc::ServerContext* const ctx_;
  const v1::GenerateRequest& req_;
  const std::function<bool(const v1::GenerateResponse&)>& emit_;
  const Clock::time_point t_admit_;
  bool queue_full_ = false;

  ModelInfo model_;
  std::string request_id_;
  std::vector<int32_t> prompt_;
  std::vector<Hash128> chain_;
  std::string digest_;
  v1::SamplingParams sampling_;
  int max_tokens_ = 0;
  std::vector<std::string> stops_;

  std::vector<int32_t> generated_;
  std::optional<TextStream> text_;  // with a tokenizer
  std::optional<v1::FinishReason> finish_;
  bool client_gone_ = false;
  std::string kv_publisher_;  // set once a prefill published the prompt
  int cached_tokens_ = 0;
  int retries_ = 0;
  std::string prefill_worker_, decode_worker_;
  std::optional<Clock::time_point> t_dispatch_, t_first_, t_prefilled_;
  double handoff_ms_ = 0;
  std::vector<double> gaps_ms_;
  Clock::time_point t_last_;
  int64_t transfer_bytes_ = 0;
  double transfer_ms_ = 0;
};

grpc::Status GenerationService::Request::Validate() {
  auto model = svc_->registry_->model();
  if (!model) {
    return grpc::Status(grpc::UNAVAILABLE, "no worker has registered with the scheduler yet");
  }
  model_ = *model;
  if (!req_.model().empty() && req_.model() != model_.name) {
    return grpc::Status(grpc::INVALID_ARGUMENT,
                        absl::StrCat("unknown model \"", req_.model(), "\"; this service serves \"",
                                     model_.name, "\""));
  }
  if (req_.has_token_ids()) {
    prompt_.assign(req_.token_ids().ids().begin(), req_.token_ids().ids().end());
    for (int32_t t : prompt_) {
      if (t < 0 || t >= model_.vocab_size) {
        return grpc::Status(grpc::INVALID_ARGUMENT,
                            absl::StrCat("token id ", t, " is outside the vocabulary [0, ",
                                         model_.vocab_size, ")"));
      }
    }
  } else if (req_.prompt_case() == v1::GenerateRequest::kText) {
    if (svc_->tokenizer_ == nullptr) {
      return grpc::Status(grpc::INVALID_ARGUMENT,
                          "this scheduler has no tokenizer (--model); send token_ids");
    }
    if (req_.text().empty()) return grpc::Status(grpc::INVALID_ARGUMENT, "empty prompt");
    auto ids = svc_->tokenizer_->Encode(req_.text(), /*add_bos=*/true);
    if (!ids.ok()) return services::ToGrpc(ids.status());
    prompt_ = std::move(*ids);
  }
  if (prompt_.empty()) return grpc::Status(grpc::INVALID_ARGUMENT, "empty prompt");
  const int n = int(prompt_.size());
  if (n >= model_.max_sequence_len) {
    return grpc::Status(grpc::INVALID_ARGUMENT,
                        absl::StrCat("the prompt has ", n, " tokens; the model's context is ",
                                     model_.max_sequence_len));
  }
  max_tokens_ = req_.max_tokens();
  const int limit = svc_->options_.max_tokens_limit;
  if (max_tokens_ < 1 || max_tokens_ > limit) {
    return grpc::Status(grpc::INVALID_ARGUMENT,
                        absl::StrCat("max_tokens must be in [1, ", limit, "], got ", max_tokens_));
  }
  sampling_ = req_.sampling();
  if (absl::Status s = services::SamplingFromProto(sampling_).Validate(); !s.ok()) {
    return services::ToGrpc(s);
  }
  if (sampling_.top_logprobs() < 0 || sampling_.top_logprobs() > kMaxTopLogprobs ||
      (sampling_.top_logprobs() > 0 && !sampling_.logprobs())) {
    return grpc::Status(grpc::INVALID_ARGUMENT,
                        absl::StrCat("top_logprobs must be in [0, ", kMaxTopLogprobs,
                                     "] and wants logprobs, got ", sampling_.top_logprobs()));
  }
  if (absl::StatusOr<std::shared_ptr<const grammar::Grammar>> g =
          svc_->grammars_.Get(services::ResponseFormatFromProto(sampling_));
      !g.ok()) {
    return grpc::Status(grpc::INVALID_ARGUMENT, absl::StrCat("response_format: ", g.status().message()));
  }
  sampling_.mutable_response_format()->set_generated_tokens(0);  // the scheduler's to set
  if (sampling_.min_tokens() < 0 || sampling_.min_tokens() > max_tokens_) {
    return grpc::Status(grpc::INVALID_ARGUMENT,
                        absl::StrCat("min_tokens must be in [0, max_tokens = ", max_tokens_,
                                     "], got ", sampling_.min_tokens()));
  }
  for (const std::string& s : req_.stop()) {
    if (s.empty()) return grpc::Status(grpc::INVALID_ARGUMENT, "empty stop string");
    stops_.push_back(s);
  }
  if (!stops_.empty() && svc_->tokenizer_ == nullptr) {
    return grpc::Status(grpc::INVALID_ARGUMENT,
                        "stop strings need a tokenizer on the scheduler (--model)");
  }
  if (svc_->tokenizer_ != nullptr) text_.emplace(svc_->tokenizer_.get(), stops_);
  for (int32_t t : req_.stop_token_ids()) {
    if (t < 0 || t >= model_.vocab_size) {
      return grpc::Status(grpc::INVALID_ARGUMENT, absl::StrCat("stop token id ", t,
                                                               " is outside the vocabulary"));
    }
  }
  request_id_ = req_.request_id().empty()
                    ? absl::StrCat("req-", svc_->next_request_.fetch_add(1))
                    : req_.request_id();
  // The tenant salts the chain: its chunks, index entries and KV tracks are
  // its own (engine.h GenerationParams::tenant).
  const Hash128 seed =
      req_.tenant().empty() ? model_.prefix_seed : PrefixSeed(model_.fingerprint, req_.tenant());
  chain_ = ChunkHashChain(seed, prompt_, model_.chunk_tokens);
  digest_ = kvcache::PromptDigest(seed, prompt_, model_.chunk_tokens).ToHex();
  return grpc::Status::OK;
}

bool GenerationService::Request::OnToken(int32_t token, const v1::TokenLogprob* logprob) {
  const auto now = Clock::now();
  if (!t_first_) {
    t_first_ = now;
    svc_->m_.ttft->Observe(std::chrono::duration<double>(now - t_admit_).count());
  } else {
    gaps_ms_.push_back(Ms(now - t_last_));
    svc_->m_.tbt->Observe(gaps_ms_.back() / 1000);
  }
  t_last_ = now;
  generated_.push_back(token);
  const auto& eos = model_.eos_token_ids;
  const auto& stop_ids = req_.stop_token_ids();
  bool done = false;
  // Before min_tokens, workers mask EOS and stop tokens, and stop strings
  // do not count.
  const bool may_stop = int(generated_.size()) > sampling_.min_tokens();
  if (may_stop && (std::find(stop_ids.begin(), stop_ids.end(), token) != stop_ids.end() ||
                   (!req_.ignore_eos() && std::find(eos.begin(), eos.end(), token) != eos.end()))) {
    finish_ = v1::FINISH_REASON_STOP;
    done = true;
  } else if (int(generated_.size()) >= max_tokens_ ||
             int(prompt_.size() + generated_.size()) >= model_.max_sequence_len) {
    finish_ = v1::FINISH_REASON_LENGTH;
    done = true;
  }
  v1::GenerateResponse out;
  v1::Delta* delta = out.mutable_delta();
  delta->add_token_ids(token);
  if (logprob != nullptr && sampling_.logprobs()) *delta->add_logprobs() = *logprob;
  if (generated_.size() == 1) {
    delta->set_prompt_tokens(int(prompt_.size()));
    delta->set_cached_prompt_tokens(cached_tokens_);
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

v1::DecodeStart GenerationService::Request::DecodeStartFor(const WorkerRef* prefill) const {
  v1::DecodeStart start;
  start.set_request_id(request_id_);
  *start.mutable_prompt() = {prompt_.begin(), prompt_.end()};
  start.mutable_prompt()->Add(generated_.begin(), generated_.end());
  *start.mutable_sampling() = sampling_;
  start.mutable_sampling()->set_min_tokens(
      std::max(0, sampling_.min_tokens() - int(generated_.size())));
  start.mutable_sampling()->mutable_response_format()->set_generated_tokens(int(generated_.size()));
  start.set_max_tokens(max_tokens_ - int(generated_.size()));
  *start.mutable_stop_token_ids() = req_.stop_token_ids();
  start.set_ignore_eos(req_.ignore_eos());
  start.set_tenant(req_.tenant());
  // The prompt's KV: being published by this attempt's prefill, or by the
  // earlier one when resuming after a decode failure.
  const std::string publisher =
      !kv_publisher_.empty() ? kv_publisher_ : prefill != nullptr ? prefill->moqt_address : "";
  if (!publisher.empty()) {
    v1::KvSource* kv = start.mutable_kv();
    kv->set_prompt_digest(digest_);
    kv->set_groups(int((prompt_.size() + model_.chunk_tokens - 1) / model_.chunk_tokens));
    kv->set_compression(svc_->options_.compression);
    kv->set_moqt_address(publisher);
    GrantRead(kv);
    start.set_kv_tokens(int(prompt_.size()));
  }
  return start;
}

grpc::Status GenerationService::Request::Run() {
  if (grpc::Status s = Validate(); !s.ok()) return s;
  const int n = int(prompt_.size());
  absl::Duration retry_after;
  if (absl::Status s = svc_->tenant_limits_.Admit(req_.tenant(), n, &retry_after); !s.ok()) {
    svc_->m_.rejected->Increment();
    ctx_->AddTrailingMetadata("kvcast-limit", "tenant");
    ctx_->AddTrailingMetadata("retry-after",
                              absl::StrCat(absl::ToInt64Seconds(absl::Ceil(retry_after, absl::Seconds(1)))));
    return services::ToGrpc(s);
  }
  struct TenantRelease {
    TenantLimits* limits;
    const std::string& tenant;
    ~TenantRelease() { limits->Release(tenant); }
  } tenant_release{&svc_->tenant_limits_, req_.tenant()};
  // A slot of --max_queue only once the tenant's own limits let the request
  // in: requests its tenant refuses never hold one, not even briefly, so a
  // flooding tenant cannot crowd the others out of the queue.
  if (svc_->in_flight_.fetch_add(1) >= svc_->options_.max_queue) {
    svc_->in_flight_.fetch_sub(1);
    queue_full_ = true;
    svc_->m_.rejected->Increment();
    ctx_->AddTrailingMetadata("retry-after", "1");
    return grpc::Status(grpc::RESOURCE_EXHAUSTED,
                        absl::StrCat("the scheduler has ", svc_->options_.max_queue,
                                     " requests in flight (--max_queue); retry later"));
  }
  struct QueueSlot {
    std::atomic<int>& in_flight;
    ~QueueSlot() { in_flight.fetch_sub(1); }
  } queue_slot{svc_->in_flight_};
  svc_->m_.prompt_tokens->Increment(n);
  absl::flat_hash_set<WorkerSlot> exclude;
  int prefill_failures = 0, decode_failures = 0;
  // The chunks a failed prefill attempt had published (its progress says
  // how far it got; decode's subscription took them into the relay's
  // cache): the next attempt fetches them instead of computing them again.
  struct Abandoned {
    std::string publisher;
    int groups = 0;
  } abandoned;
  std::string last_error;
  for (;;) {
    if (ctx_->IsCancelled()) return Interrupted();
    const auto t_route = Clock::now();
    const int so_far = int(generated_.size());
    auto route = svc_->registry_->Choose(chain_, n + so_far, max_tokens_ - so_far, exclude);
    svc_->m_.route->Observe(std::chrono::duration<double>(Clock::now() - t_route).count());
    // No decode worker right now (all failed or suspended): give the
    // registry a moment (heartbeats revive live workers) before giving up.
    for (int wait = 0; !route.ok() && wait < 30 && !ctx_->IsCancelled(); ++wait) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (wait == 10) exclude.clear();  // failed once is not failed forever
      route = svc_->registry_->Choose(chain_, n + so_far, max_tokens_ - so_far, exclude);
    }
    if (!route.ok()) {
      return grpc::Status(grpc::UNAVAILABLE,
                          last_error.empty() ? std::string(route.status().message())
                                             : absl::StrCat(route.status().message(),
                                                            "; last failure: ", last_error));
    }
    struct Releaser {
      WorkerRegistry* r;
      Route* route;
      ~Releaser() { r->Release(route); }
    } releaser{svc_->registry_, &*route};
    if (!t_dispatch_) t_dispatch_ = Clock::now();
    decode_worker_ = route->decode.worker_id;
    if (route->decode_plan.fused && generated_.empty()) svc_->m_.fused->Increment();
    // Fused, or after max_attempts prefill failures: the decode worker
    // computes the prompt.
    const bool need_prefill = generated_.empty() && route->prefill.has_value() &&
                              prefill_failures < svc_->options_.max_attempts;
    // A prefill worker chosen but not called owes nothing.
    if (!need_prefill) svc_->registry_->PrefillAnswered(&*route);

    // 1. Decode first: it allocates and subscribes while the prefill runs.
    auto dctx = WorkerContext();
    auto dstub = v1::Decode::NewStub(route->decode.channel);
    auto stream = dstub->Decode(dctx.get());
    v1::DecodeRequest start_msg;
    *start_msg.mutable_start() = DecodeStartFor(need_prefill ? &*route->prefill : nullptr);
    const bool sent = stream->Write(start_msg);

    // 2. Prefill: the first token.
    if (sent && need_prefill) {
      svc_->m_.predicted_cached_tokens->Increment(
          (route->prefill_plan.cached_chunks + route->prefill_plan.fetched_chunks) *
          model_.chunk_tokens);
      v1::PrefillRequest preq;
      preq.set_request_id(request_id_);
      *preq.mutable_tokens() = {prompt_.begin(), prompt_.end()};
      *preq.mutable_sampling() = sampling_;
      preq.set_tenant(req_.tenant());
      const int planned = route->prefill_plan.cached_chunks + route->prefill_plan.fetched_chunks;
      if (route->prefill_plan.fetched_chunks > 0 || abandoned.groups > planned) {
        const bool resume = abandoned.groups > planned;
        v1::KvSource* reuse = preq.mutable_reuse();
        reuse->set_prompt_digest(resume ? digest_ : route->reuse.prompt_digest);
        reuse->set_groups(resume ? abandoned.groups : planned);
        reuse->set_compression(svc_->options_.compression);
        reuse->set_moqt_address(resume ? abandoned.publisher : route->reuse.publisher);
        GrantRead(reuse);
      }
      auto pctx = WorkerContext();
      const absl::Duration prefill_bound = StallBound(svc_->options_.prefill_stall_floor,
                                                      *route->prefill);
      PrefillCall call = CallPrefill(*route->prefill, preq, pctx.get(), prefill_bound);
      grpc::Status& ps = call.status;
      const bool prefill_stalled = call.stalled;
      v1::PrefillResponse& presp = call.response;
      svc_->registry_->PrefillAnswered(&*route);
      if (!ps.ok()) {
        dctx->TryCancel();
        stream->Finish().IgnoreError();
        if (!prefill_stalled && ClientDone(ps)) return Interrupted();
        if (Unretryable(ps.error_code())) return ps;
        last_error = absl::StrCat("prefill ", route->prefill->worker_id, ": ",
                                  prefill_stalled
                                      ? absl::StrCat("silent for ", absl::FormatDuration(prefill_bound),
                                                     " after ", call.done_tokens, " of ", n,
                                                     " prompt tokens")
                                      : ps.error_message());
        if (prefill_stalled) svc_->m_.prefill_stalls->Increment();
        // Its last reported chunk may not have left it whole: leave it out.
        const int published = std::min(call.done_tokens / model_.chunk_tokens - 1,
                                       (n - 1) / model_.chunk_tokens);
        if (published > abandoned.groups) {
          abandoned = {route->prefill->moqt_address, published};
        }
        std::fprintf(stderr, "kvcast-scheduler: %s: %s; retrying\n", request_id_.c_str(),
                     last_error.c_str());
        // Unreachable or frozen: no more requests until its next heartbeat.
        if (ps.error_code() == grpc::UNAVAILABLE || prefill_stalled) {
          svc_->registry_->MarkFailed(route->prefill->slot);
        }
        exclude.insert(route->prefill->slot);
        ++retries_;
        svc_->m_.retries->Increment();
        if (++prefill_failures >= svc_->options_.max_attempts) {
          std::fprintf(stderr, "kvcast-scheduler: %s: recomputing on decode\n",
                       request_id_.c_str());
        }
        continue;
      }
      t_prefilled_ = Clock::now();
      prefill_worker_ = route->prefill->worker_id;
      kv_publisher_ = route->prefill->moqt_address;
      cached_tokens_ = presp.cached_tokens() + presp.fetched_tokens();
      svc_->m_.served_cached_tokens->Increment(cached_tokens_);
      svc_->registry_->Published(presp.prompt_digest(), kv_publisher_, chain_);
      if (OnToken(presp.first_token(),
                  presp.has_first_logprob() ? &presp.first_logprob() : nullptr)) {
        dctx->TryCancel();
        stream->Finish().IgnoreError();
        return Finish();
      }
      v1::DecodeRequest first;
      first.set_first_token(presp.first_token());
      stream->Write(first);
    }
    stream->WritesDone();

    // 3. Relay decode's tokens, cancelling the stream if it stalls.
    v1::DecodeResponse r;
    bool done = false;
    auto dwatch = svc_->watchdog_.Start(
        dctx.get(), StallBound(svc_->options_.decode_first_message, route->decode));
    double mean_gap_ms = 0;  // between messages with tokens
    int token_messages = 0;
    auto last_tokens = Clock::now();
    auto stall_bound = [&] {
      return std::max(StallBound(svc_->options_.decode_stall_floor, route->decode),
                      absl::Milliseconds(10 * mean_gap_ms));
    };
    while (!done && stream->Read(&r)) {
      if (r.token_ids_size() > 0) {
        const auto now = Clock::now();
        if (token_messages++ > 0) {
          const double gap = Ms(now - last_tokens);
          mean_gap_ms = token_messages == 2 ? gap : 0.9 * mean_gap_ms + 0.1 * gap;
        }
        last_tokens = now;
      }
      // Any message (tokens, KV ready, or the worker's keepalive) is progress.
      dwatch->Extend(stall_bound());
      if (r.kv_ready()) {
        if (t_prefilled_ && handoff_ms_ == 0) handoff_ms_ = Ms(Clock::now() - *t_prefilled_);
        transfer_bytes_ += r.transfer_bytes();
        transfer_ms_ += r.transfer_ms();
        svc_->m_.transfer_bytes->Increment(double(r.transfer_bytes()));
        if (r.transfer_bytes() > 0) svc_->m_.transfer->Observe(r.transfer_ms() / 1000);
        if (start_msg.start().kv_tokens() > r.local_cached_tokens() + r.landed_tokens()) {
          svc_->m_.transfer_failures->Increment();
        }
        if (generated_.empty() && !need_prefill) cached_tokens_ = r.local_cached_tokens();
      }
      for (int i = 0; i < r.token_ids_size(); ++i) {
        if (OnToken(r.token_ids(i), i < r.logprobs_size() ? &r.logprobs(i) : nullptr)) {
          done = true;
          break;
        }
      }
      if (r.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
        if (!finish_) finish_ = r.finish_reason();
        done = true;
      }
    }
    if (done) dctx->TryCancel();
    grpc::Status ds = stream->Finish();
    const bool decode_stalled = dwatch->fired() && !done;
    dwatch.reset();
    if (finish_) return Finish();
    if (!decode_stalled && ClientDone(ds)) return Interrupted();
    if (Unretryable(ds.error_code())) return ds;
    if (decode_stalled) svc_->m_.decode_stalls->Increment();
    last_error = absl::StrCat(
        "decode ", route->decode.worker_id, ": ",
        decode_stalled ? absl::StrCat("stalled (no token within ",
                                      absl::FormatDuration(stall_bound()), ")")
        : ds.ok() ? "stream ended early"
                  : ds.error_message());
    std::fprintf(stderr, "kvcast-scheduler: %s: %s after %zu tokens; retrying\n",
                 request_id_.c_str(), last_error.c_str(), generated_.size());
    if (ds.error_code() == grpc::UNAVAILABLE || decode_stalled) {
      svc_->registry_->MarkFailed(route->decode.slot);
    }
    exclude.insert(route->decode.slot);
    ++retries_;
    svc_->m_.retries->Increment();
    if (++decode_failures >= svc_->options_.max_attempts) {
      return grpc::Status(grpc::UNAVAILABLE,
                          absl::StrCat("gave up after ", decode_failures,
                                       " decode failures; last: ", last_error));
    }
  }
}

grpc::Status GenerationService::Request::Finish() {
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
  u->set_prompt_tokens(int(prompt_.size()));
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
  svc_->m_.e2e->Observe(std::chrono::duration<double>(now - t_admit_).count());
  svc_->m_.generated_tokens->Increment(double(generated_.size()));
  if (!emit_(out)) return Interrupted();
  return grpc::Status::OK;
}

GenerationService::GenerationService(WorkerRegistry* registry,
                                     std::unique_ptr<Tokenizer> tokenizer,
                                     services::MetricsRegistry* metrics,
                                     GenerationOptions options)
    : registry_(registry),
      tokenizer_(std::move(tokenizer)),
      options_(std::move(options)),
      tenant_limits_(options_.tenant_limits) {
  auto& m = *metrics;
  const auto buckets = services::DefaultLatencyBuckets();
  m_.ok = m.AddCounter("kvcast_requests_total", "generation requests by result",
                       {{"result", "ok"}});
  m_.failed = m.AddCounter("kvcast_requests_total", "generation requests by result",
                           {{"result", "error"}});
  m_.rejected = m.AddCounter("kvcast_requests_total", "generation requests by result",
                             {{"result", "rejected"}});
  m_.retries = m.AddCounter("kvcast_retries_total", "worker failures recovered from");
  m_.fused = m.AddCounter("kvcast_fused_requests_total",
                          "requests run on their decode worker alone (PD fusion)");
  m_.prefill_stalls = m.AddCounter("kvcast_stalls_total", "worker calls cancelled for no progress",
                                   {{"phase", "prefill"}});
  m_.decode_stalls = m.AddCounter("kvcast_stalls_total", "worker calls cancelled for no progress",
                                  {{"phase", "decode"}});
  m_.transfer_failures = m.AddCounter("kvcast_kv_transfer_failures_total",
                                      "requests whose KV did not all land (recomputed)");
  m_.prompt_tokens = m.AddCounter("kvcast_prompt_tokens_total", "prompt tokens");
  m_.predicted_cached_tokens = m.AddCounter(
      "kvcast_prefix_hit_tokens_total", "prompt tokens reusable per the router and as served",
      {{"source", "predicted"}});
  m_.served_cached_tokens = m.AddCounter(
      "kvcast_prefix_hit_tokens_total", "prompt tokens reusable per the router and as served",
      {{"source", "served"}});
  m_.generated_tokens = m.AddCounter("kvcast_generated_tokens_total", "tokens generated");
  m_.transfer_bytes = m.AddCounter("kvcast_kv_transfer_bytes_total", "KV bytes landed in decode");
  m_.ttft = m.AddHistogram("kvcast_ttft_seconds", "time to first token", buckets);
  m_.tbt = m.AddHistogram("kvcast_time_between_tokens_seconds", "time between tokens", buckets);
  m_.e2e = m.AddHistogram("kvcast_request_seconds", "end-to-end request latency", buckets);
  m_.transfer = m.AddHistogram("kvcast_kv_transfer_seconds", "KV landing time", buckets);
  m_.route = m.AddHistogram("kvcast_route_seconds", "routing time per attempt",
                            {1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1});
  m.AddCallbackGauge("kvcast_queue_depth", "requests admitted and not finished",
                     [this] { return double(in_flight_.load()); });
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
                                    const std::function<bool(const v1::GenerateResponse&)>& emit) {
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
  Request r(this, context, *req, emit);
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
    } else {
      *result->mutable_final() = r.final();
    }
    return true;
  });
}

}  // namespace kvcast::scheduler
