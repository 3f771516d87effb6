#include "services/prefill/prefill_service.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "engine/transformer.h"
#include "services/common/call_wait.h"
#include "services/common/grpc_status.h"
#include "services/common/log.h"
#include "services/worker/kv_landing.h"
#include "services/worker/land_kv.h"
#include "services/common/sampling_proto.h"
#include "transport/kvcache/naming.h"

namespace kvcast::prefill {

using services::ToGrpc;

// The publisher, announcing prompts on the relay session only (direct
// sessions from decode workers just subscribe).
class PrefillService::Publisher : public kvcache::KvPublisher {
 public:
  Publisher(worker::WorkerRuntime* rt)
      : KvPublisher(&rt->engine().pool(), rt->engine().backend(), rt->engine().model().fingerprint(),
                    rt->engine().options().chunk_tokens),
        rt_(rt) {
    SetAnnounceAuthority(rt->moqt_auth());
    // A decode worker asking this port directly (no relay, or the relay
    // down) may subscribe before the prefill call begins the prompt.
    SetSubscribeWait(rt->loop(), absl::Seconds(2));
    // The next ac group is coded while this one is sent.
    CodeAcInBackground(rt->loop());
    if (const auto& basis = rt->config().kv_basis) {  // the runtime checked its shape
      if (absl::Status s = SetKvBasis(basis, RopeInverseFrequencies(rt->engine().model().config()));
          !s.ok()) {
        services::Log().warn("--kv_basis not used: {}", s.ToString().c_str());
      }
    }
    if (const auto& tuning = rt->config().ac_tuning) {
      if (absl::Status s = SetAcTuning(*tuning); !s.ok()) {  // the runtime checked the layers
        services::Log().warn("--ac_tuning not used: {}", s.ToString().c_str());
      }
    }
  }
  void OnSessionReady(moqt::MoqtSession* session) override {
    if (session == rt_->relay_session()) {
      upstream_ = session;
      SetUpstream(session, [](const std::string& digest, absl::Status s) {
        if (!s.ok()) {
          services::Log().warn("relay refused prompt {}: {}", digest.c_str(), s.ToString().c_str());
        }
      });
    }
  }
  void OnSessionClosed(moqt::MoqtSession* session, const absl::Status& reason) override {
    KvPublisher::OnSessionClosed(session, reason);
    if (session == upstream_) {
      upstream_ = nullptr;
      SetUpstream(nullptr);
    }
  }

 private:
  worker::WorkerRuntime* rt_;
  moqt::MoqtSession* upstream_ = nullptr;
};

// The progress messages of one Prefill stream. Done() may be called from
// any thread (the compute thread, as chunks complete); Tick() writes, on the
// handler thread only.
class PrefillService::Progress {
 public:
  static constexpr auto kKeepalive = std::chrono::milliseconds(250);

  Progress(worker::WorkerRuntime* rt, grpc::ServerWriter<v1::PrefillReply>* writer)
      : rt_(rt), writer_(writer), at_write_(rt->progress()) {}

  void Done(int tokens) { done_.store(tokens, std::memory_order_relaxed); }
  // Writes the progress when more tokens are done, or a keepalive when the
  // last message is kKeepalive old and the worker is not stuck: its model
  // ran a layer since (of this prompt or any other), or `busy` (KV landing).
  void Tick(bool busy) {
    const int done = done_.load(std::memory_order_relaxed);
    const auto now = std::chrono::steady_clock::now();
    const uint64_t progress = rt_->progress();
    if (done == written_ &&
        (now - last_write_ < kKeepalive || (!busy && progress == at_write_))) {
      return;
    }
    v1::PrefillReply reply;
    reply.mutable_progress()->set_done_tokens(done);
    writer_->Write(reply);
    written_ = done;
    last_write_ = now;
    at_write_ = progress;
  }

