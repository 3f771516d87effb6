// Relay: a MoQT node that forwards tracks from publishers to any number of
// subscribers and caches their objects.
//
// - Publishers announce namespaces (PUBLISH_NAMESPACE); a SUBSCRIBE or FETCH
//   for a track goes upstream to the publisher whose namespace is the
//   longest tuple-wise prefix of the track's namespace.
// - One upstream subscription per track, fanned out to every downstream
//   subscriber; SUBSCRIBE_OK is sent downstream only once the upstream
//   subscription is accepted. A range subscription (AbsoluteRange) the
//   cache cannot answer shares the upstream subscription of the same range,
//   or of the whole track from its start, and otherwise gets its own: two
//   decode workers landing different groups of one track at once each get
//   theirs. Objects from any of a track's upstream subscriptions reach all
//   of its subscribers (each session applies its own filter).
// - Every object passing through is cached in a TrackCache (byte budget, LRU
//   by group). Later SUBSCRIBEs of an ended track and FETCHes of ranges the
//   cache covers are served without going upstream. A cached object never
//   changes: a conflicting duplicate marks the track malformed and ends its
//   subscriptions with PUBLISH_DONE "malformed track".
// - Pacing: a downstream request that cannot take objects as fast as they
//   come (its send queue holds send_window_bytes) gets them from the cache
//   as it drains, so a slow subscriber costs the relay a window, not its
//   backlog, and does not hold back the track's other subscribers. One
//   that falls so far behind that the cache evicted what it still needs
//   ends with PUBLISH_DONE TOO_FAR_BEHIND instead of missing objects.
// - Local origin: the owner can publish tracks itself (PublishObject /
//   EndTrack); they are served exactly like cached upstream tracks. A
//   publisher application is a Relay whose tracks are all local.
//
// Thread safety: none; the relay and all its sessions share one loop thread.
#ifndef KVCAST_TRANSPORT_MOQT_RELAY_H_
#define KVCAST_TRANSPORT_MOQT_RELAY_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "absl/time/time.h"
#include "transport/moqt/session.h"
#include "transport/moqt/track_cache.h"

namespace kvcast::moqt {

struct RelayOptions {
  uint64_t cache_bytes = 1ull << 30;
  // How long a SUBSCRIBE for a namespace nobody announced waits for a
  // publisher before SUBSCRIBE_ERROR "track does not exist"; 0 = answer now.
  absl::Duration subscribe_wait = absl::ZeroDuration();
  // Bytes a downstream request's send queue may hold; past it the relay
  // keeps only the locations of the objects it owes (their payloads are in
  // the cache) and sends them as the queue drains to half.
  uint64_t send_window_bytes = 8ull << 20;
  // The cache's disk tier (borrowed; null: none): complete groups evicted
  // from memory go there and come back on a lookup (group_spill.h).
  GroupSpill* spill = nullptr;
};

class Relay : public RequestHandler {
 public:
  Relay(quic::EventLoop* loop, RelayOptions options);
  ~Relay() override;

  // ---- local origin ----
  // Adds `ns` to the namespaces this node answers for (no upstream).
  void AddLocalNamespace(const TrackNamespace& ns);
  // Publishes one object of a local track: cached and sent to current
  // subscribers. Returns the cache's verdict (kConflict: refused).
  TrackCache::InsertResult PublishObject(const FullTrackName& track,
                                         const ObjectHeader& header,
                                         absl::Span<const uint8_t> payload);
  // The local track is complete: subscribers get PUBLISH_DONE "track ended".
  void EndTrack(const FullTrackName& track);

  // ---- upstream ----
  // Announce our local namespaces to `session` (e.g. the relay we connect
  // to as a publisher). `on_reply` gets the first failure or OK.
  // `parameters` go with each PUBLISH_NAMESPACE (e.g. an AUTHORIZATION TOKEN).
  void AnnounceTo(MoqtSession* session, std::function<void(absl::Status)> on_reply,
                  Parameters parameters = {});

  struct Stats {
    uint64_t upstream_subscribes = 0;
    uint64_t upstream_fetches = 0;
    uint64_t served_from_cache = 0;  // subscribes + fetches answered from cache
    uint64_t conflicts = 0;
    uint64_t paced_waits = 0;        // times a downstream's queue was full
    uint64_t max_queued_bytes = 0;   // the most a downstream's send queue held after a send
    uint64_t fell_behind_cache = 0;  // downstreams ended: the cache lost what they needed
  };
  const Stats& stats() const { return stats_; }
  const TrackCache& cache() const { return cache_; }
  size_t num_subscribers(const FullTrackName& track) const;

  // RequestHandler
  void OnSessionClosed(MoqtSession* session, const absl::Status& reason) override;
  void OnSubscribe(MoqtSession* session, const Subscribe& request,
                   std::shared_ptr<Downstream> downstream) override;
  void OnTrackStatus(MoqtSession* session, const Subscribe& request,
                     std::shared_ptr<Downstream> downstream) override;
  void OnFetch(MoqtSession* session, const Fetch& request,
               std::shared_ptr<Downstream> downstream) override;
  std::shared_ptr<TrackConsumer> OnPublish(MoqtSession* session, const Publish& request,
                                           bool* forward) override;
  absl::Status OnPublishNamespace(MoqtSession* session, const TrackNamespace& ns) override;
  void OnPublishNamespaceDone(MoqtSession* session, const TrackNamespace& ns) override;
  absl::Status OnSubscribeNamespace(MoqtSession* session, const TrackNamespace& prefix) override;
  void OnUnsubscribeNamespace(MoqtSession* session, const TrackNamespace& prefix) override;

