#include "transport/moqt/relay.h"

#include <algorithm>
#include <deque>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kvcast::moqt {
namespace {

uint64_t RequestErrorFor(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kNotFound: return kErrTrackDoesNotExist;
    case absl::StatusCode::kPermissionDenied: return kErrUnauthorized;
    case absl::StatusCode::kDeadlineExceeded: return kErrTimeout;
    case absl::StatusCode::kUnimplemented: return kErrNotSupported;
    case absl::StatusCode::kOutOfRange: return kErrInvalidRange;
    default: return kErrInternal;
  }
}

constexpr Location kEndOfEverything{UINT64_MAX, UINT64_MAX};

// The last object a FETCH asks for (end object 0: the whole end group).
Location FetchEnd(const Fetch& request) {
  return request.end.object == 0 ? Location{request.end.group, UINT64_MAX}
                                 : Location{request.end.group, request.end.object - 1};
}

}  // namespace

struct Relay::Track {
  enum class State { kPending, kLive, kLocal } state = State::kPending;
  // Whether a range subscription may share this track: it is local or
  // pushed, or its upstream subscription asked for everything from 0/0.
  bool whole = true;
  MoqtSession* upstream_session = nullptr;
  uint64_t upstream_request = 0;
  std::shared_ptr<Upstream> upstream;
  std::optional<Location> upstream_largest;  // from the upstream SUBSCRIBE_OK
  // Pushed to us by the publisher's PUBLISH: objects flow only while
  // `forwarding` (asked for when the first subscriber arrives).
  bool pushed = false;
  bool forwarding = false;
  std::vector<std::pair<Subscribe, std::shared_ptr<Downstream>>> waiting;
  std::vector<std::shared_ptr<Feed>> subscribers;
};

// One downstream request the relay sends to, paced by its send queue.
struct Relay::Feed {
  std::shared_ptr<Downstream> d;
  FullTrackName name;
  // A live subscription with an absolute filter takes objects from `from`
  // on, up to group end_group; other filters take whatever comes live.
  bool ranged = false;
  Location from;
  uint64_t end_group = UINT64_MAX;
  bool Wants(const ObjectHeader& h) const {
    return !ranged || (!(Location{h.group, h.object} < from) && h.group <= end_group);
  }
  // Objects owed, in order; a normal object's payload is in the cache.
  std::deque<ObjectHeader> owed;
  std::optional<absl::Status> end;  // OnDone once nothing is owed
};

// Receives the objects of one upstream subscription.
class Relay::Upstream : public TrackConsumer {
 public:
  // `from_start`: the upstream subscription began at 0/0, so when it ends
  // normally every group it delivered is complete. A range key's
  // subscription (AbsoluteRange) ending says nothing of where the track
  // ends (its groups' end markers still complete them).
  Upstream(Relay* relay, TrackKey key, bool from_start)
      : relay_(relay), key_(std::move(key)), from_start_(from_start) {}
  void Detach() { relay_ = nullptr; }
  void OnObject(const ObjectHeader& header, absl::Span<const uint8_t> payload) override {
    if (relay_) relay_->Deliver(key_.name, header, payload);
  }
  void OnDone(const absl::Status& status) override {
    if (relay_ == nullptr) return;
    Relay* relay = relay_;
    relay_ = nullptr;
    if (status.ok() && key_.open()) {
      relay->cache_.MarkEnded(key_.name, std::nullopt);
      std::optional<Location> end = relay->cache_.EndOfTrack(key_.name);
      if (from_start_ && end) relay->cache_.MarkComplete(key_.name, 0, end->group);
    }
    relay->EndSubscribers(key_, status);
  }

 private:
  Relay* relay_;
  const TrackKey key_;
  const bool from_start_;
};

// Forwards one upstream FETCH to one downstream fetch, caching on the way;
// once accepted, paced like a subscription (a Feed).
class Relay::FetchForwarder : public TrackConsumer {
 public:
  FetchForwarder(Relay* relay, std::weak_ptr<bool> alive, Fetch request,
                 std::shared_ptr<Downstream> downstream)
      : relay_(relay), alive_(std::move(alive)), request_(std::move(request)),
        downstream_(std::move(downstream)) {}

