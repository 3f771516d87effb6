// MoqtSession's control messages from the peer: OnControlMessage checks
// the session's state and hands each message to its handler, On(MESSAGE&):
// setup and session flow, the peer's requests (SUBSCRIBE, FETCH,
// TRACK_STATUS, PUBLISH, the namespace requests) and the answers to ours.
// Setup, request ids and our requests are in session.cc; data streams in
// session_streams.cc.
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "transport/moqt/internal/session_impl.h"
#include "transport/moqt/session.h"

namespace kvcast::moqt {
namespace internal {
namespace {

absl::Status Unexpected(const char* what) {
  return ProtocolError(TerminationCode::kProtocolViolation, absl::StrCat("unexpected ", what));
}

absl::Status RequestError(uint64_t code, const std::string& reason) {
  absl::StatusCode status_code = absl::StatusCode::kUnknown;
  switch (code) {
    case kErrUnauthorized:
    case kErrMalformedAuthToken:
    case kErrExpiredAuthToken: status_code = absl::StatusCode::kPermissionDenied; break;
    case kErrTimeout: status_code = absl::StatusCode::kDeadlineExceeded; break;
    case kErrNotSupported: status_code = absl::StatusCode::kUnimplemented; break;
    case kErrTrackDoesNotExist: status_code = absl::StatusCode::kNotFound; break;
    case kErrInvalidRange: status_code = absl::StatusCode::kOutOfRange; break;
    case kErrNoObjects: status_code = absl::StatusCode::kNotFound; break;
    default: status_code = absl::StatusCode::kInternal; break;
  }
  return absl::Status(status_code,
                      absl::StrCat("peer error 0x", absl::Hex(code), ": ", reason));
}

}  // namespace

absl::Status SessionImpl::OnControlMessage(ControlMessage msg) {
  const bool setup_message = std::holds_alternative<ClientSetup>(msg) ||
                             std::holds_alternative<ServerSetup>(msg);
  if (state != State::kReady && !setup_message) {
    return ProtocolError(TerminationCode::kProtocolViolation,
                         absl::StrCat(MessageName(msg), " before SETUP"));
  }
  if (state == State::kReady && setup_message) {
    return ProtocolError(TerminationCode::kProtocolViolation, "second SETUP");
  }
  return std::visit([this](auto& m) { return On(m); }, msg);
}

absl::Status SessionImpl::On(ClientSetup& m) {
  if (!is_server) return Unexpected("CLIENT_SETUP at a client");
  bool ok = false;
  for (uint64_t v : m.supported_versions) ok |= v == kVersionDraft14;
  if (!ok) {
    return ProtocolError(TerminationCode::kVersionNegotiationFailed,
                         "client offers no supported version (want draft-14)");
  }
  peer_max_request_id = FindIntParameter(m.parameters, kSetupMaxRequestId).value_or(0);
  ServerSetup reply;
  reply.parameters.push_back({kSetupMaxRequestId, local_max_request_id, ""});
  reply.parameters.push_back({kSetupMoqtImplementation, 0, options.implementation});
  SendControl(reply);
  OnSetupDone();
  return absl::OkStatus();
}

absl::Status SessionImpl::On(ServerSetup& m) {
  if (is_server) return Unexpected("SERVER_SETUP at a server");
  if (m.selected_version != kVersionDraft14) {
    return ProtocolError(TerminationCode::kVersionNegotiationFailed,
                         absl::StrCat("server selected version 0x",
                                      absl::Hex(m.selected_version)));
  }
  peer_max_request_id = FindIntParameter(m.parameters, kSetupMaxRequestId).value_or(0);
  OnSetupDone();
  return absl::OkStatus();
}

absl::Status SessionImpl::On(Goaway& m) {
  handler->OnGoaway(self, m.new_session_uri);
  return absl::OkStatus();
}

absl::Status SessionImpl::On(MaxRequestId& m) {
  if (m.request_id <= peer_max_request_id) {
    return ProtocolError(TerminationCode::kProtocolViolation,
                         "MAX_REQUEST_ID did not increase");
  }
  peer_max_request_id = m.request_id;
  FlushBlocked();
  return absl::OkStatus();
}

absl::Status SessionImpl::On(RequestsBlocked&) {
  // Our window reopens as requests finish; nothing more to do.
  return absl::OkStatus();
}

absl::Status SessionImpl::On(Subscribe& m) {
  RETURN_IF_ERROR(CheckNewPeerRequest(m.request_id));
  auto d = std::make_shared<DownstreamImpl>(this, DownstreamImpl::Kind::kSubscribe,
                                            m.request_id, m.track, m,
                                            m.subscriber_priority);
  downstreams[m.request_id] = d;
  ASSIGN_OR_RETURN(bool allowed, Authorized(kAuthSubscribe, m.track.ns, m.parameters,
                                            [&](uint64_t code, std::string why) {
                                              d->Reject(code, why);
                                            }));
  if (allowed) handler->OnSubscribe(self, m, d);
  return absl::OkStatus();
}

absl::Status SessionImpl::On(TrackStatus& m) {
  RETURN_IF_ERROR(CheckNewPeerRequest(m.request.request_id));
  auto d = std::make_shared<DownstreamImpl>(
      this, DownstreamImpl::Kind::kTrackStatus, m.request.request_id,
      m.request.track, m.request, m.request.subscriber_priority);
  downstreams[m.request.request_id] = d;
  ASSIGN_OR_RETURN(bool allowed,
                   Authorized(kAuthTrackStatus, m.request.track.ns, m.request.parameters,
                              [&](uint64_t code, std::string why) { d->Reject(code, why); }));
  if (allowed) handler->OnTrackStatus(self, m.request, d);
  return absl::OkStatus();
}

absl::Status SessionImpl::On(SubscribeUpdate& m) {
  RETURN_IF_ERROR(CheckNewPeerRequest(m.request_id));
  PeerRequestFinished();  // an update holds no state of its own
  auto it = downstreams.find(m.subscription_request_id);
  if (it == downstreams.end() ||
      it->second->kind() != DownstreamImpl::Kind::kSubscribe) {
    return absl::OkStatus();  // may have just ended; not an error
  }
  Subscribe& f = it->second->filter();
  if (m.start < f.start.value_or(Location{})) {
    return ProtocolError(TerminationCode::kProtocolViolation,
                         "SUBSCRIBE_UPDATE moved the start backwards");
  }
  f.subscriber_priority = m.subscriber_priority;
  f.forward = m.forward;
  if (f.filter_type == FilterType::kAbsoluteStart ||
      f.filter_type == FilterType::kAbsoluteRange) {
    f.start = m.start;
  }
  if (m.end_group > 0) {
    f.filter_type = FilterType::kAbsoluteRange;
    f.start = f.start.value_or(m.start);
    f.end_group = m.end_group - 1;
  }
  return absl::OkStatus();
}

absl::Status SessionImpl::On(Unsubscribe& m) {
  auto it = downstreams.find(m.request_id);
  if (it != downstreams.end()) it->second->Cancel(/*session_closing=*/false);
  return absl::OkStatus();
}

absl::Status SessionImpl::On(Fetch& m) {
  RETURN_IF_ERROR(CheckNewPeerRequest(m.request_id));
  if (m.fetch_type != FetchType::kStandalone) {
    auto d = std::make_shared<DownstreamImpl>(this, DownstreamImpl::Kind::kFetch,
                                              m.request_id, FullTrackName{},
                                              Subscribe{}, m.subscriber_priority);
    downstreams[m.request_id] = d;
    auto it = downstreams.find(m.joining_request_id);
    if (it != downstreams.end() &&
        it->second->kind() == DownstreamImpl::Kind::kSubscribe &&
        it->second->filter().filter_type != FilterType::kLargestObject) {
      return ProtocolError(TerminationCode::kProtocolViolation,
                           "joining FETCH of a subscription without the "
                           "Largest Object filter");
    }
    ResolveJoiningFetch(m, d);
    return absl::OkStatus();
  }
  auto d = std::make_shared<DownstreamImpl>(this, DownstreamImpl::Kind::kFetch,
                                            m.request_id, m.track, Subscribe{},
                                            m.subscriber_priority);
  downstreams[m.request_id] = d;
  if (m.end < m.start && !(m.end.object == 0 && m.end.group == m.start.group)) {
    d->Reject(kErrInvalidRange, "end before start");
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(bool allowed,
                   Authorized(kAuthFetch, m.track.ns, m.parameters,
                              [&](uint64_t code, std::string why) { d->Reject(code, why); }));
  if (allowed) handler->OnFetch(self, m, d);
  return absl::OkStatus();
}

absl::Status SessionImpl::On(FetchCancel& m) {
  auto it = downstreams.find(m.request_id);
  if (it != downstreams.end()) it->second->Cancel(/*session_closing=*/false);
  return absl::OkStatus();
}

absl::Status SessionImpl::On(SubscribeOk& m) {
  auto it = out.find(m.request_id);
  if (it == out.end() || it->second.kind != OutRequest::Kind::kSubscribe) {
    return ProtocolError(TerminationCode::kProtocolViolation,
                         "SUBSCRIBE_OK for no pending SUBSCRIBE");
  }
  OutRequest& req = it->second;
  if (alias_to_request.contains(m.track_alias)) {
    return ProtocolError(TerminationCode::kDuplicateTrackAlias,
                         absl::StrCat("track alias ", m.track_alias, " in use"));
  }
  req.track_alias = m.track_alias;
  alias_to_request[m.track_alias] = m.request_id;
  req.replied = true;
  if (req.on_reply) req.on_reply(TrackInfo{m.largest, m.group_order, false});
  FlushAlias(m.track_alias);
  return absl::OkStatus();
}

absl::Status SessionImpl::On(TrackStatusOk& m) {
  auto it = out.find(m.reply.request_id);
  if (it == out.end() || it->second.kind != OutRequest::Kind::kTrackStatus) {
    return ProtocolError(TerminationCode::kProtocolViolation,
                         "TRACK_STATUS_OK for no pending TRACK_STATUS");
  }
  auto cb = std::move(it->second.on_reply);
  out.erase(it);
  if (cb) cb(TrackInfo{m.reply.largest, m.reply.group_order, false});
  return absl::OkStatus();
}

absl::Status SessionImpl::On(SubscribeError& m) {
  CompleteOut(m.request_id, RequestError(m.error_code, m.reason));
  return absl::OkStatus();
}

absl::Status SessionImpl::On(TrackStatusError& m) {
  CompleteOut(m.reply.request_id, RequestError(m.reply.error_code, m.reply.reason));
  return absl::OkStatus();
}

absl::Status SessionImpl::On(FetchOk& m) {
  auto it = out.find(m.request_id);
  if (it == out.end() || it->second.kind != OutRequest::Kind::kFetch) {
    return absl::OkStatus();  // may have completed already (stream FIN first)
  }
  it->second.replied = true;
  if (it->second.on_reply) {
    it->second.on_reply(TrackInfo{m.end, m.group_order, m.end_of_track});
  }
  return absl::OkStatus();
}

absl::Status SessionImpl::On(FetchError& m) {
  CompleteOut(m.request_id, RequestError(m.error_code, m.reason));
  return absl::OkStatus();
}

absl::Status SessionImpl::On(PublishDone& m) {
  auto it = out.find(m.request_id);
  if (it == out.end()) return absl::OkStatus();
  OutRequest& req = it->second;
  req.publish_done = true;
  req.expected_streams = m.stream_count;
  req.done_status =
      m.status_code == kDoneTrackEnded
          ? absl::OkStatus()
          : absl::Status(m.status_code == kDoneSubscriptionEnded ? absl::StatusCode::kCancelled
                         : m.status_code == kDoneGoingAway      ? absl::StatusCode::kUnavailable
                                                                : absl::StatusCode::kAborted,
                         absl::StrCat("PUBLISH_DONE 0x", absl::Hex(m.status_code),
                                      ": ", m.reason));
  uint64_t id = m.request_id;
  ArmPublishDoneLinger(id, options.publish_done_linger);
  MaybeFinishSubscription(id);
  return absl::OkStatus();
}

absl::Status SessionImpl::On(Publish& m) {
  RETURN_IF_ERROR(CheckNewPeerRequest(m.request_id));
  if (alias_to_request.contains(m.track_alias)) {
    return ProtocolError(TerminationCode::kDuplicateTrackAlias,
                         absl::StrCat("PUBLISH reuses track alias ", m.track_alias));
  }
  ASSIGN_OR_RETURN(bool allowed,
                   Authorized(kAuthPublish, m.track.ns, m.parameters,
                              [&](uint64_t code, std::string why) {
                                SendControl(PublishError{m.request_id, code, why});
                              }));
  if (!allowed) {
    PeerRequestFinished();
    return absl::OkStatus();
  }
  bool forward = m.forward;
  std::shared_ptr<TrackConsumer> consumer = handler->OnPublish(self, m, &forward);
  if (consumer == nullptr) {
    SendControl(PublishError{m.request_id, kErrNotSupported,
                             absl::StrCat("PUBLISH of ", ToString(m.track), " refused")});
    PeerRequestFinished();
    return absl::OkStatus();
  }
  OutRequest& r = out[m.request_id];
  r.kind = OutRequest::Kind::kSubscribe;
  r.subscribe.track = m.track;
  r.consumer = std::move(consumer);
  r.replied = true;
  r.inbound_publish = true;
  r.publish_largest = m.largest;
  r.track_alias = m.track_alias;
  alias_to_request[m.track_alias] = m.request_id;
  PublishOk ok;
  ok.request_id = m.request_id;
  ok.forward = forward;
  ok.group_order = GroupOrder::kAscending;
  ok.filter_type = FilterType::kLargestObject;
  SendControl(ok);
  FlushAlias(m.track_alias);
  return absl::OkStatus();
}

absl::Status SessionImpl::On(PublishOk& m) {
  auto pending = pending_publish.find(m.request_id);
  auto d = downstreams.find(m.request_id);
  if (pending == pending_publish.end() || d == downstreams.end()) {
    return Unexpected("PUBLISH_OK for no pending PUBLISH");
  }
  auto [largest, cb] = std::move(pending->second);
  pending_publish.erase(pending);
  std::shared_ptr<DownstreamImpl> down = d->second;
  down->OnPublishOk(m, largest);
  if (cb) cb(std::shared_ptr<Downstream>(down));
  return absl::OkStatus();
}

absl::Status SessionImpl::On(PublishError& m) {
  auto pending = pending_publish.find(m.request_id);
  if (pending == pending_publish.end()) return Unexpected("PUBLISH_ERROR for no pending PUBLISH");
  auto cb = std::move(pending->second.second);
  pending_publish.erase(pending);
  downstreams.erase(m.request_id);
  if (cb) cb(RequestError(m.error_code, m.reason));
  return absl::OkStatus();
}

absl::Status SessionImpl::On(PublishNamespace& m) {
  RETURN_IF_ERROR(CheckNewPeerRequest(m.request_id));
  ASSIGN_OR_RETURN(bool allowed,
                   Authorized(kAuthPublishNamespace, m.ns, m.parameters,
                              [&](uint64_t code, std::string why) {
                                SendControl(PublishNamespaceError{m.request_id, code, why});
                              }));
  if (!allowed) {
    PeerRequestFinished();
    return absl::OkStatus();
  }
  absl::Status s = handler->OnPublishNamespace(self, m.ns);
  if (s.ok()) {
    SendControl(PublishNamespaceOk{m.request_id});
  } else {
    SendControl(PublishNamespaceError{m.request_id, kErrInternal,
                                      std::string(s.message())});
  }
  PeerRequestFinished();
  return absl::OkStatus();
}

absl::Status SessionImpl::On(PublishNamespaceDone& m) {
  handler->OnPublishNamespaceDone(self, m.ns);
  return absl::OkStatus();
}

absl::Status SessionImpl::On(PublishNamespaceCancel& m) {
  handler->OnPublishNamespaceCancel(self, m.ns,
                                    RequestError(m.error_code, m.reason));
  return absl::OkStatus();
}

absl::Status SessionImpl::On(PublishNamespaceOk& m) {
  return AnswerNamespace(m.request_id, absl::OkStatus(), "PUBLISH_NAMESPACE_OK");
}

absl::Status SessionImpl::On(PublishNamespaceError& m) {
  return AnswerNamespace(m.request_id, RequestError(m.error_code, m.reason), "PUBLISH_NAMESPACE_ERROR");
}

absl::Status SessionImpl::On(SubscribeNamespace& m) {
  RETURN_IF_ERROR(CheckNewPeerRequest(m.request_id));
  ASSIGN_OR_RETURN(bool allowed,
                   Authorized(kAuthSubscribeNamespace, m.prefix, m.parameters,
                              [&](uint64_t code, std::string why) {
                                SendControl(SubscribeNamespaceError{m.request_id, code, why});
                              }));
  if (!allowed) {
    PeerRequestFinished();
    return absl::OkStatus();
  }
  absl::Status s = handler->OnSubscribeNamespace(self, m.prefix);
  if (s.ok()) {
    SendControl(SubscribeNamespaceOk{m.request_id});
  } else {
    SendControl(SubscribeNamespaceError{m.request_id, kErrInternal,
                                        std::string(s.message())});
  }
  PeerRequestFinished();
  return absl::OkStatus();
}

absl::Status SessionImpl::On(SubscribeNamespaceOk& m) {
  return AnswerNamespace(m.request_id, absl::OkStatus(), "SUBSCRIBE_NAMESPACE_OK");
}

absl::Status SessionImpl::On(SubscribeNamespaceError& m) {
  return AnswerNamespace(m.request_id, RequestError(m.error_code, m.reason), "SUBSCRIBE_NAMESPACE_ERROR");
}

absl::Status SessionImpl::On(UnsubscribeNamespace& m) {
  handler->OnUnsubscribeNamespace(self, m.prefix);
  return absl::OkStatus();
}

}  // namespace internal
}  // namespace kvcast::moqt
