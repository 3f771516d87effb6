// MoqtSession: setup, request ids and our requests. The peer's control
// messages are handled in session_control.cc, data streams in
// session_streams.cc.
#include "transport/moqt/session.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "transport/moqt/internal/session_impl.h"

namespace kvcast::moqt {
namespace internal {

SessionImpl::SessionImpl(MoqtSession* self, quic::EventLoop* loop,
                         quic::Connection* conn, RequestHandler* handler,
                         SessionOptions options)
    : self(self), loop(loop), conn(conn), handler(handler),
      options(std::move(options)),
      control_parser(std::make_unique<ControlStreamParser>(this)) {}

void SessionImpl::SendControl(const ControlMessage& msg) {
  if (state == State::kClosed || control_stream < 0) return;
  std::string bytes;
  absl::Status s = SerializeControlMessage(msg, &bytes);
  if (!s.ok()) {
    CloseWith(ProtocolError(TerminationCode::kInternalError,
                            absl::StrCat("cannot encode ", MessageName(msg), ": ",
                                         std::string(s.message()))));
    return;
  }
  s = conn->Send(control_stream, bytes, /*fin=*/false);
  if (!s.ok()) CloseWith(s);
}

absl::StatusOr<uint64_t> SessionImpl::StartRequest(
    std::function<ControlMessage(uint64_t)> make) {
  if (state == State::kClosed) return absl::FailedPreconditionError("session closed");
  uint64_t id = next_request_id;
  next_request_id += 2;
  blocked.emplace_back(id, make(id));
  FlushBlocked();
  return id;
}

OutRequest& SessionImpl::NewOut(uint64_t id, OutRequest::Kind kind,
                                std::shared_ptr<TrackConsumer> consumer,
                                MoqtSession::ReplyCallback on_reply) {
  OutRequest& r = out[id];
  r.kind = kind;
  r.consumer = std::move(consumer);
  r.on_reply = std::move(on_reply);
  return r;
}

void SessionImpl::FlushBlocked() {
  if (state != State::kReady) return;
  while (!blocked.empty() && blocked.front().first < peer_max_request_id) {
    ControlMessage msg = std::move(blocked.front().second);
    blocked.pop_front();
    SendControl(msg);
  }
  if (!blocked.empty() && blocked_reported_at != peer_max_request_id) {
    blocked_reported_at = peer_max_request_id;
    ++stats.requests_blocked;
    SendControl(RequestsBlocked{peer_max_request_id});
  }
}

void SessionImpl::OnSetupDone() {
  state = State::kReady;
  if (setup_timer) loop->Cancel(setup_timer);
  setup_timer = 0;
  handler->OnSessionReady(self);
  FlushBlocked();
}

absl::Status SessionImpl::CheckNewPeerRequest(uint64_t request_id) {
  if (request_id != next_peer_request_id) {
    return ProtocolError(TerminationCode::kInvalidRequestId,
                         absl::StrCat("request id ", request_id, ", expected ",
                                      next_peer_request_id));
  }
  if (request_id >= local_max_request_id) {
    return ProtocolError(TerminationCode::kTooManyRequests,
                         absl::StrCat("request id ", request_id, " >= limit ",
                                      local_max_request_id));
  }
  next_peer_request_id += 2;
  return absl::OkStatus();
}

void SessionImpl::PeerRequestFinished() {
  // Keep the peer's window at options.max_requests open requests; announce in
  // steps of a quarter window so a burst of completions sends one message.
  local_max_request_id += 2;
  uint64_t open_window = local_max_request_id - next_peer_request_id;
  uint64_t full = 2 * options.max_requests;
  if (open_window + full / 4 >= full || options.max_requests < 4) {
    SendControl(MaxRequestId{local_max_request_id});
  }
}

void SessionImpl::CompleteOut(uint64_t request_id, absl::Status status) {
  auto it = out.find(request_id);
  if (it == out.end()) return;
  OutRequest req = std::move(it->second);
  out.erase(it);
  if (req.track_alias) alias_to_request.erase(req.track_alias);
  if (req.linger_timer) loop->Cancel(req.linger_timer);
  if (req.inbound_publish) PeerRequestFinished();
  if (!req.replied && req.on_reply) req.on_reply(status.ok() ? absl::UnknownError("no reply") : status);
  if (req.consumer) req.consumer->OnDone(status);
}

void SessionImpl::FailEverything(const absl::Status& status) {
  auto outs = std::move(out);
  out.clear();
  alias_to_request.clear();
  for (auto& [id, req] : outs) {
    if (req.linger_timer) loop->Cancel(req.linger_timer);
    if (!req.replied && req.on_reply) req.on_reply(status);
    if (req.consumer) req.consumer->OnDone(status);
  }
  auto namespaces = std::move(out_namespace);
  out_namespace.clear();
  for (auto& [id, ns] : namespaces) {
    if (ns.second) ns.second(status);
  }
  auto publishes = std::move(pending_publish);
  pending_publish.clear();
  for (auto& [id, p] : publishes) {
    if (p.second) p.second(status);
  }
  auto downs = std::move(downstreams);
  downstreams.clear();
  stream_owner.clear();
  for (auto& [id, d] : downs) d->Cancel(/*session_closing=*/true);
  // Streams are destroyed from a posted task: this may run inside one of
  // their parsers (a consumer closed the session while handling an object).
  auto streams = std::make_shared<decltype(in_streams)>(std::move(in_streams));
  in_streams.clear();
  loop->Post([streams] {});
  blocked.clear();
}

void SessionImpl::CloseWith(const absl::Status& status) {
  if (state == State::kClosed) return;
  state = State::kClosed;
  if (setup_timer) loop->Cancel(setup_timer);
  setup_timer = 0;
  TerminationCode code = status.ok() ? TerminationCode::kNoError : TerminationCodeOf(status);
  if (conn) conn->Close(static_cast<uint64_t>(code), std::string(status.message()).substr(0, 512));
  FailEverything(status.ok() ? absl::CancelledError("session closed") : status);
}

absl::Status SessionImpl::AnswerNamespace(uint64_t request_id, absl::Status result,
                                          const char* what) {
  auto it = out_namespace.find(request_id);
  if (it == out_namespace.end()) {
    return ProtocolError(TerminationCode::kProtocolViolation,
                         absl::StrCat(what, " for no pending request"));
  }
  auto cb = std::move(it->second.second);
  out_namespace.erase(it);
  if (cb) cb(std::move(result));
  return absl::OkStatus();
}

absl::StatusOr<bool> SessionImpl::Authorized(
    AuthOp op, const TrackNamespace& ns, const Parameters& params,
    const std::function<void(uint64_t, std::string)>& refuse) {
  if (options.authorizer == nullptr) return true;
  std::vector<AuthToken> tokens;
  for (const KeyValuePair& p : params) {
    if (p.type != kParamAuthorizationToken) continue;
    ASSIGN_OR_RETURN(AuthToken token, ParseAuthToken(p.bytes_value));
    switch (token.alias_type) {
      case AuthAliasType::kRegister:
        return ProtocolError(TerminationCode::kAuthTokenCacheOverflow,
                             "token alias registered; MAX_AUTH_TOKEN_CACHE_SIZE is 0");
      case AuthAliasType::kUseAlias:
      case AuthAliasType::kDelete:
        return ProtocolError(TerminationCode::kUnknownAuthTokenAlias,
                             absl::StrCat("unknown token alias ", token.alias));
      case AuthAliasType::kUseValue:
        tokens.push_back(std::move(token));
        break;
    }
  }
  absl::Status verdict = options.authorizer->Authorize(op, ns, tokens);
  if (verdict.ok()) return true;
  ++stats.requests_unauthorized;
  // A reason phrase is at most 1024 bytes; a refusal names the namespace,
  // which may be longer.
  refuse(AuthErrorCode(verdict), std::string(verdict.message()).substr(0, 1024));
  return false;
}

void SessionImpl::ResolveJoiningFetch(const Fetch& m, std::shared_ptr<DownstreamImpl> d) {
  auto it = downstreams.find(m.joining_request_id);
  if (it == downstreams.end() || it->second->kind() != DownstreamImpl::Kind::kSubscribe) {
    d->Reject(kErrInvalidJoiningRequestId, "no such subscription");
    return;
  }
  std::shared_ptr<DownstreamImpl> sub = it->second;
  if (!sub->answered()) {
    // aiomoqt sends the joining FETCH right behind its SUBSCRIBE: wait for
    // the subscription's answer.
    sub->WhenAnswered([this, m, d, sub] {
      if (d->answered() || d->cancelled()) return;
      if (!sub->accepted()) {
        d->Reject(kErrInvalidJoiningRequestId, "the joined subscription was refused");
        return;
      }
      ResolveJoiningFetch(m, d);
    });
    return;
  }
  const auto& largest = sub->info().largest;
  if (!largest) {
    d->Reject(kErrInvalidRange, "the joined subscription has no content");
    return;
  }
  Fetch resolved = m;
  resolved.track = sub->track();
  uint64_t start_group =
      m.fetch_type == FetchType::kRelativeJoining
          ? (largest->group >= m.joining_start ? largest->group - m.joining_start : 0)
          : m.joining_start;
  resolved.start = Location{start_group, 0};
  resolved.end = Location{largest->group, largest->object + 1};
  resolved.fetch_type = FetchType::kStandalone;
  d->SetTrack(resolved.track);
  handler->OnFetch(self, resolved, d);
}

// ---- control messages -------------------------------------------------------

}  // namespace internal

using internal::OutRequest;
using internal::SessionImpl;

MoqtSession::MoqtSession(quic::EventLoop* loop, quic::Connection* conn,
                         RequestHandler* handler, SessionOptions options)
    : impl_(std::make_unique<SessionImpl>(this, loop, conn, handler, std::move(options))) {
  SessionImpl& s = *impl_;
  s.local_max_request_id = 2 * s.options.max_requests;
  if (conn && conn->is_server()) {
    s.is_server = true;
    s.next_request_id = 1;
    s.next_peer_request_id = 0;
    s.local_max_request_id = 2 * s.options.max_requests;
  } else {
    s.next_request_id = 0;
    s.next_peer_request_id = 1;
    s.local_max_request_id = 2 * s.options.max_requests + 1;
  }
  s.setup_timer = loop->RunAfter(s.options.setup_timeout, [this] {
    impl_->setup_timer = 0;
    if (impl_->state != SessionImpl::State::kReady) {
      impl_->CloseWith(ProtocolError(TerminationCode::kControlMessageTimeout,
                                     "no SETUP within the setup timeout"));
    }
  });
}

MoqtSession::~MoqtSession() {
  if (impl_->state != SessionImpl::State::kClosed) {
    impl_->CloseWith(absl::OkStatus());
  }
  if (impl_->setup_timer) impl_->loop->Cancel(impl_->setup_timer);
}

bool MoqtSession::ready() const { return impl_->state == SessionImpl::State::kReady; }
bool MoqtSession::closed() const { return impl_->state == SessionImpl::State::kClosed; }
quic::Connection* MoqtSession::connection() const { return impl_->conn; }
std::string MoqtSession::peer() const {
  return impl_->conn ? impl_->conn->peer_address() : std::string("(connecting)");
}
const MoqtSession::Stats& MoqtSession::stats() const { return impl_->stats; }
void MoqtSession::SetClosedCallback(std::function<void()> cb) {
  impl_->closed_callback = std::move(cb);
}

absl::StatusOr<uint64_t> MoqtSession::Subscribe(moqt::Subscribe request,
                                                std::shared_ptr<TrackConsumer> consumer,
                                                ReplyCallback on_reply) {
  SessionImpl& s = *impl_;
  return s.StartRequest([&](uint64_t id) -> ControlMessage {
    request.request_id = id;
    s.NewOut(id, OutRequest::Kind::kSubscribe, std::move(consumer), std::move(on_reply))
        .subscribe = request;
    return request;
  });
}

void MoqtSession::Unsubscribe(uint64_t request_id) {
  SessionImpl& s = *impl_;
  auto it = s.out.find(request_id);
  if (it == s.out.end() || it->second.kind != OutRequest::Kind::kSubscribe) return;
  // Still waiting for a request id: never sent, so just drop it.
  auto queued = std::find_if(s.blocked.begin(), s.blocked.end(),
                             [&](const auto& b) { return b.first == request_id; });
  if (queued != s.blocked.end()) {
    s.blocked.erase(queued);
  } else {
    s.SendControl(moqt::Unsubscribe{request_id});
  }
  s.CompleteOut(request_id, absl::CancelledError("unsubscribed"));
}

absl::StatusOr<uint64_t> MoqtSession::Fetch(moqt::Fetch request,
                                            std::shared_ptr<TrackConsumer> consumer,
                                            ReplyCallback on_reply) {
  SessionImpl& s = *impl_;
  return s.StartRequest([&](uint64_t id) -> ControlMessage {
    request.request_id = id;
    s.NewOut(id, OutRequest::Kind::kFetch, std::move(consumer), std::move(on_reply)).fetch =
        request;
    return request;
  });
}

void MoqtSession::FetchCancel(uint64_t request_id) {
  SessionImpl& s = *impl_;
  auto it = s.out.find(request_id);
  if (it == s.out.end() || it->second.kind != OutRequest::Kind::kFetch) return;
  s.SendControl(moqt::FetchCancel{request_id});
  s.CompleteOut(request_id, absl::CancelledError("fetch cancelled"));
}

absl::StatusOr<uint64_t> MoqtSession::TrackStatus(moqt::Subscribe request,
                                                  ReplyCallback on_reply) {
  SessionImpl& s = *impl_;
  return s.StartRequest([&](uint64_t id) -> ControlMessage {
    request.request_id = id;
    s.NewOut(id, OutRequest::Kind::kTrackStatus, nullptr, std::move(on_reply)).subscribe =
        request;
    return moqt::TrackStatus{request};
  });
}

absl::StatusOr<uint64_t> MoqtSession::Publish(const FullTrackName& track,
                                              std::optional<Location> largest,
                                              PublishCallback on_reply) {
  SessionImpl& s = *impl_;
  return s.StartRequest([&](uint64_t id) -> ControlMessage {
    auto d = std::make_shared<internal::DownstreamImpl>(
        &s, internal::DownstreamImpl::Kind::kSubscribe, id, track, moqt::Subscribe{}, 128);
    uint64_t alias = s.next_track_alias++;
    d->MarkOutboundPublish(alias);
    s.downstreams[id] = d;
    s.pending_publish[id] = {largest, std::move(on_reply)};
    moqt::Publish msg;
    msg.request_id = id;
    msg.track = track;
    msg.track_alias = alias;
    msg.largest = largest;
    msg.forward = true;
    return msg;
  });
}

void MoqtSession::SetForward(uint64_t publish_request_id, bool forward) {
  SessionImpl& s = *impl_;
  auto it = s.out.find(publish_request_id);
  if (it == s.out.end() || !it->second.inbound_publish) return;
  Location start = it->second.publish_largest.value_or(Location{});
  (void)s.StartRequest([&](uint64_t id) -> ControlMessage {
    return SubscribeUpdate{id, publish_request_id, start, 0, 128, forward, {}};
  });
}

absl::Status MoqtSession::PublishNamespace(const TrackNamespace& ns, StatusCallback on_reply,
                                           Parameters parameters) {
  SessionImpl& s = *impl_;
  return s.StartRequest([&](uint64_t id) -> ControlMessage {
    s.out_namespace[id] = {ns, std::move(on_reply)};
    return moqt::PublishNamespace{id, ns, std::move(parameters)};
  }).status();
}

void MoqtSession::PublishNamespaceDone(const TrackNamespace& ns) {
  impl_->SendControl(moqt::PublishNamespaceDone{ns});
}

absl::Status MoqtSession::SubscribeNamespace(const TrackNamespace& prefix,
                                             StatusCallback on_reply, Parameters parameters) {
  SessionImpl& s = *impl_;
  return s.StartRequest([&](uint64_t id) -> ControlMessage {
    s.out_namespace[id] = {prefix, std::move(on_reply)};
    return moqt::SubscribeNamespace{id, prefix, std::move(parameters)};
  }).status();
}

void MoqtSession::UnsubscribeNamespace(const TrackNamespace& prefix) {
  impl_->SendControl(moqt::UnsubscribeNamespace{prefix});
}

void MoqtSession::Goaway(const std::string& new_uri) {
  impl_->SendControl(moqt::Goaway{new_uri});
}

void MoqtSession::Close(TerminationCode code, const std::string& reason) {
  impl_->CloseWith(code == TerminationCode::kNoError
                       ? absl::OkStatus()
                       : ProtocolError(code, reason));
}

// ---- quic::ConnectionHandler -------------------------------------------------

void MoqtSession::OnHandshakeDone(quic::Connection* conn) {
  SessionImpl& s = *impl_;
  s.conn = conn;
  s.is_server = conn->is_server();
  if (s.is_server) return;  // the client opens the control stream
  absl::StatusOr<int64_t> stream = conn->OpenBidiStream();
  if (!stream.ok()) {
    s.CloseWith(stream.status());
    return;
  }
  s.control_stream = *stream;
  ClientSetup setup;
  setup.supported_versions = {kVersionDraft14};
  setup.parameters.push_back({kSetupMaxRequestId, s.local_max_request_id, ""});
  setup.parameters.push_back({kSetupMoqtImplementation, 0, s.options.implementation});
  if (!s.options.path.empty()) setup.parameters.push_back({kSetupPath, 0, s.options.path});
  if (!s.options.authority.empty()) {
    setup.parameters.push_back({kSetupAuthority, 0, s.options.authority});
  }
  s.SendControl(setup);
  s.state = SessionImpl::State::kSetupSent;
}

void MoqtSession::OnStreamData(quic::Connection* conn, int64_t stream_id,
                               absl::Span<const uint8_t> data, bool fin) {
  SessionImpl& s = *impl_;
  if (s.conn == nullptr) s.conn = conn;
  if (s.state == SessionImpl::State::kClosed) return;
  if (internal::IsUniStream(stream_id)) {
    s.OnUniStreamData(stream_id, data, fin);
    return;
  }
  if (s.control_stream < 0 && s.is_server && !internal::IsServerInitiated(stream_id)) {
    s.control_stream = stream_id;
  }
  if (stream_id != s.control_stream) {
    s.CloseWith(ProtocolError(TerminationCode::kProtocolViolation,
                              "a second bidirectional stream"));
    return;
  }
  absl::Status st = s.control_parser->OnIngress(data, fin);
  if (!st.ok()) s.CloseWith(st);
}

void MoqtSession::OnStreamReset(quic::Connection* conn, int64_t stream_id,
                                uint64_t app_error) {
  SessionImpl& s = *impl_;
  if (stream_id == s.control_stream) {
    s.CloseWith(ProtocolError(TerminationCode::kProtocolViolation,
                              "the control stream was reset"));
    return;
  }
  auto owner = s.stream_owner.find(stream_id);
  if (owner != s.stream_owner.end()) {
    owner->second->OnStreamStopped(stream_id);
    return;
  }
  auto in = s.in_streams.find(stream_id);
  if (in != s.in_streams.end()) {
    bool fetch = in->second->is_fetch();
    uint64_t key = in->second->key();
    bool counted = in->second->counted();
    s.in_streams.erase(in);
    if (fetch) {
      s.CompleteOut(key, absl::AbortedError(absl::StrCat(
                             "fetch stream reset by the peer, code ", app_error)));
    } else if (counted) {
      auto alias = s.alias_to_request.find(key);
      if (alias != s.alias_to_request.end()) {
        ++s.out[alias->second].ended_streams;
        s.MaybeFinishSubscription(alias->second);
      }
    }
  }
}

void MoqtSession::OnStreamDrained(quic::Connection*, int64_t) {
  SessionImpl& s = *impl_;
  std::vector<uint64_t> waiting = s.drain_waiters;  // a callback may change the list
  for (uint64_t id : waiting) {
    auto it = s.downstreams.find(id);
    if (it == s.downstreams.end()) {
      s.drain_waiters.erase(std::remove(s.drain_waiters.begin(), s.drain_waiters.end(), id),
                            s.drain_waiters.end());
      continue;
    }
    auto d = it->second;  // a copy: the callback may finish it
    d->OnStreamDrained();
  }
}

void MoqtSession::OnDatagram(quic::Connection*, absl::Span<const uint8_t> data) {
  SessionImpl& s = *impl_;
  if (s.state != SessionImpl::State::kReady) return;
  absl::StatusOr<Datagram> d = ParseDatagram(data, s.options.limits);
  if (!d.ok()) {
    s.CloseWith(d.status());
    return;
  }
  auto alias = s.alias_to_request.find(d->track_alias);
  if (alias == s.alias_to_request.end()) return;  // unknown or ended: dropped
  auto it = s.out.find(alias->second);
  if (it == s.out.end() || !it->second.consumer) return;
  ++s.stats.objects_received;
  s.stats.bytes_received += d->payload.size();
  it->second.consumer->OnObject(
      d->object, absl::Span<const uint8_t>(
                     reinterpret_cast<const uint8_t*>(d->payload.data()), d->payload.size()));
}

void MoqtSession::OnClosed(quic::Connection*, const absl::Status& reason) {
  SessionImpl& s = *impl_;
  if (s.closed_reported) return;
  s.closed_reported = true;
  // Not closed by us (CloseWith came first otherwise): the peer or the
  // network ended it, so what is outstanding is unavailable, not cancelled.
  absl::Status status = reason.ok() ? absl::UnavailableError("session closed by the peer") : reason;
  if (s.state != SessionImpl::State::kClosed) {
    s.state = SessionImpl::State::kClosed;
    s.FailEverything(status);
  }
  s.conn = nullptr;
  s.handler->OnSessionClosed(this, reason);
  if (s.closed_callback) s.closed_callback();
}

}  // namespace kvcast::moqt