  void OnReply(const absl::StatusOr<TrackInfo>& info) {
    if (!info.ok()) {
      Fail(info.status());
      return;
    }
    downstream_->Accept(*info);
    accepted_ = true;
    if (!alive_.expired()) feed_ = relay_->NewFeed(request_.track, downstream_);
    for (size_t i = 0; i < buffered_.size(); ++i) {
      Forward(buffered_[i].first, buffered_[i].second, cached_[i]);
    }
    buffered_.clear();
    cached_.clear();
    if (done_) End(*done_);
  }
  void OnObject(const ObjectHeader& header, absl::Span<const uint8_t> payload) override {
    bool cached = false;
    quic::SharedBytes shared{nullptr, payload};
    if (!alive_.expired()) {
      const TrackCache::InsertResult r =
          relay_->cache_.Insert(request_.track, header, payload, &shared);
      if (r == TrackCache::InsertResult::kConflict) {
        ++relay_->stats_.conflicts;
        return;  // never forward a changed payload
      }
      cached = r != TrackCache::InsertResult::kTooLarge;
      // First here: live subscribers of the same groups get it from us (their
      // own upstream's copy will be a duplicate).
      if (r != TrackCache::InsertResult::kDuplicate) {
        relay_->OfferNew(request_.track, header, shared, cached, /*ranged_only=*/true);
      }
    }
    if (accepted_) {
      Forward(header, shared, cached);
    } else {
      if (shared.owner == nullptr) {  // not the cache's: keep a copy
        shared = quic::ShareString(std::make_shared<std::string>(
            reinterpret_cast<const char*>(payload.data()), payload.size()));
      }
      buffered_.emplace_back(header, std::move(shared));
      cached_.push_back(cached);
    }
  }
  void OnDone(const absl::Status& status) override {
    if (status.ok() && !alive_.expired()) {
      // Every group wholly inside the range is now complete in the cache.
      uint64_t first = request_.start.object == 0 ? request_.start.group
                                                  : request_.start.group + 1;
      uint64_t last_plus_one = request_.end.object == 0 ? request_.end.group + 1
                                                        : request_.end.group;
      if (last_plus_one > first) {
        relay_->cache_.MarkComplete(request_.track, first, last_plus_one - 1);
      }
    }
    if (accepted_) {
      End(status);
    } else {
      done_ = status;
      if (!status.ok()) Fail(status);
    }
  }

 private:
  // The publisher refused or went away before FETCH_OK: what the cache
  // holds of the range (a prefix a fetcher can use), else the error.
  void Fail(const absl::Status& status) {
    if (failed_) return;
    failed_ = true;
    if (!alive_.expired() && relay_->ServeFetchFromCache(request_, downstream_)) {
      ++relay_->stats_.served_from_cache;
      return;
    }
    downstream_->Reject(RequestErrorFor(status), std::string(status.message()));
  }
  void Forward(const ObjectHeader& header, const quic::SharedBytes& payload, bool cached) {
    if (feed_ != nullptr && !alive_.expired()) {
      relay_->Offer(feed_, header, payload, cached);
    } else {
      downstream_->OnSharedObject(header, payload);
    }
  }
  void End(const absl::Status& status) {
    if (feed_ != nullptr && !alive_.expired()) {
      relay_->EndFeed(feed_, status);
    } else {
      downstream_->OnDone(status);
    }
  }

  Relay* relay_;
  std::weak_ptr<bool> alive_;
  const Fetch request_;
  std::shared_ptr<Downstream> downstream_;
  std::shared_ptr<Feed> feed_;  // once accepted
  bool accepted_ = false;
  bool failed_ = false;  // answered from the cache or rejected
  std::optional<absl::Status> done_;
  std::vector<std::pair<ObjectHeader, quic::SharedBytes>> buffered_;  // before FETCH_OK
  std::vector<bool> cached_;  // of each buffered object
};

Relay::Relay(quic::EventLoop* loop, RelayOptions options)
    : loop_(loop), options_(options), cache_(options.cache_bytes) {
  cache_.SetSpill(options.spill);
}

Relay::~Relay() {
  for (auto& p : parked_) {
    if (p->timer) loop_->Cancel(p->timer);
  }
  for (auto& [name, track] : tracks_) {
    if (track->upstream) track->upstream->Detach();
  }
}

