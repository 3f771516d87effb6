// MoqtSession: one MoQT draft-14 session over one QUIC connection.
//
// The session owns the protocol state (setup, request ids and their flow
// control, subscriptions and fetches in both directions, track aliases, data
// streams) and nothing else: requests a peer makes of us go to a
// RequestHandler (the application or the relay), objects we receive go to the
// TrackConsumer given with our request.
//
// Thread safety: none. A session lives on the loop thread of its QUIC
// connection; call every method there.
//
// Errors: a protocol violation by the peer closes the session with the
// draft's termination code (CONNECTION_CLOSE carrying it) and reports the
// reason to RequestHandler::OnSessionClosed. Every pending request's callback
// and consumer is completed with an error when the session closes: nothing
// waits forever.
#ifndef KVCAST_TRANSPORT_MOQT_SESSION_H_
#define KVCAST_TRANSPORT_MOQT_SESSION_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "transport/moqt/authorization.h"
#include "transport/moqt/codec.h"
#include "transport/moqt/messages.h"
#include "transport/moqt/track_consumer.h"
#include "transport/quic/connection.h"
#include "transport/quic/event_loop.h"

namespace kvcast::moqt {

class MoqtSession;
namespace internal {
struct SessionImpl;
}

// Serves what the peer asks of this endpoint. Borrowed by the session; must
// outlive it. Default implementations refuse.
class RequestHandler {
 public:
  virtual ~RequestHandler() = default;
  virtual void OnSessionReady(MoqtSession* session) {}
  // Called once; the session is destroyed after it returns (do not delete
  // it yourself from here).
  virtual void OnSessionClosed(MoqtSession* session, const absl::Status& reason) {}
  virtual void OnGoaway(MoqtSession* session, const std::string& new_uri) {}

  // A peer SUBSCRIBE (or TRACK_STATUS when `status_only`: answer with
  // Accept/Reject and send no objects). Answer through `downstream`.
  virtual void OnSubscribe(MoqtSession* session, const Subscribe& request,
                           std::shared_ptr<Downstream> downstream) {
    downstream->Reject(kErrTrackDoesNotExist, "no publisher here");
  }
  virtual void OnTrackStatus(MoqtSession* session, const Subscribe& request,
                             std::shared_ptr<Downstream> downstream) {
    downstream->Reject(kErrTrackDoesNotExist, "no publisher here");
  }
  // A peer FETCH; joining fetches arrive resolved to standalone form
  // (track, start, end) from the joined subscription.
  virtual void OnFetch(MoqtSession* session, const Fetch& request,
                       std::shared_ptr<Downstream> downstream) {
    downstream->Reject(kErrTrackDoesNotExist, "no publisher here");
  }
  // A peer PUBLISH: it offers to push `request.track` to us. Return the
  // consumer for its objects to accept (PUBLISH_OK; set `*forward` to
  // whether objects should flow now), or nullptr to refuse (PUBLISH_ERROR).
  // Forwarding can be changed later with MoqtSession::SetForward.
  virtual std::shared_ptr<TrackConsumer> OnPublish(MoqtSession* session,
                                                   const Publish& request, bool* forward) {
    return nullptr;
  }
  // PUBLISH_NAMESPACE from the peer: OK -> PUBLISH_NAMESPACE_OK, an error ->
  // PUBLISH_NAMESPACE_ERROR with the message as reason.
  virtual absl::Status OnPublishNamespace(MoqtSession* session,
                                          const TrackNamespace& ns) {
    return absl::UnimplementedError("not accepting namespaces");
  }
  virtual void OnPublishNamespaceDone(MoqtSession* session, const TrackNamespace& ns) {}
  virtual absl::Status OnSubscribeNamespace(MoqtSession* session,
                                            const TrackNamespace& prefix) {
    return absl::UnimplementedError("not accepting namespace subscriptions");
  }
  virtual void OnUnsubscribeNamespace(MoqtSession* session,
                                      const TrackNamespace& prefix) {}
  // The peer cancelled a namespace we published (PUBLISH_NAMESPACE_CANCEL).
  virtual void OnPublishNamespaceCancel(MoqtSession* session, const TrackNamespace& ns,
                                        const absl::Status& reason) {}
};

struct SessionOptions {
  // Requests the peer may have open before we raise the limit again; we
  // grant more as requests finish.
  uint64_t max_requests = 128;
  absl::Duration setup_timeout = absl::Seconds(10);
  // After PUBLISH_DONE, how long its data streams may stay silent before
  // the subscription ends without the ones that have not finished.
  absl::Duration publish_done_linger = absl::Seconds(2);
  // Subgroup streams a subscription keeps open at once; the oldest is
  // finished when a new one is needed.
  size_t max_open_subgroups = 32;
  CodecLimits limits;
  // Sent in SETUP as the implementation-name parameter (0x07).
  std::string implementation = "kvcast";
  // Client only: PATH / AUTHORITY setup parameters (raw QUIC).
  std::string path;
  std::string authority;
  // Set: every PUBLISH_NAMESPACE, SUBSCRIBE, FETCH, TRACK_STATUS,
  // SUBSCRIBE_NAMESPACE and PUBLISH the peer sends must pass it
  // (authorization.h); refusals are answered here and never reach the
  // RequestHandler. A joining FETCH is covered by its subscription. Tokens
  // registered as aliases are refused (our MAX_AUTH_TOKEN_CACHE_SIZE is 0).
  std::shared_ptr<const Authorizer> authorizer;
};

class MoqtSession : public quic::ConnectionHandler {
 public:
  using StatusCallback = std::function<void(absl::Status)>;
  using ReplyCallback = std::function<void(absl::StatusOr<TrackInfo>)>;

