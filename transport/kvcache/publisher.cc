// KvPublisher: see publisher.h.
#include "transport/kvcache/publisher.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/kv/token_codec.h"

namespace kvcast::kvcache {

using moqt::Downstream;
using moqt::Location;

namespace {
// Fixed-size tracks on host pages encode this much at a time, so that a
// batch is still in cache when QUIC packs it into packets.
constexpr size_t kHostEncodeBytes = size_t{256} << 10;
// Encoded batches kept for reuse (more in flight are freed once acknowledged).
constexpr size_t kPooledBatchBytes = size_t{32} << 20;

// A group's encode failed: what its subscribers are told.
absl::Status GroupError(int group, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat("KV group ", group, ": ", s.message()));
}
}  // namespace

KvPublisher::KvPublisher(KvPagePool* pool, Backend* backend, const Hash128& model_fingerprint,
                         int chunk_tokens)
    : pool_(pool),
      backend_(backend),
      ac_(pool->layout()),
      model_id_(ModelId(model_fingerprint)),
      chunk_tokens_(chunk_tokens) {}

absl::Status KvPublisher::SetAcTuning(const ac::AcLayerTuning& tuning) {
  const KvLayout& l = pool_->layout();
  if (absl::Status s = ac::CheckTuningShape(tuning, l.num_layers, l.num_kv_heads, l.head_dim);
      !s.ok()) {
    return s;
  }
  for (const ac::AcPolicy* p : {&ac::AcHigh(), &ac::AcLow()}) {
    const ac::AcPolicy tuned = ac::Tuned(*p, tuning);
    tuned_[p] = std::make_unique<const ac::AcPolicy>(
        p->takes_channel_weights ? ac::WithChannelWeights(tuned, tuning) : tuned);
  }
  return absl::OkStatus();
}

absl::Status KvPublisher::SetKvBasis(std::shared_ptr<const xl::KvBasis> basis,
                                     std::vector<float> rope_inv_freq) {
  if (xl_) return absl::FailedPreconditionError("a KV basis is set once");
  auto codec =
      std::make_unique<XlPageCodec>(pool_->layout(), std::move(rope_inv_freq), std::move(basis));
  if (absl::Status s = codec->Supported(); !s.ok()) return s;
  xl_ = std::move(codec);
  if (ac_thread_) ac_thread_->SetKvBasis(xl_->basis(), xl_->rope_inv_freq());
  return absl::OkStatus();
}

const ac::AcPolicy& KvPublisher::CodingPolicy(const ac::AcPolicy* track) const {
  auto it = tuned_.find(track);
  return it == tuned_.end() ? *track : *it->second;
}

KvPublisher::~KvPublisher() {
  for (auto& [digest, prompt] : prompts_) {
    EndSubscribers(prompt, absl::CancelledError("KV publisher shut down"));
    Release(prompt);
  }
}

void KvPublisher::SetUpstream(moqt::MoqtSession* session, AnnounceCallback on_announced) {
  upstream_ = session;
  on_announced_ = std::move(on_announced);
  if (upstream_ == nullptr) return;
  for (const auto& [digest, prompt] : prompts_) Announce(digest);
}

void KvPublisher::Announce(const std::string& digest) {
  std::weak_ptr<bool> alive = alive_;
  moqt::TrackNamespace ns = NamespaceOf(model_id_, digest);
  moqt::Parameters params;
  if (announce_authority_ != nullptr) {
    params.push_back(announce_authority_->MintParameter(ns, moqt::kAuthPublishNamespace,
                                                        absl::Now() + absl::Minutes(10)));
  }
  absl::Status sent = upstream_->PublishNamespace(
      ns,
      [this, alive, digest](absl::Status answer) {
        if (!alive.expired() && on_announced_) on_announced_(digest, answer);
      },
      std::move(params));
  if (!sent.ok() && on_announced_) on_announced_(digest, sent);
}

int KvPublisher::tokens_in(const Prompt& p, int group) const {
  return std::min(chunk_tokens_, p.num_tokens - group * chunk_tokens_);
}

int KvPublisher::ReadyChunks(const Prompt& p) {
  return std::count_if(p.chunk_pages.begin(), p.chunk_pages.end(),
                       [](const KvPages& pages) { return !pages.empty(); });
}