 private:
  worker::WorkerRuntime* const rt_;
  grpc::ServerWriter<v1::PrefillReply>* const writer_;
  std::atomic<int> done_{0};
  int written_ = 0;
  std::chrono::steady_clock::time_point last_write_ = std::chrono::steady_clock::now();
  uint64_t at_write_;
};

PrefillService::PrefillService(worker::WorkerRuntime* runtime, absl::Duration retain)
    : rt_(runtime), retain_(retain) {
  rt_->RunSync([this] { publisher_ = std::make_unique<Publisher>(rt_); });
  auto& m = rt_->metrics();
  requests_ok_ = m.AddCounter("kvcast_prefill_requests_total", "prefill requests",
                              {{"result", "ok"}});
  requests_failed_ = m.AddCounter("kvcast_prefill_requests_total", "prefill requests",
                                  {{"result", "error"}});
  tokens_computed_ = m.AddCounter("kvcast_prefill_tokens_total", "prompt tokens by origin",
                                  {{"origin", "computed"}});
  tokens_cached_ = m.AddCounter("kvcast_prefill_tokens_total", "prompt tokens by origin",
                                {{"origin", "cached"}});
  tokens_fetched_ = m.AddCounter("kvcast_prefill_tokens_total", "prompt tokens by origin",
                                 {{"origin", "fetched"}});
  fetch_failures_ = m.AddCounter("kvcast_kv_transfer_failures_total",
                                 "KV fetches or landings that failed (recomputed instead)");
  prefill_seconds_ = m.AddHistogram("kvcast_prefill_seconds", "prefill compute time",
                                    services::DefaultLatencyBuckets());
  m.AddCallbackGauge("kvcast_kv_published_bytes", "KV payload bytes sent by the publisher",
                     [this] {
                       uint64_t bytes = 0;
                       rt_->RunSync([&] { bytes = publisher_->stats().bytes_sent; });
                       return double(bytes);
                     });
}

PrefillService::~PrefillService() {
  rt_->RunSync([this] { publisher_.reset(); });
}

moqt::RequestHandler* PrefillService::moqt_handler() { return publisher_.get(); }

absl::StatusOr<worker::KvLanded> PrefillService::FetchPrefix(
    grpc::ServerContext* context, const v1::KvSource& source, KvPages own_pages,
    int own_chunks, Progress* progress) {
  Engine& engine = rt_->engine();
  auto compression =
      kvcache::CompressionOfTrackName(source.compression().empty() ? "fp16" : source.compression());
  absl::StatusOr<worker::KvLanded> landed = absl::UnknownError("not tried");
  if (!compression.ok()) {
    landed = compression.status();
  } else {
    worker::KvRequest request;
    request.address = source.moqt_address();
    request.track = kvcache::FullTrackNameOf(
        {kvcache::ModelId(engine.model().fingerprint()), source.prompt_digest(), *compression});
    request.auth_token = source.auth_token();
    request.chunk_tokens = engine.options().chunk_tokens;
    request.num_tokens = source.groups() * request.chunk_tokens;
    request.first_group = own_chunks;
    request.end_group = source.groups();
    request.mode = worker::KvLanding::Mode::kFetch;
    request.keep_whole_groups = true;  // a relay may hold less than the publisher did
    landed = worker::LandKv(worker::TargetOf(rt_), request,
                            [context] { return context->IsCancelled(); },
                            [progress] { progress->Tick(/*busy=*/true); });
  }
  if (!landed.ok()) return landed.status();  // own_pages are released
  own_pages.Append(std::move(landed->pages));
  landed->pages = std::move(own_pages);
  return landed;
}

grpc::Status PrefillService::Prefill(grpc::ServerContext* context,
                                     const v1::PrefillRequest* request,
                                     grpc::ServerWriter<v1::PrefillReply>* writer) {
  Progress progress(rt_, writer);
  v1::PrefillReply reply;
  grpc::Status status = Compute(context, *request, &progress, reply.mutable_result());
  if (status.ok()) writer->Write(reply);
  return status;
}

// One prompt's publication: announced at construction, each chunk handed
// to the publisher as the compute thread finishes it, ended once with the
// prefill's outcome (a prefill that fails or is cancelled drops it; one
// that never ends it explicitly, too).
class PrefillService::Publication {
 public:
  Publication(PrefillService* svc, std::string digest, std::vector<Hash128> chain, int tokens)
      : svc_(svc), digest_(std::move(digest)), chain_(std::move(chain)) {
    svc_->rt_->RunSync([&] { begin_ = svc_->publisher_->BeginPrompt(digest_, tokens); });
  }
  ~Publication() { End(absl::CancelledError("prefill abandoned")); }

  const std::string& digest() const { return digest_; }
  // OK; ALREADY_EXISTS when an identical prompt being published serves it
  // (this one then computes without publishing); anything else: failed.
  const absl::Status& begin() const { return begin_; }

  // For GenerationParams::on_prompt_chunk (compute thread): reports chunk c's
  // tokens as done (waking the handler) and publishes its pages.
  std::function<void(int, KvPages)> OnChunk(Progress* progress, services::CallWait* wait,
                                            int chunk, int n) {
    quic::EventLoop* loop = svc_->rt_->loop();
    Publisher* pub = begin_.ok() ? svc_->publisher_.get() : nullptr;
    return [loop, pub, digest = digest_, progress, wait, chunk, n](int c, KvPages pages) {
      progress->Done(std::min(n, (c + 1) * chunk));
      wait->Notify();
      if (pub == nullptr) return;
      // The publisher keeps the chunk's pages; a post that never runs drops them.
      auto held = std::make_shared<KvPages>(std::move(pages));
      loop->Post([pub, digest, c, held] {
        absl::Status st = pub->ChunkReady(digest, c, std::move(*held));
        if (!st.ok() && !absl::IsAlreadyExists(st)) {
          services::Log().warn("chunk {} of {}: {}", c, digest.c_str(), st.ToString().c_str());
        }
      });
    };
  }

