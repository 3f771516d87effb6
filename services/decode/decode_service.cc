#include "services/decode/decode_service.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "services/common/call_wait.h"
#include "services/common/grpc_status.h"
#include "services/common/log.h"
#include "services/worker/kv_landing.h"
#include "services/common/sampling_proto.h"
#include "transport/kvcache/naming.h"

namespace kvcast::decode {

// How often a waiting decode stream says it is alive (stall detection).
constexpr std::chrono::milliseconds kKeepalive{250};
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

GenerationParams ParamsOf(const v1::DecodeStart& start) {
  GenerationParams p;
  p.sampling = services::SamplingFromProto(start.sampling());
  p.max_tokens = start.max_tokens();
  p.stop_tokens.assign(start.stop_token_ids().begin(), start.stop_token_ids().end());
  p.ignore_eos = start.ignore_eos();
  p.min_tokens = start.sampling().min_tokens();
  p.logprobs = start.sampling().logprobs();
  p.top_logprobs = start.sampling().top_logprobs();
  p.prompt_logprobs = start.sampling().prompt_logprobs();
  p.response_format = services::ResponseFormatFromProto(start.sampling());
  p.tenant = start.tenant();
  return p;
}

v1::FinishReason ToProto(FinishReason r) {
  return r == FinishReason::kStop ? v1::FINISH_REASON_STOP : v1::FINISH_REASON_LENGTH;
}

// Tokens from the compute thread to the stream's handler thread.
// A sequence's events, handed from the compute thread to the handler; the
// handler sleeps on `wait` between them (shared: the compute thread may
// hold it last).
struct TokenQueue {
  explicit TokenQueue(grpc::ServerContext* context)
      : wait([context] { return context->IsCancelled(); }) {}
  absl::Mutex mu;
  std::deque<SequenceEvent> events ABSL_GUARDED_BY(mu);
  services::CallWait wait;
};

absl::Status CheckStart(const v1::DecodeStart& start) {
  const int n = start.prompt_size();
  if (n == 0) return absl::InvalidArgumentError("decode: empty prompt");
  if (start.kv_tokens() < 0 || start.kv_tokens() > n) {
    return absl::InvalidArgumentError(
        absl::StrCat("decode: kv_tokens ", start.kv_tokens(), " outside [0, ", n, "]"));
  }
  if (start.max_tokens() < 1) {
    return absl::InvalidArgumentError("decode: max_tokens must be at least 1");
  }
  if (start.sampling().prompt_logprobs() && start.kv_tokens() > 0) {
    return absl::InvalidArgumentError(
        "decode: prompt_logprobs need the prompt computed here (kv_tokens 0)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<DecodeService>> DecodeService::Create(
    worker::WorkerRuntime* runtime, const Options& options) {
  if (!(options.abr_budget_s > 0) || !(options.abr_initial_goodput > 0)) {
    return absl::InvalidArgumentError("the ABR budget and initial goodput must be positive");
  }
  const KvLayout& layout = runtime->engine().pool().layout();
  const double fp16_token_bytes = 2.0 * layout.num_layers * layout.token_floats() * 2;
  ASSIGN_OR_RETURN(std::vector<AbrTrack> ladder,
                   ParseAbrLadder(options.abr_ladder, fp16_token_bytes));
  return std::unique_ptr<DecodeService>(new DecodeService(runtime, options, std::move(ladder)));
}

DecodeService::DecodeService(worker::WorkerRuntime* runtime, const Options& options,
                             std::vector<AbrTrack> ladder)
    : rt_(runtime),
      options_(options),
      abr_ladder_(std::move(ladder)),
      abr_goodput_(options.abr_initial_goodput) {
  auto& m = rt_->metrics();
  for (const AbrTrack& t : abr_ladder_) {
    abr_groups_.push_back(m.AddCounter("kvcast_kv_abr_groups_total",
                                       "KV groups landed by adaptive bitrate, per track",
                                       {{"track", kvcache::TrackNameOf(t.compression)}}));
  }
  abr_switches_ = m.AddCounter("kvcast_kv_abr_switches_total",
                               "adaptive bitrate: track changes between consecutive groups");
  abr_recomputed_groups_ = m.AddCounter(
      "kvcast_kv_abr_recomputed_groups_total",
      "adaptive bitrate: groups left to compute here because they could not arrive in time");
  abr_goodput_gauge_ = m.AddGauge("kvcast_kv_abr_goodput_bytes_per_second",
                                  "adaptive bitrate: the goodput estimate after the last landing");
  abr_goodput_gauge_->Set(options.abr_initial_goodput);
  requests_ok_ = m.AddCounter("kvcast_decode_requests_total", "decode requests", {{"result", "ok"}});
  requests_failed_ =
      m.AddCounter("kvcast_decode_requests_total", "decode requests", {{"result", "error"}});
  tokens_generated_ = m.AddCounter("kvcast_decode_tokens_total", "tokens generated");
  transfer_bytes_ = m.AddCounter("kvcast_kv_transfer_bytes_total", "KV payload bytes landed");
  transfer_failures_ = m.AddCounter("kvcast_kv_transfer_failures_total",
                                    "KV landings that failed (recomputed instead)");
  local_cached_tokens_ = m.AddCounter("kvcast_decode_local_cached_tokens_total",
                                      "prompt tokens found in the decode worker's own cache");
  transfer_seconds_ = m.AddHistogram("kvcast_kv_transfer_seconds",
                                     "subscribe to last object landed",
                                     services::DefaultLatencyBuckets());
  tbt_seconds_ = m.AddHistogram("kvcast_time_between_tokens_seconds",
                                "time between tokens of a sequence",
                                services::DefaultLatencyBuckets());
}

absl::StatusOr<worker::KvLanded> DecodeService::LandGroups(
    grpc::ServerContext* context, const v1::DecodeStart& start,
    const kvcache::KvCompression& compression, int first_group, int end_group,
    const std::function<void()>& keepalive) {
  Engine& engine = rt_->engine();
  worker::KvRequest request;
  request.address = start.kv().moqt_address();
  request.track = kvcache::FullTrackNameOf(
      {kvcache::ModelId(engine.model().fingerprint()), start.kv().prompt_digest(), compression});
  request.auth_token = start.kv().auth_token();
  request.chunk_tokens = engine.options().chunk_tokens;
  request.num_tokens = start.kv_tokens();
  request.first_group = first_group;
  request.end_group = end_group;
  request.keep_whole_groups = true;
  auto last_keepalive = Clock::now();
  return worker::LandKv(
      worker::TargetOf(rt_), request,
      [context] { return context->IsCancelled(); },  // includes the deadline
      [&] {
        if (Clock::now() - last_keepalive > kKeepalive) {
          keepalive();
          last_keepalive = Clock::now();
        }
      });
}

DecodeService::Landed DecodeService::LandPromptKv(grpc::ServerContext* context,
                                                  const v1::DecodeStart& start,
                                                  const std::function<void()>& keepalive) {
  Engine& engine = rt_->engine();
  const int chunk = engine.options().chunk_tokens;
  const int page_tokens = engine.pool().layout().page_tokens;
  const int kv_tokens = start.kv_tokens();
  std::vector<int32_t> prompt(start.prompt().begin(), start.prompt().end());
  Landed out;
  // Chunks this worker holds need not travel. Without a KV source (PD
  // fusion, or no prefill worker) it computes the prompt after them; the
  // last token is always computed.
  const int own = kv_tokens > 0 ? kv_tokens : int(prompt.size());
  std::vector<Hash128> chain = ChunkHashChain(
      engine.prefix_seed(start.tenant()), absl::MakeConstSpan(prompt).first(own), chunk);
  const int pages_per_chunk = chunk / page_tokens;
  auto take_cached = [&] {
    out.pages = engine.prefix_cache().Acquire(
        chain, kv_tokens > 0 ? int(chain.size()) : (int(prompt.size()) - 1) / chunk);
    out.tokens = out.local_cached = int(out.pages.size() / pages_per_chunk) * chunk;
  };
  take_cached();
  if (out.tokens >= kv_tokens) return out;
  // Another request here landing the same prompt (n > 1 choices): wait for
  // it, then take its full chunks from the cache too.
  services::CallWait wait([context] { return context->IsCancelled(); });
  const bool share = engine.options().prefix_caching && !chain.empty();
  std::optional<SharedLandings::Turn> turn;
  if (share) {
    absl::StatusOr<SharedLandings::Turn> t =
        landings_.Take(chain.back(), &wait, absl::FromChrono(kKeepalive), keepalive);
    if (!t.ok()) return out;  // cancelled: the call ends
    turn.emplace(std::move(*t));
    if (turn->waited()) {
      take_cached();
      if (out.tokens >= kv_tokens) return out;
    }
  }
  const int own_chunks = out.tokens / chunk;

  const int groups = (kv_tokens + chunk - 1) / chunk;
  const auto t0 = Clock::now();
  auto add = [&](worker::KvLanded g) {
    out.pages.Append(std::move(g.pages));
    out.tokens += g.tokens;
    out.landed += g.tokens;
    out.bytes += g.bytes;
  };
  const std::string& name = start.kv().compression();
  if (name == kvcache::kAdaptiveCompression) {
    LandAdaptively(context, start, own_chunks, groups, keepalive, add);
  } else {
    LandTrack(context, start, name, own_chunks, groups, keepalive, add);
  }
  out.ms = Ms(Clock::now() - t0);
  if (share) {
    // Its full chunks for the requests waiting on this landing (the engine
    // would add them at admission: later, and a request of the same prompt
    // would land them again meanwhile).
    for (int c = own_chunks; c < std::min<int>(out.tokens / chunk, int(chain.size())); ++c) {
      if (absl::StatusOr<KvPages> shared = out.pages.Share(c * pages_per_chunk, pages_per_chunk);
          shared.ok()) {
        engine.prefix_cache().Insert(chain[c], *std::move(shared));
      }
    }
  }
  if (out.landed > 0) {
    transfer_bytes_->Increment(double(out.bytes));
    transfer_seconds_->Observe(out.ms / 1000);
  }
  return out;
}

void DecodeService::LandTrack(grpc::ServerContext* context, const v1::DecodeStart& start,
                              const std::string& track, int first_group, int end_group,
                              const std::function<void()>& keepalive,
                              const std::function<void(worker::KvLanded)>& add) {
  const int chunk = rt_->engine().options().chunk_tokens;
  auto compression = kvcache::CompressionOfTrackName(track.empty() ? "fp16" : track);
  absl::Status why = compression.status();
  for (int attempt = 0; compression.ok() && attempt < 2 && first_group < end_group; ++attempt) {
    absl::StatusOr<worker::KvLanded> landed =
        LandGroups(context, start, *compression, first_group, end_group, keepalive);
    why = landed.ok() ? landed->shortfall : landed.status();
    if (landed.ok()) {
      first_group += (landed->tokens + chunk - 1) / chunk;
      add(*std::move(landed));
    }
    // The session was lost under the request (e.g. the relay died), or
    // the relay's upstream was (the publisher died; a retry of the request
    // publishes it elsewhere): once more for what is missing, which goes to
    // the publisher directly while the relay is down, or to the prompt's
    // new publisher.
    if (why.ok() || context->IsCancelled() ||
        !(absl::IsUnavailable(why) || absl::IsInternal(why))) {
      break;
    }
    if (attempt == 0) {
      services::Log().warn("{}: KV of {}: {}; asking again from group {}", start.request_id(),
                           start.kv().prompt_digest().c_str(), why.ToString().c_str(),
                           first_group);
    }
  }
  if (why.ok() || context->IsCancelled()) return;
  transfer_failures_->Increment();
  services::Log().warn("{}: KV of {} did not land from group {} ({}); computing the rest here",
                       start.request_id(), start.kv().prompt_digest().c_str(), first_group,
                       why.ToString().c_str());
}

void DecodeService::LandAdaptively(grpc::ServerContext* context, const v1::DecodeStart& start,
                                   int first_group, int end_group,
                                   const std::function<void()>& keepalive,
                                   const std::function<void(worker::KvLanded)>& add) {
  AbrPlanner planner(abr_ladder_, options_.abr_budget_s, abr_goodput_);
  auto land = [&](const kvcache::KvCompression& c, int g) {
    return LandGroups(context, start, c, g, g + 1, [] {});
  };
  AbrOutcome outcome = decode::LandAdaptively(
      &planner, first_group, end_group, rt_->engine().options().chunk_tokens, start.kv_tokens(),
      options_.abr_depth, land,
      add, [context] { return context->IsCancelled(); }, keepalive);
  for (int t : outcome.tracks) abr_groups_[t]->Increment();
  abr_switches_->Increment(outcome.switches);
  abr_recomputed_groups_->Increment(outcome.recomputed_groups);
  if (!outcome.error.ok()) {
    transfer_failures_->Increment();
    services::Log().warn("{}: KV of {}: {}; computing the {} groups left", start.request_id(),
                         start.kv().prompt_digest().c_str(), outcome.error.ToString().c_str(),
                         outcome.recomputed_groups);
  }
  abr_goodput_ = planner.goodput();
  abr_goodput_gauge_->Set(abr_goodput_);
}

grpc::Status DecodeService::Decode(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<v1::DecodeResponse, v1::DecodeRequest>* stream) {
  v1::DecodeRequest first;
  if (!stream->Read(&first) || !first.has_start()) {
    return grpc::Status(grpc::INVALID_ARGUMENT, "decode: the first message must be `start`");
  }
  const v1::DecodeStart& start = first.start();
  if (absl::Status s = CheckStart(start); !s.ok()) return services::ToGrpc(s);
  const int n = start.prompt_size();
  // While the KV lands, and while tokens are slow to come but the engine
  // runs (e.g. it computes the prompt), an empty message every kKeepalive
  // tells the scheduler this worker is alive (its stall watchdog cancels
  // silent streams; a frozen worker sends nothing).
  auto keepalive = [stream] { stream->Write(v1::DecodeResponse()); };
  // Prompt log-probabilities come from computing the whole prompt: no
  // cached chunk of it is taken.
  Landed kv = start.sampling().prompt_logprobs() ? Landed() : LandPromptKv(context, start, keepalive);
  local_cached_tokens_->Increment(kv.local_cached);

  std::vector<int32_t> prompt(start.prompt().begin(), start.prompt().end());
  GenerationParams params = ParamsOf(start);
  PrefilledKv prefilled{std::move(kv.pages), kv.tokens, -1};
  if (start.kv_tokens() == n) {
    v1::DecodeRequest msg;
    if (!stream->Read(&msg) || msg.kind_case() != v1::DecodeRequest::kFirstToken) {
      return grpc::Status(grpc::CANCELLED, "decode: the stream ended before the first token");
    }
    if (prefilled.tokens == n) {
      prefilled.next_token = msg.first_token();
    } else {
      // The KV did not all land: compute it, with the first token as input.
      prompt.push_back(msg.first_token());
      params.max_tokens -= 1;
    }
  }
  v1::DecodeResponse ready;
  ready.set_kv_ready(true);
  ready.set_local_cached_tokens(kv.local_cached);
  ready.set_landed_tokens(kv.landed);
  ready.set_transfer_bytes(int64_t(kv.bytes));
  ready.set_transfer_ms(kv.ms);
  stream->Write(ready);
  return StreamTokens(context, stream, std::move(prompt), params, std::move(prefilled));
}

grpc::Status DecodeService::StreamTokens(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<v1::DecodeResponse, v1::DecodeRequest>* stream,
    std::vector<int32_t> prompt, const GenerationParams& params, PrefilledKv prefilled) {
  auto queue = std::make_shared<TokenQueue>(context);
  auto id = rt_->Submit(std::move(prompt), params, std::move(prefilled),
                        [queue](const SequenceEvent& ev) {
                          {
                            absl::MutexLock lock(&queue->mu);
                            queue->events.push_back(ev);
                          }
                          queue->wait.Notify();
                        });
  if (!id.ok()) {
    requests_failed_->Increment();
    return services::ToGrpc(id.status());
  }
  bool cancelled = false;
  auto last = Clock::now();
  auto last_write = last;
  uint64_t progress_at_write = rt_->progress();
  for (;;) {
    const services::CallWait::Woke woke =
        queue->wait.Wait(absl::Now() + absl::FromChrono(kKeepalive));
    if (woke == services::CallWait::kCancelled && !cancelled) {
      cancelled = true;
      rt_->Cancel(*id);  // its finish event follows
    }
    std::deque<SequenceEvent> events;
    {
      absl::MutexLock lock(&queue->mu);
      events.swap(queue->events);
    }
    const bool keepalive_due = !cancelled && events.empty() &&
                               Clock::now() - last_write >= kKeepalive &&
                               rt_->progress() != progress_at_write;
    if (keepalive_due) stream->Write(v1::DecodeResponse());
    if (keepalive_due || !events.empty()) {
      last_write = Clock::now();
      progress_at_write = rt_->progress();
    }
    for (const SequenceEvent& ev : events) {
      v1::DecodeResponse out;
      if (ev.token >= 0) {
        out.add_token_ids(ev.token);
        if (ev.logprob) *out.add_logprobs() = services::LogprobToProto(*ev.logprob);
        for (const TokenLogprob& lp : ev.prompt_logprobs) {
          *out.add_prompt_logprobs() = services::LogprobToProto(lp);
        }
        tokens_generated_->Increment();
        const auto now = Clock::now();
        tbt_seconds_->Observe(std::chrono::duration<double>(now - last).count());
        last = now;
      }
      if (ev.finish == FinishReason::kCancelled) {
        requests_failed_->Increment();
        return grpc::Status(grpc::CANCELLED, "decode cancelled");
      }
      if (ev.finish == FinishReason::kError) {
        requests_failed_->Increment();
        return grpc::Status(static_cast<grpc::StatusCode>(ev.status.code()),
                            absl::StrCat("decode failed: ", ev.status.message()));
      }
      if (ev.finish != FinishReason::kNone) out.set_finish_reason(ToProto(ev.finish));
      if (!cancelled && !stream->Write(out)) {
        cancelled = true;
        rt_->Cancel(*id);
      }
      if (ev.finish != FinishReason::kNone) {
        requests_ok_->Increment();
        return grpc::Status::OK;
      }
    }
  }
}

}  // namespace kvcast::decode