absl::Status KvPublisher::BeginPrompt(const std::string& digest, int num_tokens) {
  moqt::FullTrackName probe{NamespaceOf(model_id_, digest), "fp16"};
  if (auto parsed = ParseTrack(probe); !parsed.ok()) return parsed.status();
  if (num_tokens <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("prompt length ", num_tokens, " <= 0"));
  }
  if (prompts_.count(digest)) {
    return absl::AlreadyExistsError(absl::StrCat("prompt ", digest, " is already published"));
  }
  Prompt& p = prompts_[digest];
  p.digest = digest;
  p.num_tokens = num_tokens;
  p.chunk_pages.resize(num_groups(p));
  if (upstream_ != nullptr) Announce(digest);
  if (auto parked = parked_.extract(digest)) {
    for (auto& [request, downstream] : parked.mapped()) OnSubscribe(nullptr, request, downstream);
  }
  return absl::OkStatus();
}

absl::Status KvPublisher::ChunkReady(const std::string& digest, int group, KvPages pages) {
  auto it = prompts_.find(digest);
  if (it == prompts_.end()) return absl::NotFoundError(absl::StrCat("unknown prompt ", digest));
  Prompt& p = it->second;
  if (group < 0 || group >= num_groups(p)) {
    return absl::OutOfRangeError(absl::StrCat("chunk ", group, " is past the prompt's ",
                                              num_groups(p), " chunks"));
  }
  if (p.ended) {
    return absl::FailedPreconditionError(absl::StrCat("prompt ", digest, " has ended"));
  }
  if (!p.chunk_pages[group].empty()) {
    return absl::AlreadyExistsError(absl::StrCat("chunk ", group, " was already handed over"));
  }
  const int page_tokens = pool_->layout().page_tokens;
  const size_t want = (tokens_in(p, group) + page_tokens - 1) / page_tokens;
  if (size_t(pages.size()) != want) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk ", group, " needs ", want, " pages, got ", pages.size()));
  }
  if (pages.pool() != pool_) {
    return absl::InvalidArgumentError(absl::StrCat("chunk ", group, ": pages of another pool"));
  }
  p.chunk_pages[group] = std::move(pages);

  auto subscribers = p.subscribers;  // a send may end a subscription
  for (const auto& s : subscribers) {
    if (!Wants(*s, p, group)) continue;
    Queue(p, *s->out, group);
    Pump(p, s->out);
  }
  return absl::OkStatus();
}

absl::Status KvPublisher::EndPrompt(const std::string& digest, const absl::Status& status) {
  auto it = prompts_.find(digest);
  if (it == prompts_.end()) return absl::NotFoundError(absl::StrCat("unknown prompt ", digest));
  Prompt& p = it->second;
  if (status.ok() && ReadyChunks(p) != num_groups(p)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "prompt ", digest, " has ", ReadyChunks(p), " of ", num_groups(p), " chunks ready"));
  }
  p.ended = true;
  p.end_status = status;
  if (!status.ok()) {
    EndSubscribers(p, status);
    return absl::OkStatus();
  }
  // Subscriptions end once what is queued for them is sent.
  p.subscribers.clear();
  auto outlets = p.outlets;
  for (const auto& o : outlets) {
    if (!o->done) o->done = absl::OkStatus();
    Pump(p, o);
  }
  return absl::OkStatus();
}

void KvPublisher::DropPrompt(const std::string& digest) {
  auto it = prompts_.find(digest);
  if (it == prompts_.end()) return;
  EndSubscribers(it->second, absl::CancelledError("prompt dropped by its publisher"));
  Release(it->second);
  ac_groups_.erase(std::remove_if(ac_groups_.begin(), ac_groups_.end(),
                                  [&](const auto& g) { return std::get<0>(g.first) == digest; }),
                   ac_groups_.end());
  prompts_.erase(it);
  if (upstream_ != nullptr) upstream_->PublishNamespaceDone(NamespaceOf(model_id_, digest));
}

void KvPublisher::Release(Prompt& p) {
  for (KvPages& pages : p.chunk_pages) pages.Reset();
}

void KvPublisher::EndSubscribers(Prompt& p, const absl::Status& status) {
  p.subscribers.clear();
  auto outlets = std::move(p.outlets);
  p.outlets.clear();
  for (auto& o : outlets) {
    o->pending.clear();
    o->downstream->OnDone(status);
  }
}