Relay::TrackKey Relay::KeyOf(const Subscribe& request) {
  if (request.filter_type != FilterType::kAbsoluteRange || !request.end_group) {
    return OpenKey(request.track);
  }
  return TrackKey{request.track, request.start.value_or(Location{}).group, *request.end_group};
}

std::vector<Relay::TrackKey> Relay::KeysOf(const FullTrackName& name) const {
  std::vector<TrackKey> keys;
  for (auto it = tracks_.lower_bound(TrackKey{name, 0, 0});
       it != tracks_.end() && it->first.name == name; ++it) {
    keys.push_back(it->first);
  }
  return keys;
}

size_t Relay::num_subscribers(const FullTrackName& name) const {
  size_t n = 0;
  for (const TrackKey& key : KeysOf(name)) n += tracks_.at(key)->subscribers.size();
  return n;
}

bool Relay::IsLocal(const TrackNamespace& ns) const {
  for (const auto& local : local_namespaces_) {
    if (IsNamespacePrefix(local, ns)) return true;
  }
  return false;
}

MoqtSession* Relay::FindPublisher(const TrackNamespace& ns) const {
  MoqtSession* best = nullptr;
  size_t best_len = 0;
  for (const auto& [prefix, session] : publishers_) {
    // Of equally long prefixes the latest announced: a prompt published
    // again (a retry elsewhere) is served by its newest publisher.
    if (IsNamespacePrefix(prefix, ns) && (best == nullptr || prefix.size() >= best_len)) {
      best = session;
      best_len = prefix.size();
    }
  }
  return best;
}

// ---- local origin ------------------------------------------------------------

void Relay::AddLocalNamespace(const TrackNamespace& ns) { local_namespaces_.push_back(ns); }

TrackCache::InsertResult Relay::PublishObject(const FullTrackName& name,
                                              const ObjectHeader& header,
                                              absl::Span<const uint8_t> payload) {
  auto& track = tracks_[OpenKey(name)];
  if (!track) {
    track = std::make_unique<Track>();
    track->state = Track::State::kLocal;
  }
  quic::SharedBytes shared{nullptr, payload};
  TrackCache::InsertResult result = cache_.Insert(name, header, payload, &shared);
  if (result == TrackCache::InsertResult::kConflict) {
    ++stats_.conflicts;
    return result;
  }
  if (result == TrackCache::InsertResult::kDuplicate) return result;
  auto subscribers = track->subscribers;  // a callback may change the list
  const bool cached = result != TrackCache::InsertResult::kTooLarge;
  for (auto& f : subscribers) Offer(f, header, shared, cached);
  return result;
}

void Relay::EndTrack(const FullTrackName& name) {
  cache_.MarkEnded(name, std::nullopt);
  EndAllSubscribers(name, absl::OkStatus());
}

void Relay::AnnounceTo(MoqtSession* session, std::function<void(absl::Status)> on_reply,
                       Parameters parameters) {
  auto remaining = std::make_shared<size_t>(local_namespaces_.size());
  auto failed = std::make_shared<bool>(false);
  if (*remaining == 0) {
    if (on_reply) on_reply(absl::OkStatus());
    return;
  }
  for (const auto& ns : local_namespaces_) {
    absl::Status s = session->PublishNamespace(ns, [=](absl::Status st) {
      if (*failed) return;
      if (!st.ok()) {
        *failed = true;
        if (on_reply) on_reply(st);
      } else if (--*remaining == 0 && on_reply) {
        on_reply(absl::OkStatus());
      }
    }, parameters);
    if (!s.ok()) {
      *failed = true;
      if (on_reply) on_reply(s);
      return;
    }
  }
}

// ---- subscriptions -------------------------------------------------------------

void Relay::Deliver(const FullTrackName& name, const ObjectHeader& header,
                    absl::Span<const uint8_t> payload) {
  quic::SharedBytes shared{nullptr, payload};
  TrackCache::InsertResult result = cache_.Insert(name, header, payload, &shared);
  if (result == TrackCache::InsertResult::kDuplicate) return;
  if (result == TrackCache::InsertResult::kConflict) {
    ++stats_.conflicts;
    EndAllSubscribers(name, absl::DataLossError(
                                absl::StrCat("object ", header.group, "/", header.object,
                                             " arrived again with a different payload")));
    return;
  }
  OfferNew(name, header, shared, result != TrackCache::InsertResult::kTooLarge,
           /*ranged_only=*/false);
}

