// Private state of MoqtSession, shared by session.cc (control messages and
// requests) and session_streams.cc (data streams). Not a public header.
#ifndef KVCAST_TRANSPORT_MOQT_INTERNAL_SESSION_IMPL_H_
#define KVCAST_TRANSPORT_MOQT_INTERNAL_SESSION_IMPL_H_

#include <deque>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "transport/moqt/session.h"

namespace kvcast::moqt::internal {

inline bool IsUniStream(int64_t id) { return (id & 0x2) != 0; }
inline bool IsServerInitiated(int64_t id) { return (id & 0x1) != 0; }

// Reset codes for data streams (draft-14 "Data Stream Reset Error Codes").
enum StreamResetCode : uint64_t {
  kResetInternalError = 0x0,
  kResetCancelled = 0x1,
  kResetDeliveryTimeout = 0x2,
  kResetSessionClosed = 0x3,
};

struct SessionImpl;

// The publishing end of a peer's SUBSCRIBE, FETCH or TRACK_STATUS.
class DownstreamImpl : public Downstream, public std::enable_shared_from_this<DownstreamImpl> {
 public:
  enum class Kind { kSubscribe, kFetch, kTrackStatus };
  DownstreamImpl(SessionImpl* session, Kind kind, uint64_t request_id,
                 FullTrackName track, Subscribe filter, uint8_t priority);

  uint64_t request_id() const override { return request_id_; }
  const FullTrackName& track() const override { return track_; }
  void Accept(const TrackInfo& info) override;
  void Reject(uint64_t error_code, const std::string& reason) override;
  bool cancelled() const override { return cancelled_; }
  void SetCancelCallback(std::function<void()> cb) override { on_cancel_ = std::move(cb); }
  size_t queued_bytes() const override;
  void WhenQueuedBelow(size_t low_water, std::function<void()> cb) override;
  // One of the session's streams drained: runs the callback if it is due.
  void OnStreamDrained();
  void OnObject(const ObjectHeader& header, absl::Span<const uint8_t> payload) override;
  void OnSharedObject(const ObjectHeader& header, const quic::SharedBytes& payload) override;
  void OnDone(const absl::Status& status) override;

  Kind kind() const { return kind_; }
  bool accepted() const { return accepted_; }
  const TrackInfo& info() const { return info_; }
  uint64_t track_alias() const { return track_alias_; }
  Subscribe& filter() { return filter_; }
  // The session is going away or the peer cancelled: drop everything.
  void Cancel(bool session_closing);
  void OnStreamStopped(int64_t stream_id);
  // Runs `fn` once this request is answered (Accept or Reject); at once if
  // it already was.
  void WhenAnswered(std::function<void()> fn);
  bool answered() const { return accepted_ || finished_; }
  void SetTrack(FullTrackName track) { track_ = std::move(track); }
  // Our PUBLISH of this track: the alias is ours from the start; PUBLISH_OK
  // makes it accepted with the peer's filter.
  void MarkOutboundPublish(uint64_t alias) {
    outbound_ = true;
    track_alias_ = alias;
  }
  void OnPublishOk(const PublishOk& ok, std::optional<Location> largest);
  bool outbound() const { return outbound_; }

 private:
  struct OpenSubgroup {
    int64_t stream = -1;
    SubgroupHeader header;
    std::optional<uint64_t> last_object;
  };
  // `payload.owner` null: the bytes are valid only during the call (copied).
  void SendSubgroupObject(const ObjectHeader& header, const quic::SharedBytes& payload);
  void SendFetchObject(const ObjectHeader& header, const quic::SharedBytes& payload);
  void FinishSubgroup(std::map<std::pair<uint64_t, uint64_t>, OpenSubgroup>::iterator it);
  void Finish();  // forget this request in the session
  void RunAnswerCallbacks();
  // A data stream of ours: counted in queued_bytes() until it is finished
  // and empty.
  void AddDataStream(int64_t stream);
  void PruneDataStreams();