void KvPublisher::Track(Prompt& p, const std::shared_ptr<Outlet>& o) {
  p.outlets.push_back(o);
  std::weak_ptr<Outlet> weak = o;
  Prompt* prompt = &p;  // stable: std::map node; erased only with its requests ended
  o->downstream->SetCancelCallback([prompt, weak] {
    auto out = weak.lock();
    if (!out) return;
    auto& outs = prompt->outlets;
    outs.erase(std::remove(outs.begin(), outs.end(), out), outs.end());
    auto& subs = prompt->subscribers;
    subs.erase(std::remove_if(subs.begin(), subs.end(),
                              [&](const std::shared_ptr<Subscriber>& s) { return s->out == out; }),
               subs.end());
  });
}

void KvPublisher::Queue(const Prompt& p, Outlet& o, int group, uint64_t lo, uint64_t hi) {
  const uint64_t n = tokens_in(p, group);  // the end-of-group marker's id
  if (lo > n) return;
  const uint64_t piece = std::max(1, chunk_tokens_ / 4);
  const uint64_t last = std::min(hi, n);
  for (uint64_t a = lo; a <= last; a += piece) {
    if (a + piece >= last) {  // the rest, with the marker if hi reaches it
      o.pending.push_back({group, a, hi});
      return;
    }
    o.pending.push_back({group, a, a + piece - 1});
  }
}

void KvPublisher::Pump(Prompt& p, const std::shared_ptr<Outlet>& o) {
  Downstream& d = *o->downstream;
  while (!o->pending.empty() && !d.cancelled()) {
    if (d.queued_bytes() >= send_window_) {
      ++stats_.paced_waits;
      std::weak_ptr<bool> alive = alive_;
      std::weak_ptr<Outlet> weak = o;
      d.WhenQueuedBelow(send_window_ / 2, [this, alive, weak, digest = p.digest] {
        auto out = weak.lock();
        if (alive.expired() || out == nullptr) return;
        auto it = prompts_.find(digest);
        if (it != prompts_.end()) Pump(it->second, out);
      });
      return;
    }
    if (CodedInBackground(o->compression) && !AcReady(p, o)) return;
    const Outlet::Piece piece = o->pending.front();
    o->pending.pop_front();
    SendChunk(p, piece.group, o->compression, {o->downstream}, piece.lo, piece.hi);
    stats_.max_queued_bytes = std::max<uint64_t>(stats_.max_queued_bytes, d.queued_bytes());
    if (CodedInBackground(o->compression)) CodeAhead();
  }
  if (!o->pending.empty() || !o->done || d.cancelled()) return;
  const absl::Status status = *o->done;
  o->done.reset();
  p.outlets.erase(std::remove(p.outlets.begin(), p.outlets.end(), o), p.outlets.end());
  d.OnDone(status);
}

void KvPublisher::CodeAcInBackground(quic::EventLoop* loop) {
  ac_thread_ = std::make_unique<AcCodecThread>(pool_->layout(), loop);
  if (xl_) ac_thread_->SetKvBasis(xl_->basis(), xl_->rope_inv_freq());
}

std::shared_ptr<const KvPublisher::AcObjects> KvPublisher::CachedAc(const AcKey& key) const {
  for (const auto& [k, objects] : ac_groups_) {
    if (k == key) return objects;
  }
  return nullptr;
}

std::shared_ptr<const KvPublisher::AcObjects> KvPublisher::CacheAc(AcKey key,
                                                                   AcObjects objects) {
  if (ac_groups_.size() >= kAcCachedGroups) ac_groups_.pop_front();
  ac_groups_.emplace_back(std::move(key), std::make_shared<const AcObjects>(std::move(objects)));
  return ac_groups_.back().second;
}

bool KvPublisher::AcReady(Prompt& p, const std::shared_ptr<Outlet>& o) {
  const Outlet::Piece& piece = o->pending.front();
  if (piece.lo >= uint64_t(tokens_in(p, piece.group))) return true;  // the marker alone
  const AcKey key = AcKeyOf(p, piece.group, o->compression);
  if (CachedAc(key) != nullptr) return true;
  // A group the backend cannot read goes the synchronous way, whose encode
  // fails the outlet with the error.
  if (!ac_thread_->busy() && !StartAc(p, piece.group, o->compression)) return true;
  ac_waiters_.emplace_back(p.digest, o);
  return false;
}