void Relay::OfferNew(const FullTrackName& name, const ObjectHeader& header,
                     const quic::SharedBytes& payload, bool cached, bool ranged_only) {
  std::vector<std::shared_ptr<Feed>> subscribers;  // a callback may change the lists
  for (const TrackKey& key : KeysOf(name)) {
    for (const auto& f : tracks_.at(key)->subscribers) {
      if ((f->ranged || !ranged_only) && f->Wants(header)) subscribers.push_back(f);
    }
  }
  for (auto& f : subscribers) Offer(f, header, payload, cached);
}

std::shared_ptr<Relay::Feed> Relay::NewFeed(const FullTrackName& name,
                                            std::shared_ptr<Downstream> d) {
  auto f = std::make_shared<Feed>();
  f->d = std::move(d);
  f->name = name;
  feeds_.insert(f);
  std::weak_ptr<bool> alive = alive_;
  std::weak_ptr<Feed> weak = f;
  f->d->SetCancelCallback([this, alive, weak] {
    auto feed = weak.lock();
    if (alive.expired() || feed == nullptr) return;
    feeds_.erase(feed);
    for (const TrackKey& key : KeysOf(feed->name)) DropIfIdle(key);
  });
  return f;
}

void Relay::Offer(const std::shared_ptr<Feed>& f, const ObjectHeader& header,
                  const quic::SharedBytes& payload, bool cached) {
  if (f->d->cancelled()) return;
  if (f->owed.empty() && f->d->queued_bytes() < options_.send_window_bytes) {
    f->d->OnSharedObject(header, payload);
    Sent(*f);
    return;
  }
  if (!cached && header.status == ObjectStatus::kNormal) {
    ++stats_.fell_behind_cache;
    EndFeed(f, absl::ResourceExhaustedError(absl::StrCat(
                   "object ", header.group, "/", header.object,
                   " is larger than the relay's cache and the subscriber was behind")));
    return;
  }
  f->owed.push_back(header);
  Pump(f);
}

void Relay::Sent(const Feed& f) {
  stats_.max_queued_bytes = std::max<uint64_t>(stats_.max_queued_bytes, f.d->queued_bytes());
}

void Relay::Pump(const std::shared_ptr<Feed>& f) {
  Downstream& d = *f->d;
  while (!f->owed.empty() && !d.cancelled()) {
    if (d.queued_bytes() >= options_.send_window_bytes) {
      ++stats_.paced_waits;
      std::weak_ptr<bool> alive = alive_;
      std::weak_ptr<Feed> weak = f;
      d.WhenQueuedBelow(options_.send_window_bytes / 2, [this, alive, weak] {
        auto feed = weak.lock();
        if (!alive.expired() && feed != nullptr) Pump(feed);
      });
      return;
    }
    const ObjectHeader h = f->owed.front();
    f->owed.pop_front();
    if (h.status != ObjectStatus::kNormal) {
      d.OnObject(h, {});
      continue;
    }
    bool found = false;
    const Location at{h.group, h.object};
    cache_.ForEach(f->name, at, at, [&](const ObjectHeader& c, const quic::SharedBytes& p) {
      found = true;
      d.OnSharedObject(c, p);
    });
    Sent(*f);
    if (!found) {
      ++stats_.fell_behind_cache;
      f->owed.clear();
      f->end = absl::ResourceExhaustedError(absl::StrCat(
          "the subscriber fell behind past the relay's cache (object ", h.group, "/", h.object,
          " was evicted before it could be sent)"));
    }
  }
  if (!f->owed.empty() || !f->end) return;
  const absl::Status end = *f->end;
  f->end.reset();
  feeds_.erase(f);
  if (!d.cancelled()) d.OnDone(end);
}

void Relay::EndFeed(const std::shared_ptr<Feed>& f, const absl::Status& status) {
  if (!status.ok()) f->owed.clear();
  f->end = status;
  Pump(f);
}

void Relay::EndAllSubscribers(const FullTrackName& name, const absl::Status& status) {
  for (const TrackKey& key : KeysOf(name)) EndSubscribers(key, status);
}