  // Ends the publication (once): published prompts stay fetchable for
  // `retain`, and every scheduler replica learns of them; failed ones go.
  void End(const absl::Status& status) {
    if (ended_ || !begin_.ok()) return;
    ended_ = true;
    worker::WorkerRuntime* rt = svc_->rt_;
    rt->RunSync([&] {
      Publisher* pub = svc_->publisher_.get();
      absl::Status st = pub->EndPrompt(digest_, status);
      if (!status.ok() || !st.ok()) {
        pub->DropPrompt(digest_);
        return;
      }
      svc_->retained_.push_back(digest_);
      rt->loop()->RunAfter(svc_->retain_, [svc = svc_, digest = digest_] {
        auto& kept = svc->retained_;
        if (svc->publisher_ == nullptr) return;  // the service is going
        if (auto it = std::find(kept.begin(), kept.end(), digest); it != kept.end()) {
          kept.erase(it);
          svc->publisher_->DropPrompt(digest);
        }
      });
    });
    if (status.ok()) rt->ReportPublished(digest_, chain_);
  }

 private:
  PrefillService* const svc_;
  const std::string digest_;
  const std::vector<Hash128> chain_;  // its full chunks
  absl::Status begin_;
  bool ended_ = false;
};

namespace {

GenerationParams FirstTokenParams(const v1::PrefillRequest& request) {
  GenerationParams params;
  params.max_tokens = 1;
  params.ignore_eos = true;
  params.min_tokens = request.sampling().min_tokens();
  params.tenant = request.tenant();
  params.sampling = services::SamplingFromProto(request.sampling());
  params.logprobs = request.sampling().logprobs();
  params.top_logprobs = request.sampling().top_logprobs();
  params.prompt_logprobs = request.sampling().prompt_logprobs();
  params.response_format = services::ResponseFormatFromProto(request.sampling());
  return params;
}

double Ms(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

}  // namespace

PrefilledKv PrefillService::ReusePrefix(grpc::ServerContext* context,
                                        const v1::PrefillRequest& request,
                                        absl::Span<const int32_t> tokens, Progress* progress,
                                        int* fetched_tokens) {
  PrefilledKv kv;
  Engine& engine = rt_->engine();
  const int chunk = engine.options().chunk_tokens;
  const v1::KvSource& reuse = request.reuse();
  const int max_reuse = (int(tokens.size()) - 1) / chunk;
  if (reuse.groups() <= 0 || reuse.groups() > max_reuse) return kv;
  const std::vector<Hash128> chain = ChunkHashChain(
      engine.prefix_seed(request.tenant()), tokens.first(reuse.groups() * chunk), chunk);
  KvPages own = engine.prefix_cache().Acquire(chain, reuse.groups());
  const int own_chunks = own.size() / (chunk / engine.pool().layout().page_tokens);
  if (own_chunks >= reuse.groups()) return kv;  // all held: the engine finds them itself
  auto fetched = FetchPrefix(context, reuse, std::move(own), own_chunks, progress);
  if (!fetched.ok()) {
    fetch_failures_->Increment();
    services::Log().warn("{}: fetching {} groups of {} failed ({}); computing",
                         request.request_id(), reuse.groups(), reuse.prompt_digest().c_str(),
                         fetched.status().ToString().c_str());
    return kv;
  }
  if (!fetched->shortfall.ok()) {
    services::Log().warn("{}: fetched {} of {} groups of {} ({}); computing the rest",
                         request.request_id(), own_chunks + fetched->tokens / chunk,
                         reuse.groups(), reuse.prompt_digest().c_str(),
                         fetched->shortfall.ToString().c_str());
  }
  kv.pages = std::move(fetched->pages);
  kv.tokens = own_chunks * chunk + fetched->tokens;
  *fetched_tokens = fetched->tokens;
  return kv;
}

absl::StatusOr<SequenceEvent> PrefillService::FirstToken(grpc::ServerContext* context,
                                                         std::vector<int32_t> tokens,
                                                         const GenerationParams& params,
                                                         PrefilledKv kv, Progress* progress,
                                                         services::CallWait* wait) {
  // The event is written by the compute thread before it notifies.
  struct Result {
    absl::Mutex mu;
    std::optional<SequenceEvent> event ABSL_GUARDED_BY(mu);
  };
  auto result = std::make_shared<Result>();
  auto id = rt_->Submit(std::move(tokens), params, std::move(kv),
                        [result, wait](const SequenceEvent& ev) {
                          if (ev.finish == FinishReason::kNone) return;
                          {
                            absl::MutexLock lock(&result->mu);
                            result->event = ev;
                          }
                          wait->Notify();
                        });
  if (!id.ok()) return id.status();
  bool cancelled = false;
  for (;;) {
    {
      absl::MutexLock lock(&result->mu);
      if (result->event) break;
    }
    const services::CallWait::Woke woke =
        wait->Wait(absl::Now() + absl::FromChrono(Progress::kKeepalive));
    if (woke == services::CallWait::kCancelled && !cancelled) {
      cancelled = true;
      rt_->Cancel(*id);  // its finish event follows
    }
    if (!cancelled) progress->Tick(/*busy=*/false);
  }
  absl::MutexLock lock(&result->mu);
  const SequenceEvent& ev = *result->event;
  if (ev.token >= 0) return ev;
  if (ev.finish == FinishReason::kCancelled) return absl::CancelledError("prefill cancelled");
  return absl::Status(ev.status.code(), absl::StrCat("prefill failed: ", ev.status.message()));
}

void PrefillService::MakeRoom(int pages) {
  const KvPagePool& pool = rt_->engine().pool();
  while (!retained_.empty() && pool.free_pages() < pages) {
    publisher_->DropPrompt(retained_.front());
    retained_.pop_front();
  }
}

grpc::Status PrefillService::Compute(grpc::ServerContext* context,
                                     const v1::PrefillRequest& request, Progress* progress,
                                     v1::PrefillResponse* response) {
  const auto t0 = std::chrono::steady_clock::now();
  Engine& engine = rt_->engine();
  const int chunk = engine.options().chunk_tokens;
  std::vector<int32_t> tokens(request.tokens().begin(), request.tokens().end());
  const int n = int(tokens.size());
  if (n == 0) return grpc::Status(grpc::INVALID_ARGUMENT, "prefill: empty prompt");
  if (request.sampling().prompt_logprobs() && request.reuse().groups() > 0) {
    return grpc::Status(grpc::INVALID_ARGUMENT,
                        "prefill: prompt_logprobs need the whole prompt computed, not a reused prefix");
  }
  const Hash128 seed = engine.prefix_seed(request.tenant());
  // Room for the prompt's pages, retained prompts giving way first.
  const int page_tokens = engine.options().page_tokens;
  rt_->RunSync([&] { MakeRoom((n + page_tokens - 1) / page_tokens); });
  // Announce the prompt; an identical prompt already published serves it.
  Publication publication(this, kvcache::PromptDigest(seed, tokens, chunk).ToHex(),
                          ChunkHashChain(seed, tokens, chunk), n);
  if (!publication.begin().ok() && !absl::IsAlreadyExists(publication.begin())) {
    requests_failed_->Increment();
    return ToGrpc(publication.begin());
  }
  response->set_prompt_digest(publication.digest());
  services::CallWait wait([context] { return context->IsCancelled(); });
  GenerationParams params = FirstTokenParams(request);
  params.on_prompt_chunk = publication.OnChunk(progress, &wait, chunk, n);
  // Reuse a published prefix the scheduler named, beyond what we hold.
  int fetched_tokens = 0;
  PrefilledKv kv = ReusePrefix(context, request, tokens, progress, &fetched_tokens);
  if (context->IsCancelled()) {  // kv's pages are released with it
    publication.End(absl::CancelledError("prefill cancelled"));
    return grpc::Status(grpc::CANCELLED, "prefill cancelled");
  }
  const auto t_submit = std::chrono::steady_clock::now();
  absl::StatusOr<SequenceEvent> ev =
      FirstToken(context, std::move(tokens), params, std::move(kv), progress, &wait);
  publication.End(ev.status());
  if (!ev.ok()) {
    requests_failed_->Increment();
    return ToGrpc(ev.status());
  }
  const auto t1 = std::chrono::steady_clock::now();
  const int reused = ev->cached_tokens;
  response->set_first_token(ev->token);
  if (ev->logprob) *response->mutable_first_logprob() = services::LogprobToProto(*ev->logprob);
  for (const TokenLogprob& lp : ev->prompt_logprobs) {
    *response->add_prompt_logprobs() = services::LogprobToProto(lp);
  }
  response->set_fetched_tokens(fetched_tokens);
  response->set_cached_tokens(reused - fetched_tokens);
  response->set_computed_tokens(n - reused);
  response->set_queue_ms(Ms(t_submit - t0));
  response->set_compute_ms(Ms(t1 - t_submit));
  requests_ok_->Increment();
  tokens_computed_->Increment(n - reused);
  tokens_cached_->Increment(reused - fetched_tokens);
  tokens_fetched_->Increment(fetched_tokens);
  prefill_seconds_->Observe(std::chrono::duration<double>(t1 - t_submit).count());
  return grpc::Status::OK;
}

}  // namespace kvcast::prefill