bool KvPublisher::StartAc(const Prompt& p, int group, const KvCompression& compression) {
  const AcKey key = AcKeyOf(p, group, compression);
  const int n = tokens_in(p, group);
  std::vector<uint8_t> half = ac_thread_->TakeBuffer();
  if (absl::Status s = ac_.Gather(
          backend_, *pool_, SlotsOf(p.chunk_pages[group].ids(), pool_->layout().page_tokens, 0, n),
          &half);
      !s.ok()) {
    ac_thread_->GiveBack(std::move(half));
    return false;
  }
  auto encoded = [this, key](AcObjects objects) {
    ++stats_.encodes;
    ++stats_.encodes_ahead;
    if (prompts_.count(std::get<0>(key))) CacheAc(key, std::move(objects));
    auto waiters = std::move(ac_waiters_);
    ac_waiters_.clear();
    for (auto& [digest, weak] : waiters) {
      auto it = prompts_.find(digest);
      if (auto o = weak.lock(); o != nullptr && it != prompts_.end()) Pump(it->second, o);
    }
    CodeAhead();
  };
  if (compression.xl) {
    ac_thread_->SubmitEncodeXl(*compression.xl, std::move(half), n, group * chunk_tokens_,
                               std::move(encoded));
  } else {
    ac_thread_->SubmitEncode(CodingPolicy(compression.ac), std::move(half), n,
                             /*starts_sequence=*/group == 0, std::move(encoded));
  }
  return true;
}

void KvPublisher::CodeAhead() {
  if (ac_thread_->busy()) return;
  for (auto& [digest, p] : prompts_) {
    for (const auto& o : p.outlets) {
      if (!CodedInBackground(o->compression)) continue;
      // The group being sent and the next one, no further: coding more
      // would push groups still being sent out of the cache.
      int groups = 0, last = -1;
      for (const Outlet::Piece& piece : o->pending) {
        if (piece.group != last && ++groups > 2) break;
        last = piece.group;
        if (piece.lo >= uint64_t(tokens_in(p, piece.group))) continue;
        if (CachedAc(AcKeyOf(p, piece.group, o->compression)) != nullptr) continue;
        StartAc(p, piece.group, o->compression);
        return;
      }
    }
  }
}

std::optional<Location> KvPublisher::Largest(const Prompt& p) const {
  for (int g = num_groups(p) - 1; g >= 0; --g) {
    // The end-of-group marker follows the last token.
    if (!p.chunk_pages[g].empty()) return Location{uint64_t(g), uint64_t(tokens_in(p, g))};
  }
  return std::nullopt;
}

KvPublisher::Prompt* KvPublisher::Resolve(const moqt::FullTrackName& name, Downstream& d,
                                          KvCompression* compression) {
  std::string problem;
  absl::StatusOr<KvTrack> track = ParseTrack(name);
  if (!track.ok()) {
    problem = std::string(track.status().message());
  } else if (track->model_id != model_id_) {
    problem = absl::StrCat("model ", track->model_id, " is not served here (serving ",
                           model_id_, ")");
  } else if (absl::Status shape = ac_.Supported(); track->compression.ac && !shape.ok()) {
    problem = std::string(shape.message());
  } else if (track->compression.xl && xl_ == nullptr) {
    problem = absl::StrCat("the ", TrackNameOf(track->compression),
                           " track needs a KV basis; this publisher has none");
  } else if (absl::Status heads = TokenCodec(pool_->layout(), track->compression.format,
                                             track->compression.rotated)
                                      .Supported();
             !heads.ok()) {
    problem = std::string(heads.message());
  } else if (auto it = prompts_.find(track->prompt_digest); it != prompts_.end()) {
    *compression = track->compression;
    return &it->second;
  } else {
    problem = absl::StrCat("no KV published for prompt ", track->prompt_digest);
  }
  ++stats_.rejected;
  d.Reject(moqt::kErrTrackDoesNotExist, problem);
  return nullptr;
}

bool KvPublisher::Wants(const Subscriber& s, const Prompt& p, int group) const {
  const Location first{uint64_t(group), 0}, marker{uint64_t(group), uint64_t(tokens_in(p, group))};
  return moqt::FilterAccepts(s.request, s.largest_at_subscribe, first) ||
         moqt::FilterAccepts(s.request, s.largest_at_subscribe, marker);
}

absl::StatusOr<std::shared_ptr<DeviceBuffer>> KvPublisher::FreeBatch(size_t bytes) {
  size_t pooled = 0;
  for (const auto& b : batches_) {
    if (b.use_count() == 1 && b->size() >= bytes) return b;
    pooled += b->size();
  }
  absl::StatusOr<std::unique_ptr<DeviceBuffer>> fresh = backend_->AllocateStaging(bytes);
  if (!fresh.ok()) return fresh.status();
  std::shared_ptr<DeviceBuffer> b = *std::move(fresh);
  if (pooled + bytes <= kPooledBatchBytes) batches_.push_back(b);
  return b;
}