void Relay::EndSubscribers(const TrackKey& key, const absl::Status& status) {
  auto it = tracks_.find(key);
  if (it == tracks_.end()) return;
  std::unique_ptr<Track> track = std::move(it->second);
  tracks_.erase(it);
  if (track->upstream) {
    track->upstream->Detach();
    if (!status.ok() && track->upstream_session && !track->upstream_session->closed() &&
        track->state == Track::State::kLive) {
      track->upstream_session->Unsubscribe(track->upstream_request);
    }
  }
  for (auto& [req, d] : track->waiting) {
    d->Reject(RequestErrorFor(status), std::string(status.message()));
  }
  for (auto& f : track->subscribers) EndFeed(f, status);
}

void Relay::DropIfIdle(const TrackKey& key) {
  auto it = tracks_.find(key);
  if (it == tracks_.end()) return;
  Track& track = *it->second;
  track.subscribers.erase(
      std::remove_if(track.subscribers.begin(), track.subscribers.end(),
                     [](const std::shared_ptr<Feed>& f) { return f->d->cancelled(); }),
      track.subscribers.end());
  if (track.state != Track::State::kLive || !track.subscribers.empty()) return;
  if (track.pushed) {
    // The publisher pushes; pause it rather than ending its PUBLISH.
    track.forwarding = false;
    if (track.upstream_session) track.upstream_session->SetForward(track.upstream_request, false);
    return;
  }
  std::unique_ptr<Track> gone = std::move(it->second);
  tracks_.erase(it);
  gone->upstream->Detach();
  if (gone->upstream_session && !gone->upstream_session->closed()) {
    gone->upstream_session->Unsubscribe(gone->upstream_request);
  }
}

void Relay::AcceptAndReplay(const Subscribe& request, std::optional<Location> largest,
                            Feed& f) {
  f.d->Accept(TrackInfo{largest, GroupOrder::kAscending, false});
  if (largest && (request.filter_type == FilterType::kAbsoluteStart ||
                  request.filter_type == FilterType::kAbsoluteRange)) {
    cache_.ForEach(f.name, request.start.value_or(Location{}), *largest,
                   [&](const ObjectHeader& h, const quic::SharedBytes&) { f.owed.push_back(h); });
  }
}

void Relay::AttachLive(const TrackKey& key, const Subscribe& request,
                       std::shared_ptr<Downstream> d) {
  Track& track = *tracks_.at(key);
  const FullTrackName& name = key.name;
  std::optional<Location> largest = cache_.Largest(name);
  if (track.upstream_largest && (!largest || *largest < *track.upstream_largest)) {
    largest = track.upstream_largest;
  }
  std::shared_ptr<Feed> f = NewFeed(name, std::move(d));
  if (request.filter_type == FilterType::kAbsoluteStart ||
      request.filter_type == FilterType::kAbsoluteRange) {
    f->ranged = true;
    f->from = request.start.value_or(Location{});
    if (request.filter_type == FilterType::kAbsoluteRange) {
      f->end_group = request.end_group.value_or(UINT64_MAX);
    }
  }
  AcceptAndReplay(request, largest, *f);
  track.subscribers.push_back(f);
  if (track.pushed && !track.forwarding && track.upstream_session) {
    track.forwarding = true;
    track.upstream_session->SetForward(track.upstream_request, true);
  }
  Pump(f);
}

void Relay::ServeFromCache(const Subscribe& request, const std::shared_ptr<Downstream>& d) {
  ++stats_.served_from_cache;
  std::shared_ptr<Feed> f = NewFeed(request.track, d);
  AcceptAndReplay(request, cache_.Largest(request.track), *f);
  EndFeed(f, absl::OkStatus());
}

void Relay::OnSubscribe(MoqtSession* session, const Subscribe& request,
                        std::shared_ptr<Downstream> downstream) {
  StartSubscribe(request, std::move(downstream));
}