 private:
  struct Track;
  struct Feed;
  // Which upstream subscription a Track is: the whole track (first_group 0,
  // end_group kOpen), or a range of groups [first_group, end_group].
  struct TrackKey {
    static constexpr uint64_t kOpen = UINT64_MAX;
    FullTrackName name;
    uint64_t first_group = 0;
    uint64_t end_group = kOpen;
    bool operator<(const TrackKey& o) const {
      if (!(name == o.name)) return name < o.name;
      return first_group != o.first_group ? first_group < o.first_group : end_group < o.end_group;
    }
    bool open() const { return end_group == kOpen; }
  };
  static TrackKey OpenKey(const FullTrackName& name) { return TrackKey{name}; }
  static TrackKey KeyOf(const Subscribe& request);
  class Upstream;
  class FetchForwarder;
  struct Parked {
    Subscribe request;
    std::shared_ptr<Downstream> downstream;
    quic::EventLoop::TimerId timer = 0;
  };

  // The publisher session for `ns` (longest prefix; of equal ones, the
  // latest announced), or null.
  MoqtSession* FindPublisher(const TrackNamespace& ns) const;
  bool IsLocal(const TrackNamespace& ns) const;
  // Answers a FETCH with the cached objects of its range (FETCH_OK names
  // the last of them); false, answering nothing, when none are cached.
  bool ServeFetchFromCache(const Fetch& request, std::shared_ptr<Downstream> downstream);
  void StartSubscribe(const Subscribe& request, std::shared_ptr<Downstream> downstream);
  // Accepts the feed's request with content up to `largest` and queues the
  // cached objects an absolute filter asks for (the session applies the
  // filter's end).
  void AcceptAndReplay(const Subscribe& request, std::optional<Location> largest, Feed& f);
  // A paced sender to `d` of track `name`; forgotten when `d` is cancelled.
  std::shared_ptr<Feed> NewFeed(const FullTrackName& name, std::shared_ptr<Downstream> d);
  // Sends a live object (`cached`: the cache holds it) now, or owes it.
  // A payload with an owner goes out without a copy.
  void Offer(const std::shared_ptr<Feed>& f, const ObjectHeader& header,
             const quic::SharedBytes& payload, bool cached);
  void Sent(const Feed& f);  // updates stats_.max_queued_bytes
  // Sends what the feed owes while its queue is under the window, then
  // waits for the queue to drain; ends the request once nothing is owed and
  // its end is set.
  void Pump(const std::shared_ptr<Feed>& f);
  // Ends the feed's request with `status` once what it is owed is sent
  // (now, dropping it, if `status` is an error).
  void EndFeed(const std::shared_ptr<Feed>& f, const absl::Status& status);
  // Accepts `d` for a live or local track, replays, and adds it to the
  // track's subscribers.
  void AttachLive(const TrackKey& key, const Subscribe& request, std::shared_ptr<Downstream> d);
  void ServeFromCache(const Subscribe& request, const std::shared_ptr<Downstream>& d);
  void Deliver(const FullTrackName& name, const ObjectHeader& header,
               absl::Span<const uint8_t> payload);
  // Offers an object the cache just got for the first time (from a live
  // upstream subscription or a fetch) to the live subscribers of its track
  // that want it; `ranged_only`: only those with an absolute filter (a
  // fetched object may lie before where another filter starts). A later
  // copy is a duplicate and goes nowhere, so whichever upstream brings an
  // object first delivers it.
  void OfferNew(const FullTrackName& name, const ObjectHeader& header,
                const quic::SharedBytes& payload, bool cached, bool ranged_only);
  // The tracks (upstream subscriptions) of one name, in key order.
  std::vector<TrackKey> KeysOf(const FullTrackName& name) const;
  void EndSubscribers(const TrackKey& key, const absl::Status& status);
  void EndAllSubscribers(const FullTrackName& name, const absl::Status& status);
  void DropIfIdle(const TrackKey& key);
  // PUBLISHes `name` to a namespace subscriber; on PUBLISH_OK it becomes one
  // of the track's subscribers.
  void OfferTrack(MoqtSession* subscriber, const FullTrackName& name);

  quic::EventLoop* loop_;
  RelayOptions options_;
  TrackCache cache_;
  Stats stats_;
  std::vector<TrackNamespace> local_namespaces_;
  std::vector<std::pair<TrackNamespace, MoqtSession*>> publishers_;
  std::vector<std::pair<TrackNamespace, MoqtSession*>> namespace_subscribers_;
  std::map<TrackKey, std::unique_ptr<Track>> tracks_;
  std::vector<std::unique_ptr<Parked>> parked_;
  std::set<std::shared_ptr<Feed>> feeds_;  // every feed whose request is not done
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace kvcast::moqt

#endif  // KVCAST_TRANSPORT_MOQT_RELAY_H_