void KvPublisher::SendChunk(const Prompt& p, int group, const KvCompression& compression,
                            const std::vector<std::shared_ptr<Downstream>>& to, uint64_t lo,
                            uint64_t hi) {
  const int n = tokens_in(p, group);
  const int page_tokens = pool_->layout().page_tokens;
  const int first = int(std::min<uint64_t>(lo, n));
  const int count = int(hi >= uint64_t(n) ? n : hi + 1) - first;
  moqt::ObjectHeader h;
  h.group = group;
  // A payload with an owner goes to every subscriber's streams uncopied.
  auto send = [&](int object, const quic::SharedBytes& payload) {
    h.object = object;
    for (const auto& d : to) d->OnSharedObject(h, payload);
    stats_.objects_sent += to.size();
    stats_.bytes_sent += to.size() * payload.bytes.size();
  };
  if (count > 0 && !compression.fixed_size()) {
    const AcKey key = AcKeyOf(p, group, compression);
    std::shared_ptr<const AcObjects> objects = CachedAc(key);
    if (objects == nullptr) {  // a group goes out in pieces: encode it once
      AcObjects fresh;
      const auto slots = SlotsOf(p.chunk_pages[group].ids(), page_tokens, 0, n);
      if (absl::Status s =
              compression.xl ? xl_->Encode(*compression.xl, backend_, *pool_, slots,
                                           group * chunk_tokens_, &fresh)
                             : ac_.Encode(CodingPolicy(compression.ac), backend_, *pool_, slots,
                                          &fresh, /*starts_sequence=*/group == 0);
          !s.ok()) {
        for (const auto& d : to) d->OnDone(GroupError(group, s));
        return;
      }
      ++stats_.encodes;
      objects = CacheAc(key, std::move(fresh));
    }
    for (int i = first; i < first + count; ++i) send(i, {objects, (*objects)[i]});
  } else if (count > 0) {
    const TokenCodec codec(pool_->layout(), compression.format, compression.rotated);
    const size_t token_bytes = codec.token_bytes();
    // Host pages: a few tokens at a time, each batch sent while it is in
    // cache; a device: the whole piece in one call (one DMA).
    const int batch = backend_->KvPagesInHostMemory()
                          ? std::clamp(int(kHostEncodeBytes / token_bytes), 1, count)
                          : count;
    ++stats_.encodes;
    for (int b = first; b < first + count; b += batch) {
      const int m = std::min(batch, first + count - b);
      absl::StatusOr<std::shared_ptr<DeviceBuffer>> buffer = FreeBatch(m * token_bytes);
      if (!buffer.ok()) {
        // Pinned memory ran out; the subscribers see the track end with it.
        for (const auto& d : to) d->OnDone(buffer.status());
        return;
      }
      auto* encoded = static_cast<uint8_t*>((*buffer)->data());
      if (absl::Status s = codec.Encode(backend_, *pool_,
                                        SlotsOf(p.chunk_pages[group].ids(), page_tokens, b, m),
                                        encoded);
          !s.ok()) {
        // The backend could not read the pages: the group fails, not a later step.
        for (const auto& d : to) d->OnDone(GroupError(group, s));
        return;
      }
      for (int i = 0; i < m; ++i) send(b + i, {*buffer, {encoded + i * token_bytes, token_bytes}});
    }
  }
  if (hi < uint64_t(n) || lo > uint64_t(n)) return;
  h.object = n;  // marks the group complete (caches) and finishes its stream
  h.status = moqt::ObjectStatus::kEndOfGroup;
  for (const auto& d : to) d->OnObject(h, {});
}