void Relay::StartSubscribe(const Subscribe& request, std::shared_ptr<Downstream> d) {
  const FullTrackName& name = request.track;
  TrackKey key = KeyOf(request);
  auto it = tracks_.find(key);
  if (it == tracks_.end() && !key.open()) {
    // The whole track's subscription serves a range too, if it has
    // everything from the start.
    auto whole = tracks_.find(OpenKey(name));
    if (whole != tracks_.end() && whole->second->whole) it = whole;
  }
  if (it != tracks_.end()) {
    if (it->second->state == Track::State::kPending) {
      it->second->waiting.emplace_back(request, d);
    } else {
      AttachLive(it->first, request, d);
    }
    return;
  }
  if (cache_.malformed(name)) {
    d->Reject(kErrInternal, "track is malformed (a cached object changed)");
    return;
  }
  // A range whose every group the cache holds whole needs no publisher.
  if (request.filter_type == FilterType::kAbsoluteRange && request.end_group &&
      cache_.Covers(name, request.start.value_or(Location{}),
                    Location{*request.end_group, UINT64_MAX})) {
    ServeFromCache(request, d);
    return;
  }
  if (cache_.EndOfTrack(name)) {
    Location start = request.start.value_or(Location{});
    if (cache_.Covers(name, start, kEndOfEverything) || FindPublisher(name.ns) == nullptr) {
      ServeFromCache(request, d);
      return;
    }
  }
  if (IsLocal(name.ns)) {
    auto& track = tracks_[OpenKey(name)];
    track = std::make_unique<Track>();
    track->state = Track::State::kLocal;
    AttachLive(OpenKey(name), request, d);
    return;
  }
  MoqtSession* publisher = FindPublisher(name.ns);
  if (publisher == nullptr) {
    if (options_.subscribe_wait > absl::ZeroDuration()) {
      auto parked = std::make_unique<Parked>();
      Parked* raw = parked.get();
      parked->request = request;
      parked->downstream = d;
      parked->timer = loop_->RunAfter(options_.subscribe_wait, [this, raw] {
        for (auto p = parked_.begin(); p != parked_.end(); ++p) {
          if (p->get() != raw) continue;
          std::unique_ptr<Parked> mine = std::move(*p);
          parked_.erase(p);
          mine->downstream->Reject(kErrTrackDoesNotExist,
                                   "no publisher announced the namespace in time");
          return;
        }
      });
      parked_.push_back(std::move(parked));
      return;
    }
    d->Reject(kErrTrackDoesNotExist,
              absl::StrCat("no publisher for ", ToString(name)));
    return;
  }
  auto track = std::make_unique<Track>();
  Track* raw = track.get();
  raw->state = Track::State::kPending;
  raw->upstream_session = publisher;
  bool from_start = (request.filter_type == FilterType::kAbsoluteStart ||
                     request.filter_type == FilterType::kAbsoluteRange) &&
                    request.start.value_or(Location{}) == Location{0, 0};
  raw->whole = from_start && key.open();
  raw->upstream = std::make_shared<Upstream>(this, key, from_start);
  raw->waiting.emplace_back(request, d);
  tracks_[key] = std::move(track);
  ++stats_.upstream_subscribes;
  Subscribe upstream_request = request;
  upstream_request.forward = true;
  std::weak_ptr<bool> alive = alive_;
  absl::StatusOr<uint64_t> id = publisher->Subscribe(
      upstream_request, raw->upstream,
      [this, alive, key](absl::StatusOr<TrackInfo> info) {
        if (alive.expired()) return;
        auto it = tracks_.find(key);
        if (it == tracks_.end() || it->second->state != Track::State::kPending) return;
        if (!info.ok()) {
          EndSubscribers(key, info.status());
          return;
        }
        Track& t = *it->second;
        t.state = Track::State::kLive;
        t.upstream_largest = info->largest;
        auto waiting = std::move(t.waiting);
        t.waiting.clear();
        for (auto& [req, down] : waiting) AttachLive(key, req, down);
      });
  if (!id.ok()) {
    EndSubscribers(key, id.status());
    return;
  }
  auto again = tracks_.find(key);
  if (again != tracks_.end() && again->second.get() == raw) raw->upstream_request = *id;
}

void Relay::OnTrackStatus(MoqtSession* session, const Subscribe& request,
                          std::shared_ptr<Downstream> downstream) {
  const FullTrackName& name = request.track;
  if (!KeysOf(name).empty() || cache_.Has(name)) {
    downstream->Accept(TrackInfo{cache_.Largest(name), GroupOrder::kAscending, false});
    return;
  }
  MoqtSession* publisher = FindPublisher(name.ns);
  if (publisher == nullptr) {
    downstream->Reject(kErrTrackDoesNotExist, absl::StrCat("no publisher for ", ToString(name)));
    return;
  }
  absl::StatusOr<uint64_t> id =
      publisher->TrackStatus(request, [downstream](absl::StatusOr<TrackInfo> info) {
        if (info.ok()) {
          downstream->Accept(*info);
        } else {
          downstream->Reject(RequestErrorFor(info.status()), std::string(info.status().message()));
        }
      });
  if (!id.ok()) downstream->Reject(kErrInternal, std::string(id.status().message()));
}