  SessionImpl* session_;  // null once the session is gone
  const Kind kind_;
  const uint64_t request_id_;
  FullTrackName track_;
  Subscribe filter_;
  uint64_t track_alias_ = 0;
  bool accepted_ = false;
  bool finished_ = false;
  bool cancelled_ = false;
  bool outbound_ = false;  // our PUBLISH, not the peer's request
  TrackInfo info_;
  std::function<void()> on_cancel_;
  std::vector<std::function<void()>> on_answer_;
  std::map<std::pair<uint64_t, uint64_t>, OpenSubgroup> subgroups_;
  std::list<std::pair<uint64_t, uint64_t>> subgroup_lru_;
  uint64_t streams_opened_ = 0;
  int64_t fetch_stream_ = -1;
  std::vector<int64_t> data_streams_;
  size_t low_water_ = 0;
  std::function<void()> on_below_;  // WhenQueuedBelow's, armed
};

// Our SUBSCRIBE or FETCH and where its objects go.
struct OutRequest {
  enum class Kind { kSubscribe, kFetch, kTrackStatus } kind;
  moqt::Subscribe subscribe;  // kSubscribe / kTrackStatus
  moqt::Fetch fetch;          // kFetch
  std::shared_ptr<TrackConsumer> consumer;
  MoqtSession::ReplyCallback on_reply;
  bool replied = false;
  bool inbound_publish = false;  // the peer's PUBLISH, keyed by its request id
  std::optional<Location> publish_largest;
  uint64_t track_alias = 0;
  // PUBLISH_DONE bookkeeping: done once all announced streams ended.
  bool publish_done = false;
  absl::Status done_status;
  uint64_t expected_streams = 0;
  uint64_t ended_streams = 0;
  // When object data for it last arrived; the linger after PUBLISH_DONE
  // counts from here, so streams still delivering are waited for.
  absl::Time last_data = absl::InfinitePast();
  quic::EventLoop::TimerId linger_timer = 0;
};

// One incoming unidirectional data stream.
class InStream : public DataStreamVisitor {
 public:
  InStream(SessionImpl* session, int64_t id, const CodecLimits& limits)
      : session_(session), id_(id), parser_(this, limits) {}
  absl::Status OnIngress(absl::Span<const uint8_t> data, bool fin) {
    return parser_.OnIngress(data, fin);
  }
  absl::Status OnSubgroupHeader(const SubgroupHeader& header) override;
  absl::Status OnFetchHeader(uint64_t request_id) override;
  absl::Status OnObject(const ObjectHeader& header, absl::Span<const uint8_t> fragment,
                        bool last) override;
  absl::Status OnStreamEnd() override;
  // The SUBSCRIBE_OK naming our alias arrived: deliver what waited.
  void FlushPending();
  bool is_fetch() const { return is_fetch_; }
  uint64_t key() const { return key_; }  // alias or fetch request id
  bool counted() const { return counted_; }
  bool ended() const { return ended_; }
  bool has_pending() const { return !pending_.empty(); }

 private:
  OutRequest* Target();
  SessionImpl* session_;
  int64_t id_;
  DataStreamParser parser_;
  bool is_fetch_ = false;
  bool counted_ = false;  // counted toward its subscription's streams
  bool ended_ = false;    // FIN seen at an object boundary
  uint64_t key_ = 0;
  std::string payload_;
  std::vector<std::pair<ObjectHeader, std::string>> pending_;  // alias unknown yet
  size_t pending_bytes_ = 0;
};

struct SessionImpl : public ControlMessageVisitor {
  SessionImpl(MoqtSession* self, quic::EventLoop* loop, quic::Connection* conn,
              RequestHandler* handler, SessionOptions options);

  // ---- control (session.cc) ----
  absl::Status OnControlMessage(ControlMessage msg) override;
  // One handler per control message (session_control.cc).
  absl::Status On(ClientSetup& m);
  absl::Status On(ServerSetup& m);
  absl::Status On(Goaway& m);
  absl::Status On(MaxRequestId& m);
  absl::Status On(RequestsBlocked& m);
  absl::Status On(Subscribe& m);
  absl::Status On(TrackStatus& m);
  absl::Status On(SubscribeUpdate& m);
  absl::Status On(Unsubscribe& m);
  absl::Status On(Fetch& m);
  absl::Status On(FetchCancel& m);
  absl::Status On(SubscribeOk& m);
  absl::Status On(TrackStatusOk& m);
  absl::Status On(SubscribeError& m);
  absl::Status On(TrackStatusError& m);
  absl::Status On(FetchOk& m);
  absl::Status On(FetchError& m);
  absl::Status On(PublishDone& m);
  absl::Status On(Publish& m);
  absl::Status On(PublishOk& m);
  absl::Status On(PublishError& m);
  absl::Status On(PublishNamespace& m);
  absl::Status On(PublishNamespaceDone& m);
  absl::Status On(PublishNamespaceCancel& m);
  absl::Status On(PublishNamespaceOk& m);
  absl::Status On(PublishNamespaceError& m);
  absl::Status On(SubscribeNamespace& m);
  absl::Status On(SubscribeNamespaceOk& m);
  absl::Status On(SubscribeNamespaceError& m);
  absl::Status On(UnsubscribeNamespace& m);
  void SendControl(const ControlMessage& msg);
  // Assigns the next request id and sends (or queues) the request;
  // FAILED_PRECONDITION once the session is closed.
  absl::StatusOr<uint64_t> StartRequest(std::function<ControlMessage(uint64_t id)> make);
  OutRequest& NewOut(uint64_t id, OutRequest::Kind kind, std::shared_ptr<TrackConsumer> consumer,
                     MoqtSession::ReplyCallback on_reply);
  // PUBLISH_NAMESPACE_OK/_ERROR, SUBSCRIBE_NAMESPACE_OK/_ERROR.
  absl::Status AnswerNamespace(uint64_t request_id, absl::Status result, const char* what);
  void FlushBlocked();
  void OnSetupDone();
  absl::Status CheckNewPeerRequest(uint64_t request_id);
  void PeerRequestFinished();
  // With options.authorizer: whether the peer's request (`op` on `ns`,
  // carrying `params`) may go to the handler; if not, `refuse(code,
  // reason)` has answered it. A token the draft makes a session error
  // (undecodable, alias forms) is returned as that error.
  absl::StatusOr<bool> Authorized(AuthOp op, const TrackNamespace& ns, const Parameters& params,
                                  const std::function<void(uint64_t, std::string)>& refuse);
  void CloseWith(const absl::Status& status);  // protocol error or local close
  void FailEverything(const absl::Status& status);
  void CompleteOut(uint64_t request_id, absl::Status status);  // by value: may alias the request
  // Answers a joining FETCH from its subscription (deferred until that
  // subscription is answered).
  void ResolveJoiningFetch(const Fetch& request, std::shared_ptr<DownstreamImpl> fetch);