void KvPublisher::OnSubscribe(moqt::MoqtSession* session, const moqt::Subscribe& request,
                              std::shared_ptr<Downstream> downstream) {
  if (loop_ != nullptr && subscribe_wait_ > absl::ZeroDuration()) {
    absl::StatusOr<KvTrack> track = ParseTrack(request.track);
    if (track.ok() && track->model_id == model_id_ && !prompts_.count(track->prompt_digest)) {
      const std::string digest = track->prompt_digest;
      parked_[digest].emplace_back(request, downstream);
      std::weak_ptr<bool> alive = alive_;
      std::weak_ptr<Downstream> weak = downstream;
      loop_->RunAfter(subscribe_wait_, [this, alive, digest, weak] {
        auto d = weak.lock();
        if (alive.expired() || d == nullptr) return;
        auto it = parked_.find(digest);
        if (it == parked_.end()) return;
        auto& v = it->second;
        auto pos = std::find_if(v.begin(), v.end(), [&](const auto& e) { return e.second == d; });
        if (pos == v.end()) return;  // attached meanwhile
        v.erase(pos);
        if (v.empty()) parked_.erase(it);
        ++stats_.rejected;
        d->Reject(moqt::kErrTrackDoesNotExist,
                  absl::StrCat("no KV published for prompt ", digest, " within ",
                               absl::FormatDuration(subscribe_wait_)));
      });
      return;
    }
  }
  KvCompression compression;
  Prompt* found = Resolve(request.track, *downstream, &compression);
  if (found == nullptr) return;
  Prompt& p = *found;
  auto sub = std::make_shared<Subscriber>();
  sub->request = request;
  sub->largest_at_subscribe = Largest(p);
  sub->out = std::make_shared<Outlet>();
  sub->out->downstream = downstream;
  sub->out->compression = compression;
  downstream->Accept(moqt::TrackInfo{sub->largest_at_subscribe});
  for (int g = 0; g < num_groups(p); ++g) {
    if (!p.chunk_pages[g].empty() && Wants(*sub, p, g)) Queue(p, *sub->out, g);
  }
  Track(p, sub->out);
  if (p.ended) {
    sub->out->done = p.end_status;
  } else {
    p.subscribers.push_back(sub);
  }
  Pump(p, sub->out);
}

void KvPublisher::OnTrackStatus(moqt::MoqtSession* session, const moqt::Subscribe& request,
                                std::shared_ptr<Downstream> downstream) {
  KvCompression compression;
  if (Prompt* found = Resolve(request.track, *downstream, &compression)) {
    downstream->Accept(moqt::TrackInfo{Largest(*found)});
  }
}

void KvPublisher::OnFetch(moqt::MoqtSession* session, const moqt::Fetch& request,
                          std::shared_ptr<Downstream> downstream) {
  KvCompression compression;
  Prompt* found = Resolve(request.track, *downstream, &compression);
  if (found == nullptr) return;
  Prompt& p = *found;
  // Draft-14: an end object of 0 means the whole end group.
  const uint64_t first = request.start.group;
  uint64_t last = request.end.group;
  bool cut = false;  // the prompt failed: the range ends at its last chunk computed
  std::string problem;
  if (first > last) {
    problem = absl::StrCat("fetch range starts at group ", first, " after its end ", last);
  } else if (last >= uint64_t(num_groups(p))) {
    problem = absl::StrCat("group ", last, " is past the prompt's ", num_groups(p), " chunks");
  } else {
    for (uint64_t g = first; g <= last; ++g) {
      if (!p.chunk_pages[g].empty()) continue;
      if (!p.ended || p.end_status.ok()) {
        problem = absl::StrCat("chunk ", g, " is not computed yet; SUBSCRIBE to get it live");
      } else if (g == first) {
        problem = absl::StrCat("chunk ", g, " was never computed: the prompt failed (",
                               p.end_status.ToString(), ")");
      } else {  // what was computed is all there will be: serve that
        last = g - 1;
        cut = true;
      }
      break;
    }
  }
  if (!problem.empty()) {
    ++stats_.rejected;
    downstream->Reject(moqt::kErrInvalidRange, problem);
    return;
  }
  const bool whole_end = request.end.object == 0 || cut;
  const uint64_t last_object =
      whole_end ? uint64_t(tokens_in(p, last)) : std::min<uint64_t>(request.end.object - 1,
                                                                    tokens_in(p, last));
  downstream->Accept(moqt::TrackInfo{Location{last, last_object}, moqt::GroupOrder::kAscending,
                                     p.ended && (cut || last + 1 == uint64_t(num_groups(p)))});
  auto out = std::make_shared<Outlet>();
  out->downstream = downstream;
  out->compression = compression;
  for (uint64_t g = first; g <= last; ++g) {
    Queue(p, *out, g, g == first ? request.start.object : 0,
          g == last ? last_object : UINT64_MAX);
  }
  out->done = absl::OkStatus();
  Track(p, out);
  Pump(p, out);
}

void KvPublisher::OnSessionClosed(moqt::MoqtSession* session, const absl::Status& reason) {
  if (session == upstream_) upstream_ = nullptr;
}

}  // namespace kvcast::kvcache