// ---- fetch ---------------------------------------------------------------------

bool Relay::ServeFetchFromCache(const Fetch& request, std::shared_ptr<Downstream> d) {
  const FullTrackName& name = request.track;
  // FETCH_OK names the last object, so find it before sending any.
  std::optional<Location> last;
  cache_.ForEach(name, request.start, FetchEnd(request),
                 [&](const ObjectHeader& h, const quic::SharedBytes&) {
                   last = Location{h.group, h.object};
                 });
  if (!last) return false;
  std::optional<Location> eot = cache_.EndOfTrack(name);
  d->Accept(TrackInfo{last, GroupOrder::kAscending, eot && *eot <= *last});
  std::shared_ptr<Feed> f = NewFeed(name, d);
  cache_.ForEach(name, request.start, *last,
                 [&](const ObjectHeader& h, const quic::SharedBytes&) { f->owed.push_back(h); });
  EndFeed(f, absl::OkStatus());
  return true;
}

void Relay::OnFetch(MoqtSession* session, const Fetch& request,
                    std::shared_ptr<Downstream> d) {
  const FullTrackName& name = request.track;
  bool local = IsLocal(name.ns);
  MoqtSession* publisher = local ? nullptr : FindPublisher(name.ns);
  bool covered = cache_.Has(name) && cache_.Covers(name, request.start, FetchEnd(request));
  if (local || covered || (publisher == nullptr && cache_.Has(name))) {
    if (!ServeFetchFromCache(request, d)) {
      d->Reject(kErrNoObjects, "no objects in the requested range");
    } else if (!local) {
      ++stats_.served_from_cache;
    }
    return;
  }
  if (publisher == nullptr) {
    d->Reject(kErrTrackDoesNotExist, absl::StrCat("no publisher for ", ToString(name)));
    return;
  }
  ++stats_.upstream_fetches;
  auto forwarder = std::make_shared<FetchForwarder>(this, alive_, request, d);
  absl::StatusOr<uint64_t> id = publisher->Fetch(
      request, forwarder,
      [forwarder](absl::StatusOr<TrackInfo> info) { forwarder->OnReply(info); });
  if (!id.ok()) d->Reject(kErrInternal, std::string(id.status().message()));
}

// ---- namespaces and sessions ----------------------------------------------------

std::shared_ptr<TrackConsumer> Relay::OnPublish(MoqtSession* session, const Publish& request,
                                                bool* forward) {
  if (!KeysOf(request.track).empty() || IsLocal(request.track.ns)) {
    return nullptr;  // one source per track
  }
  auto track = std::make_unique<Track>();
  track->state = Track::State::kLive;
  track->pushed = true;
  track->upstream_session = session;
  track->upstream_request = request.request_id;
  track->upstream_largest = request.largest;
  track->upstream = std::make_shared<Upstream>(this, OpenKey(request.track), /*from_start=*/false);
  std::shared_ptr<TrackConsumer> consumer = track->upstream;
  tracks_[OpenKey(request.track)] = std::move(track);
  *forward = false;  // until someone subscribes
  std::weak_ptr<bool> alive = alive_;
  FullTrackName name = request.track;
  loop_->Post([this, alive, name, session] {  // after our PUBLISH_OK is out
    if (alive.expired()) return;
    for (const auto& [prefix, sub] : namespace_subscribers_) {
      if (sub != session && IsNamespacePrefix(prefix, name.ns)) OfferTrack(sub, name);
    }
  });
  return consumer;
}

void Relay::OfferTrack(MoqtSession* subscriber, const FullTrackName& name) {
  std::weak_ptr<bool> alive = alive_;
  (void)subscriber->Publish(
      name, cache_.Largest(name),
      [this, alive, name](absl::StatusOr<std::shared_ptr<Downstream>> d) {
        if (alive.expired() || !d.ok()) return;
        auto it = tracks_.find(OpenKey(name));
        if (it == tracks_.end() || it->second->state == Track::State::kPending) {
          (*d)->OnDone(absl::OkStatus());
          return;
        }
        Subscribe live;
        live.track = name;
        live.filter_type = FilterType::kLargestObject;
        AttachLive(it->first, live, *d);
      });
}