  // `conn` and `handler` are borrowed; the session must be destroyed before
  // `conn` goes away (the endpoint wrappers in endpoint.h arrange this). A
  // client session sends CLIENT_SETUP once the handshake completes.
  // `conn` may be null for a client session created before its connection
  // exists; it is then taken from the first connection callback.
  MoqtSession(quic::EventLoop* loop, quic::Connection* conn,
              RequestHandler* handler, SessionOptions options = {});
  ~MoqtSession() override;

  bool ready() const;  // SETUP exchanged and not closed
  bool closed() const;
  quic::Connection* connection() const;
  std::string peer() const;

  // ---- subscriber side ------------------------------------------------------
  // Sends SUBSCRIBE (request_id is assigned here). `consumer` receives the
  // objects until OnDone; `on_reply` gets SUBSCRIBE_OK's info or the
  // SUBSCRIBE_ERROR as a Status. If the peer's request-id limit is reached
  // the request waits (REQUESTS_BLOCKED is sent) until MAX_REQUEST_ID.
  // Returns the request id, or FAILED_PRECONDITION when closed.
  absl::StatusOr<uint64_t> Subscribe(Subscribe request,
                                     std::shared_ptr<TrackConsumer> consumer,
                                     ReplyCallback on_reply);
  // UNSUBSCRIBE; the consumer gets OnDone(CANCELLED).
  void Unsubscribe(uint64_t request_id);
  absl::StatusOr<uint64_t> Fetch(moqt::Fetch request,
                                 std::shared_ptr<TrackConsumer> consumer,
                                 ReplyCallback on_reply);
  void FetchCancel(uint64_t request_id);
  absl::StatusOr<uint64_t> TrackStatus(moqt::Subscribe request, ReplyCallback on_reply);
  // For a track the peer PUBLISHed to us: asks it to start or stop sending
  // objects (SUBSCRIBE_UPDATE with Forward).
  void SetForward(uint64_t publish_request_id, bool forward);

  // ---- publisher side -------------------------------------------------------
  // PUBLISH: offers `track` to the peer. On PUBLISH_OK `on_reply` gets the
  // Downstream to push objects into (the peer's filter applies); on
  // PUBLISH_ERROR, the error.
  using PublishCallback = std::function<void(absl::StatusOr<std::shared_ptr<Downstream>>)>;
  absl::StatusOr<uint64_t> Publish(const FullTrackName& track,
                                   std::optional<Location> largest, PublishCallback on_reply);
  // `parameters`: e.g. an AUTHORIZATION TOKEN (AuthTokenParameter).
  absl::Status PublishNamespace(const TrackNamespace& ns, StatusCallback on_reply,
                                Parameters parameters = {});
  void PublishNamespaceDone(const TrackNamespace& ns);
  absl::Status SubscribeNamespace(const TrackNamespace& prefix, StatusCallback on_reply,
                                  Parameters parameters = {});
  void UnsubscribeNamespace(const TrackNamespace& prefix);

  // ---- session --------------------------------------------------------------
  // GOAWAY: asks the peer to move to `new_uri` (server) or announces we are
  // leaving (client); existing requests continue.
  void Goaway(const std::string& new_uri);
  // Closes the session and its QUIC connection with a termination code.
  void Close(TerminationCode code, const std::string& reason);

  // Counters for tests and metrics.
  struct Stats {
    uint64_t objects_sent = 0;
    uint64_t objects_received = 0;
    uint64_t bytes_sent = 0;      // object payload bytes
    uint64_t bytes_received = 0;  // object payload bytes
    uint64_t subgroup_streams_opened = 0;
    uint64_t requests_blocked = 0;
    uint64_t requests_unauthorized = 0;  // peer requests the authorizer refused
  };
  const Stats& stats() const;

  // For the owner (endpoint wrappers): called once after the session closed
  // and RequestHandler::OnSessionClosed returned. The owner may destroy the
  // session from a posted task, not from inside this callback.
  void SetClosedCallback(std::function<void()> cb);

  // quic::ConnectionHandler
  void OnHandshakeDone(quic::Connection* conn) override;
  void OnStreamData(quic::Connection* conn, int64_t stream_id,
                    absl::Span<const uint8_t> data, bool fin) override;
  void OnStreamReset(quic::Connection* conn, int64_t stream_id,
                     uint64_t app_error) override;
  void OnDatagram(quic::Connection* conn, absl::Span<const uint8_t> data) override;
  void OnStreamDrained(quic::Connection* conn, int64_t stream_id) override;
  void OnClosed(quic::Connection* conn, const absl::Status& reason) override;

 private:
  std::unique_ptr<internal::SessionImpl> impl_;
};

}  // namespace kvcast::moqt

#endif  // KVCAST_TRANSPORT_MOQT_SESSION_H_
