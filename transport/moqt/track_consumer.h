// The interfaces through which objects of a track flow, on both sides of a
// MoQT session and through the relay.
//
// Thread safety: none; every call happens on the loop thread that owns the
// session.
#ifndef KVCAST_TRANSPORT_MOQT_TRACK_CONSUMER_H_
#define KVCAST_TRANSPORT_MOQT_TRACK_CONSUMER_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "transport/moqt/messages.h"
#include "transport/quic/shared_bytes.h"

namespace kvcast::moqt {

// Receives the objects of one subscription or fetch: whole objects, in the
// order they complete (several subgroup streams may interleave).
class TrackConsumer {
 public:
  virtual ~TrackConsumer() = default;
  // `payload` is valid only during the call. Status objects (end of group,
  // end of track, does not exist) arrive here too, with an empty payload.
  virtual void OnObject(const ObjectHeader& header,
                        absl::Span<const uint8_t> payload) = 0;
  // No more objects will come. OK when the publisher ended the track
  // (PUBLISH_DONE "track ended") or a fetch completed; otherwise the reason
  // (PUBLISH_DONE code, stream reset, session closed, unsubscribed).
  virtual void OnDone(const absl::Status& status) = 0;
};

// What a publisher states when it accepts a request.
struct TrackInfo {
  // Largest location published so far (SUBSCRIBE_OK) or the end of the
  // fetched range (FETCH_OK); nullopt when no content exists yet.
  std::optional<Location> largest;
  GroupOrder group_order = GroupOrder::kAscending;
  bool end_of_track = false;  // FETCH_OK only
};

// The publishing end of a request a peer made of us (its SUBSCRIBE or
// FETCH). The session creates it and hands it to the RequestHandler, which
// answers with Accept or Reject and then pushes objects through the
// TrackConsumer methods; OnDone sends PUBLISH_DONE (subscription) or ends the
// fetch stream.
class Downstream : public TrackConsumer {
 public:
  virtual uint64_t request_id() const = 0;
  virtual const FullTrackName& track() const = 0;
  // As OnObject, but the data streams reference `payload.bytes` (held by
  // `payload.owner` until QUIC is done with them) instead of copying them:
  // for large payloads that outlive the call anyway (a relay's cached
  // object) or go to several subscribers (one encoded batch).
  virtual void OnSharedObject(const ObjectHeader& header, const quic::SharedBytes& payload) = 0;
  // SUBSCRIBE_OK / FETCH_OK. Objects may be pushed only after Accept.
  virtual void Accept(const TrackInfo& info) = 0;
  // SUBSCRIBE_ERROR / FETCH_ERROR with a RequestErrorCode.
  virtual void Reject(uint64_t error_code, const std::string& reason) = 0;
  // True once the peer unsubscribed or cancelled, or the session closed;
  // further objects are dropped.
  virtual bool cancelled() const = 0;
  // Called once when cancelled() becomes true (not after OnDone).
  virtual void SetCancelCallback(std::function<void()> cb) = 0;

  // Back-pressure, for a producer that should not queue a whole backlog:
  // bytes of this request's objects still in its data streams' send queues
  // (not yet handed to QUIC, which flow control and congestion hold back).
  virtual size_t queued_bytes() const = 0;
  // Runs `cb` once, from the loop, when queued_bytes() has fallen to
  // `low_water` or below (at once if it already has). A later call replaces
  // an earlier callback; it never runs once the request is cancelled or
  // done (SetCancelCallback sees the former).
  virtual void WhenQueuedBelow(size_t low_water, std::function<void()> cb) = 0;
};

// Whether `loc` passes a subscription's filter. `largest_at_subscribe` is the
// largest location when the subscription started (nullopt: nothing yet).
bool FilterAccepts(const Subscribe& sub,
                   const std::optional<Location>& largest_at_subscribe,
                   const Location& loc);

}  // namespace kvcast::moqt

#endif  // KVCAST_TRANSPORT_MOQT_TRACK_CONSUMER_H_