  // ---- data (session_streams.cc) ----
  void OnUniStreamData(int64_t stream_id, absl::Span<const uint8_t> data, bool fin);
  void OnInStreamEnded(InStream* stream);
  // Forgets a finished stream once nothing of it waits for an alias.
  void ReapEndedStream(int64_t stream_id);
  // A SUBSCRIBE_OK named `alias`: deliver objects that waited for it.
  void FlushAlias(uint64_t alias);
  void MaybeFinishSubscription(uint64_t request_id);
  // Ends the subscription once its data streams have been silent for
  // options.publish_done_linger after PUBLISH_DONE (first check in `delay`).
  void ArmPublishDoneLinger(uint64_t request_id, absl::Duration delay);
  absl::StatusOr<int64_t> OpenDataStream();
  void SendOnStream(int64_t stream, absl::Span<const uint8_t> bytes, bool fin);
  // A payload after its object header: referenced when it has an owner and
  // is large enough to be worth a chunk of its own, copied otherwise.
  void SendPayloadOnStream(int64_t stream, const quic::SharedBytes& payload, bool fin);
  void SendOnStream(int64_t stream, const std::string& bytes, bool fin) {
    SendOnStream(stream, absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()),
                                                   bytes.size()),
                 fin);
  }

  MoqtSession* self;
  quic::EventLoop* loop;
  quic::Connection* conn;
  RequestHandler* handler;
  SessionOptions options;
  MoqtSession::Stats stats;
  std::function<void()> closed_callback;

  enum class State { kConnecting, kSetupSent, kReady, kClosed } state = State::kConnecting;
  bool is_server = false;
  bool closed_reported = false;
  int64_t control_stream = -1;
  std::unique_ptr<ControlStreamParser> control_parser;
  quic::EventLoop::TimerId setup_timer = 0;

  // Request ids we send: ours step by 2; the peer allows ids < peer_max.
  uint64_t next_request_id = 0;
  uint64_t peer_max_request_id = 0;
  uint64_t blocked_reported_at = UINT64_MAX;
  std::deque<std::pair<uint64_t, ControlMessage>> blocked;  // also pre-setup
  // Request ids the peer sends: the next expected and our limit for it.
  uint64_t next_peer_request_id = 0;
  uint64_t local_max_request_id = 0;

  // Our requests.
  absl::flat_hash_map<uint64_t, OutRequest> out;  // by request id
  absl::flat_hash_map<uint64_t, uint64_t> alias_to_request;
  absl::flat_hash_map<uint64_t, std::pair<TrackNamespace, MoqtSession::StatusCallback>> out_namespace;
  // The peer's requests we serve.
  absl::flat_hash_map<uint64_t, std::shared_ptr<DownstreamImpl>> downstreams;
  absl::flat_hash_map<int64_t, DownstreamImpl*> stream_owner;  // our data streams
  // Requests (ids in `downstreams`) waiting in WhenQueuedBelow.
  std::vector<uint64_t> drain_waiters;
  // Our PUBLISH requests awaiting PUBLISH_OK (their DownstreamImpl is in
  // `downstreams` under our request id).
  absl::flat_hash_map<uint64_t, std::pair<std::optional<Location>, MoqtSession::PublishCallback>>
      pending_publish;
  uint64_t next_track_alias = 1;
  // Incoming data streams.
  absl::flat_hash_map<int64_t, std::unique_ptr<InStream>> in_streams;
  size_t pending_bytes = 0;  // objects waiting for an unknown alias
};

}  // namespace kvcast::moqt::internal

#endif  // KVCAST_TRANSPORT_MOQT_INTERNAL_SESSION_IMPL_H_