absl::Status Relay::OnPublishNamespace(MoqtSession* session, const TrackNamespace& ns) {
  for (const auto& [prefix, s] : publishers_) {
    if (s == session && prefix == ns) {
      return absl::AlreadyExistsError("namespace already published on this session");
    }
  }
  publishers_.emplace_back(ns, session);
  std::weak_ptr<bool> alive = alive_;
  // Tell namespace subscribers and wake parked SUBSCRIBEs after our OK is out.
  loop_->Post([this, alive, ns, session] {
    if (alive.expired()) return;
    for (const auto& [prefix, sub] : namespace_subscribers_) {
      if (sub != session && IsNamespacePrefix(prefix, ns)) {
        (void)sub->PublishNamespace(ns, nullptr);
      }
    }
    std::vector<std::unique_ptr<Parked>> ready;
    for (auto p = parked_.begin(); p != parked_.end();) {
      if (IsNamespacePrefix(ns, (*p)->request.track.ns)) {
        ready.push_back(std::move(*p));
        p = parked_.erase(p);
      } else {
        ++p;
      }
    }
    for (auto& p : ready) {
      loop_->Cancel(p->timer);
      if (!p->downstream->cancelled()) StartSubscribe(p->request, p->downstream);
    }
  });
  return absl::OkStatus();
}

void Relay::OnPublishNamespaceDone(MoqtSession* session, const TrackNamespace& ns) {
  publishers_.erase(std::remove_if(publishers_.begin(), publishers_.end(),
                                   [&](const auto& p) { return p.second == session && p.first == ns; }),
                    publishers_.end());
  for (const auto& [prefix, sub] : namespace_subscribers_) {
    if (sub != session && IsNamespacePrefix(prefix, ns)) sub->PublishNamespaceDone(ns);
  }
}

absl::Status Relay::OnSubscribeNamespace(MoqtSession* session, const TrackNamespace& prefix) {
  namespace_subscribers_.emplace_back(prefix, session);
  std::weak_ptr<bool> alive = alive_;
  loop_->Post([this, alive, prefix, session] {
    if (alive.expired()) return;
    bool still = false;
    for (const auto& [p, s] : namespace_subscribers_) still |= (s == session && p == prefix);
    if (!still) return;
    for (const auto& [ns, pub] : publishers_) {
      if (pub != session && IsNamespacePrefix(prefix, ns)) (void)session->PublishNamespace(ns, nullptr);
    }
    for (const auto& ns : local_namespaces_) {
      if (IsNamespacePrefix(prefix, ns)) (void)session->PublishNamespace(ns, nullptr);
    }
    std::vector<FullTrackName> pushed;
    for (const auto& [key, track] : tracks_) {
      if (track->pushed && track->upstream_session != session &&
          IsNamespacePrefix(prefix, key.name.ns)) {
        pushed.push_back(key.name);
      }
    }
    for (const auto& name : pushed) OfferTrack(session, name);
  });
  return absl::OkStatus();
}

void Relay::OnUnsubscribeNamespace(MoqtSession* session, const TrackNamespace& prefix) {
  namespace_subscribers_.erase(
      std::remove_if(namespace_subscribers_.begin(), namespace_subscribers_.end(),
                     [&](const auto& p) { return p.second == session && p.first == prefix; }),
      namespace_subscribers_.end());
}

void Relay::OnSessionClosed(MoqtSession* session, const absl::Status& reason) {
  auto gone = [session](const auto& p) { return p.second == session; };
  publishers_.erase(std::remove_if(publishers_.begin(), publishers_.end(), gone),
                    publishers_.end());
  namespace_subscribers_.erase(
      std::remove_if(namespace_subscribers_.begin(), namespace_subscribers_.end(), gone),
      namespace_subscribers_.end());
  // Tracks fed by this session already ended through their Upstream's OnDone;
  // drop any that were still pending on it.
  std::vector<TrackKey> orphans;
  for (auto& [key, track] : tracks_) {
    if (track->upstream_session == session) orphans.push_back(key);
  }
  for (const auto& key : orphans) {
    EndSubscribers(key, absl::UnavailableError(
                             absl::StrCat("publisher session closed: ", std::string(reason.message()))));
  }
}

}  // namespace kvcast::moqt
