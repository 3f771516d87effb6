// MoqtSession data plane: the streams we publish on (DownstreamImpl) and the
// streams we receive (InStream).
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "transport/moqt/internal/session_impl.h"

namespace kvcast::moqt::internal {
namespace {

absl::Span<const uint8_t> AsBytes(const std::string& s) {
  return absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

// Objects that wait for a SUBSCRIBE_OK naming their alias, per session.
constexpr size_t kMaxPendingBytes = 64u << 20;

// Smaller shared payloads are copied: they coalesce with their headers into
// one chunk, which costs less than a chunk of their own.
constexpr size_t kMinSharedPayload = 4096;

// QUIC send order of a data stream (lower first), draft-14 "Priorities":
// subscriber priority, then publisher priority, then group (ascending). The
// control stream keeps priority 0 and goes before all of them.
uint64_t StreamPriority(uint8_t subscriber, uint8_t publisher, uint64_t group) {
  return (uint64_t{subscriber} << 56) | (uint64_t{publisher} << 48) |
         (std::min<uint64_t>(group, (uint64_t{1} << 48) - 2) + 1);
}

}  // namespace

// ---- helpers on the session -------------------------------------------------

absl::StatusOr<int64_t> SessionImpl::OpenDataStream() {
  if (state == State::kClosed || conn == nullptr) {
    return absl::FailedPreconditionError("session closed");
  }
  return conn->OpenUniStream();
}

void SessionImpl::SendOnStream(int64_t stream, absl::Span<const uint8_t> bytes, bool fin) {
  if (state == State::kClosed || conn == nullptr) return;
  absl::Status s = conn->Send(stream, bytes, fin);
  if (!s.ok()) CloseWith(s);
}

void SessionImpl::SendPayloadOnStream(int64_t stream, const quic::SharedBytes& payload,
                                      bool fin) {
  if (payload.owner == nullptr || payload.bytes.size() < kMinSharedPayload) {
    SendOnStream(stream, payload.bytes, fin);
    return;
  }
  if (state == State::kClosed || conn == nullptr) return;
  absl::Status s = conn->SendShared(stream, payload, fin);
  if (!s.ok()) CloseWith(s);
}

// ---- DownstreamImpl ----------------------------------------------------------

DownstreamImpl::DownstreamImpl(SessionImpl* session, Kind kind, uint64_t request_id,
                               FullTrackName track, Subscribe filter, uint8_t priority)
    : session_(session), kind_(kind), request_id_(request_id), track_(std::move(track)),
      filter_(std::move(filter)) {
  filter_.subscriber_priority = priority;  // also for fetches, which have no filter
}

void DownstreamImpl::Accept(const TrackInfo& info) {
  if (session_ == nullptr || accepted_ || finished_) return;
  accepted_ = true;
  info_ = info;
  switch (kind_) {
    case Kind::kSubscribe: {
      track_alias_ = session_->next_track_alias++;
      SubscribeOk ok;
      ok.request_id = request_id_;
      ok.track_alias = track_alias_;
      ok.group_order = info.group_order == GroupOrder::kPublisherDefault
                           ? GroupOrder::kAscending
                           : info.group_order;
      ok.largest = info.largest;
      session_->SendControl(ok);
      break;
    }
    case Kind::kTrackStatus: {
      SubscribeOk ok;
      ok.request_id = request_id_;
      ok.track_alias = 0;
      ok.group_order = GroupOrder::kAscending;
      ok.largest = info.largest;
      session_->SendControl(TrackStatusOk{ok});
      Finish();
      break;
    }
    case Kind::kFetch: {
      FetchOk ok;
      ok.request_id = request_id_;
      ok.group_order = GroupOrder::kAscending;
      ok.end_of_track = info.end_of_track;
      ok.end = info.largest.value_or(Location{});
      session_->SendControl(ok);
      break;
    }
  }
  RunAnswerCallbacks();
}

void DownstreamImpl::OnPublishOk(const PublishOk& ok, std::optional<Location> largest) {
  accepted_ = true;
  filter_.filter_type = ok.filter_type;
  filter_.start = ok.start;
  filter_.end_group = ok.end_group;
  filter_.forward = ok.forward;
  filter_.subscriber_priority = ok.subscriber_priority;
  info_.largest = largest;
}

void DownstreamImpl::WhenAnswered(std::function<void()> fn) {
  if (answered()) {
    fn();
    return;
  }
  on_answer_.push_back(std::move(fn));
}

void DownstreamImpl::RunAnswerCallbacks() {
  auto callbacks = std::move(on_answer_);
  on_answer_.clear();
  for (auto& fn : callbacks) fn();
}

void DownstreamImpl::Reject(uint64_t error_code, const std::string& reason) {
  if (session_ == nullptr || accepted_ || finished_) return;
  std::string r = reason.substr(0, 1024);
  switch (kind_) {
    case Kind::kSubscribe:
      session_->SendControl(SubscribeError{request_id_, error_code, r});
      break;
    case Kind::kTrackStatus:
      session_->SendControl(TrackStatusError{SubscribeError{request_id_, error_code, r}});
      break;
    case Kind::kFetch:
      session_->SendControl(FetchError{request_id_, error_code, r});
      break;
  }
  Finish();
  RunAnswerCallbacks();
}

void DownstreamImpl::OnObject(const ObjectHeader& header,
                              absl::Span<const uint8_t> payload) {
  OnSharedObject(header, quic::SharedBytes{nullptr, payload});
}

void DownstreamImpl::OnSharedObject(const ObjectHeader& header,
                                    const quic::SharedBytes& payload) {
  if (session_ == nullptr || !accepted_ || finished_ || cancelled_) return;
  if (kind_ == Kind::kFetch) {
    SendFetchObject(header, payload);
    return;
  }
  if (kind_ != Kind::kSubscribe || !filter_.forward) return;
  Location loc{header.group, header.object};
  if (!FilterAccepts(filter_, info_.largest, loc)) return;
  SendSubgroupObject(header, payload);
}

void DownstreamImpl::SendSubgroupObject(const ObjectHeader& header,
                                        const quic::SharedBytes& payload) {
  SessionImpl& s = *session_;
  auto key = std::make_pair(header.group, header.subgroup);
  auto it = subgroups_.find(key);
  if (it == subgroups_.end()) {
    if (subgroups_.size() >= s.options.max_open_subgroups && !subgroup_lru_.empty()) {
      FinishSubgroup(subgroups_.find(subgroup_lru_.front()));
      if (session_ == nullptr) return;
    }
    absl::StatusOr<int64_t> stream = s.OpenDataStream();
    if (!stream.ok()) {
      // Out of streams for now: the peer raises the limit as we finish
      // streams; a subscription that cannot open one ends with an error.
      OnDone(absl::ResourceExhaustedError(std::string(stream.status().message())));
      return;
    }
    OpenSubgroup sg;
    sg.stream = *stream;
    sg.header.track_alias = track_alias_;
    sg.header.group = header.group;
    sg.header.subgroup = header.subgroup;
    sg.header.subgroup_mode = header.subgroup == 0 ? SubgroupHeader::SubgroupIdMode::kZero
                                                   : SubgroupHeader::SubgroupIdMode::kExplicit;
    sg.header.publisher_priority = header.publisher_priority;
    sg.header.has_extensions = true;
    it = subgroups_.emplace(key, sg).first;
    subgroup_lru_.push_back(key);
    s.stream_owner[sg.stream] = this;
    AddDataStream(sg.stream);
    s.conn->SetStreamPriority(sg.stream, StreamPriority(filter_.subscriber_priority,
                                                        header.publisher_priority, header.group));
    ++streams_opened_;
    ++s.stats.subgroup_streams_opened;
    s.SendOnStream(sg.stream, SerializeSubgroupHeader(sg.header), false);
  }
  OpenSubgroup& sg = it->second;
  if (sg.last_object && header.object <= *sg.last_object) return;  // ids only increase
  // The payload goes to QUIC's queue straight from the caller's buffer,
  // after its header: one copy fewer than a serialized whole object.
  std::string bytes;
  absl::Status st =
      SerializeSubgroupObjectHeader(sg.header, sg.last_object, header, payload.bytes, &bytes);
  if (!st.ok()) return;
  sg.last_object = header.object;
  ++s.stats.objects_sent;
  s.stats.bytes_sent += payload.bytes.size();
  bool ends = header.status == ObjectStatus::kEndOfGroup ||
              header.status == ObjectStatus::kEndOfTrack;
  if (payload.bytes.empty()) {
    s.SendOnStream(sg.stream, bytes, ends);
  } else {
    s.SendOnStream(sg.stream, bytes, false);
    s.SendPayloadOnStream(sg.stream, payload, ends);
  }
  if (ends && session_ != nullptr) {
    s.stream_owner.erase(sg.stream);
    subgroup_lru_.remove(key);
    subgroups_.erase(it);
  }
}

void DownstreamImpl::SendFetchObject(const ObjectHeader& header,
                                     const quic::SharedBytes& payload) {
  SessionImpl& s = *session_;
  if (fetch_stream_ < 0) {
    absl::StatusOr<int64_t> stream = s.OpenDataStream();
    if (!stream.ok()) {
      OnDone(absl::ResourceExhaustedError(std::string(stream.status().message())));
      return;
    }
    fetch_stream_ = *stream;
    s.stream_owner[fetch_stream_] = this;
    AddDataStream(fetch_stream_);
    s.conn->SetStreamPriority(fetch_stream_, StreamPriority(filter_.subscriber_priority,
                                                            header.publisher_priority, 0));
    s.SendOnStream(fetch_stream_, SerializeFetchHeader(request_id_), false);
  }
  std::string bytes;
  if (!SerializeFetchObjectHeader(header, payload.bytes, &bytes).ok()) return;
  ++s.stats.objects_sent;
  s.stats.bytes_sent += payload.bytes.size();
  s.SendOnStream(fetch_stream_, bytes, false);
  s.SendPayloadOnStream(fetch_stream_, payload, false);
}

void DownstreamImpl::AddDataStream(int64_t stream) {
  PruneDataStreams();
  data_streams_.push_back(stream);
}

void DownstreamImpl::PruneDataStreams() {
  if (session_ == nullptr || session_->conn == nullptr) {
    data_streams_.clear();
    return;
  }
  SessionImpl& s = *session_;
  data_streams_.erase(
      std::remove_if(data_streams_.begin(), data_streams_.end(),
                     [&](int64_t id) {
                       auto owner = s.stream_owner.find(id);
                       bool open = owner != s.stream_owner.end() && owner->second == this;
                       return !open && s.conn->QueuedBytes(id) == 0;
                     }),
      data_streams_.end());
}

size_t DownstreamImpl::queued_bytes() const {
  if (session_ == nullptr || session_->conn == nullptr) return 0;
  size_t n = 0;
  for (int64_t id : data_streams_) n += session_->conn->QueuedBytes(id);
  return n;
}

void DownstreamImpl::WhenQueuedBelow(size_t low_water, std::function<void()> cb) {
  if (session_ == nullptr || cancelled_ || finished_) return;
  low_water_ = low_water;
  const bool armed = on_below_ != nullptr;
  on_below_ = std::move(cb);
  if (!armed) session_->drain_waiters.push_back(request_id_);
  // At once if already low, but from the loop, like a drain.
  std::weak_ptr<DownstreamImpl> weak = weak_from_this();
  session_->loop->Post([weak] {
    if (auto self = weak.lock()) self->OnStreamDrained();
  });
}

void DownstreamImpl::OnStreamDrained() {
  if (on_below_ == nullptr || session_ == nullptr || cancelled_ || finished_) return;
  PruneDataStreams();
  if (queued_bytes() > low_water_) return;
  std::function<void()> cb = std::move(on_below_);
  on_below_ = nullptr;
  auto& w = session_->drain_waiters;
  w.erase(std::remove(w.begin(), w.end(), request_id_), w.end());
  cb();
}

void DownstreamImpl::FinishSubgroup(
    std::map<std::pair<uint64_t, uint64_t>, OpenSubgroup>::iterator it) {
  if (it == subgroups_.end()) return;
  int64_t stream = it->second.stream;
  subgroup_lru_.remove(it->first);
  subgroups_.erase(it);
  session_->stream_owner.erase(stream);
  session_->SendOnStream(stream, std::string(), /*fin=*/true);
}

void DownstreamImpl::OnDone(const absl::Status& status) {
  if (session_ == nullptr || finished_) return;
  SessionImpl& s = *session_;
  if (!accepted_) {
    Reject(status.ok() ? kErrNoObjects : kErrInternal,
           status.ok() ? "no objects" : std::string(status.message()));
    return;
  }
  if (kind_ == Kind::kFetch) {
    if (!status.ok()) {
      if (fetch_stream_ >= 0 && s.conn) s.conn->ResetStream(fetch_stream_, kResetInternalError);
    } else {
      if (fetch_stream_ < 0) {
        absl::StatusOr<int64_t> stream = s.OpenDataStream();
        if (stream.ok()) {
          fetch_stream_ = *stream;
          s.SendOnStream(fetch_stream_, SerializeFetchHeader(request_id_), false);
        }
      }
      if (fetch_stream_ >= 0) s.SendOnStream(fetch_stream_, std::string(), true);
    }
    if (fetch_stream_ >= 0) s.stream_owner.erase(fetch_stream_);
    Finish();
    return;
  }
  while (session_ != nullptr && !subgroups_.empty()) FinishSubgroup(subgroups_.begin());
  if (session_ == nullptr) return;
  PublishDone done;
  done.request_id = request_id_;
  done.stream_count = streams_opened_;
  if (status.ok()) {
    done.status_code = kDoneTrackEnded;
    done.reason = "track ended";
  } else {
    done.status_code = status.code() == absl::StatusCode::kCancelled
                           ? kDoneSubscriptionEnded
                           : status.code() == absl::StatusCode::kDataLoss
                                 ? kDoneMalformedTrack
                                 : status.code() == absl::StatusCode::kResourceExhausted
                                       ? kDoneTooFarBehind
                                       : status.code() == absl::StatusCode::kUnavailable
                                             ? kDoneGoingAway  // e.g. our upstream is gone
                                             : kDoneInternalError;
    done.reason = std::string(status.message()).substr(0, 1024);
  }
  s.SendControl(done);
  Finish();
}

void DownstreamImpl::OnStreamStopped(int64_t stream_id) {
  // The subscriber does not want this subgroup (STOP_SENDING): forget it.
  if (session_ == nullptr) return;
  session_->stream_owner.erase(stream_id);
  if (stream_id == fetch_stream_) {
    Cancel(false);
    return;
  }
  for (auto it = subgroups_.begin(); it != subgroups_.end(); ++it) {
    if (it->second.stream == stream_id) {
      subgroup_lru_.remove(it->first);
      subgroups_.erase(it);
      return;
    }
  }
}

void DownstreamImpl::Cancel(bool session_closing) {
  if (cancelled_ || finished_) {
    if (session_closing) session_ = nullptr;
    return;
  }
  cancelled_ = true;
  if (session_ != nullptr && !session_closing) {
    SessionImpl& s = *session_;
    for (auto& [key, sg] : subgroups_) {
      s.stream_owner.erase(sg.stream);
      if (s.conn) s.conn->ResetStream(sg.stream, kResetCancelled);
    }
    if (fetch_stream_ >= 0) {
      s.stream_owner.erase(fetch_stream_);
      if (s.conn) s.conn->ResetStream(fetch_stream_, kResetCancelled);
    }
    subgroups_.clear();
    subgroup_lru_.clear();
    if (kind_ == Kind::kSubscribe && accepted_) {
      // An UNSUBSCRIBE is answered with PUBLISH_DONE (draft-14 "UNSUBSCRIBE").
      s.SendControl(PublishDone{request_id_, kDoneSubscriptionEnded, streams_opened_,
                                "unsubscribed"});
    }
    Finish();
  }
  if (session_closing) {
    finished_ = true;
    session_ = nullptr;
  }
  if (on_cancel_) {
    auto cb = std::move(on_cancel_);
    cb();
  }
}

void DownstreamImpl::Finish() {
  if (finished_) return;
  finished_ = true;
  if (session_ == nullptr) return;
  SessionImpl* s = session_;
  session_ = nullptr;
  auto self = s->downstreams.find(request_id_);
  if (self != s->downstreams.end() && self->second.get() == this) {
    // Released from a posted task: the caller may still be running in us.
    std::shared_ptr<DownstreamImpl> keep = std::move(self->second);
    s->downstreams.erase(self);
    s->loop->Post([keep] {});
  }
  if (!outbound_) s->PeerRequestFinished();
}

// ---- receiving ---------------------------------------------------------------

void SessionImpl::OnUniStreamData(int64_t stream_id, absl::Span<const uint8_t> data,
                                  bool fin) {
  auto it = in_streams.find(stream_id);
  if (it == in_streams.end()) {
    if (IsServerInitiated(stream_id) != !is_server) {
      return;  // our own uni stream cannot carry incoming data
    }
    it = in_streams.emplace(stream_id,
                            std::make_unique<InStream>(this, stream_id, options.limits))
             .first;
  }
  absl::Status s = it->second->OnIngress(data, fin);
  if (!s.ok()) {
    CloseWith(s);
    return;
  }
  if (state != State::kClosed) ReapEndedStream(stream_id);
}

void SessionImpl::OnInStreamEnded(InStream* stream) {
  bool fetch = stream->is_fetch();
  uint64_t key = stream->key();
  bool counted = stream->counted();
  // The stream object is destroyed by the caller's erase, after this returns.
  if (fetch) {
    CompleteOut(key, absl::OkStatus());
    return;
  }
  if (!counted) return;
  auto alias = alias_to_request.find(key);
  if (alias == alias_to_request.end()) return;
  ++out[alias->second].ended_streams;
  MaybeFinishSubscription(alias->second);
}

void SessionImpl::ArmPublishDoneLinger(uint64_t request_id, absl::Duration delay) {
  out[request_id].linger_timer = loop->RunAfter(delay, [this, request_id] {
    auto it = out.find(request_id);
    if (it == out.end()) return;
    it->second.linger_timer = 0;
    // Streams still delivering (a slow or lossy path) keep the subscription,
    // and so does a silence a loss repair may explain: three losses in a
    // row of one packet take 1 + 2 + 4 probe timeouts (a 300 ms RTT path
    // under load: seconds).
    const absl::Duration allowed =
        std::max(options.publish_done_linger,
                 conn == nullptr ? absl::ZeroDuration() : 7 * conn->probe_timeout());
    const absl::Duration idle = absl::Now() - it->second.last_data;
    if (idle < allowed) {
      ArmPublishDoneLinger(request_id, allowed - idle);
      return;
    }
    CompleteOut(request_id, it->second.done_status);
  });
}

void SessionImpl::MaybeFinishSubscription(uint64_t request_id) {
  auto it = out.find(request_id);
  if (it == out.end()) return;
  OutRequest& req = it->second;
  if (req.publish_done && req.ended_streams >= req.expected_streams) {
    CompleteOut(request_id, req.done_status);
  }
}

OutRequest* InStream::Target() {
  SessionImpl& s = *session_;
  if (is_fetch_) {
    auto it = s.out.find(key_);
    return it == s.out.end() ? nullptr : &it->second;
  }
  auto alias = s.alias_to_request.find(key_);
  if (alias == s.alias_to_request.end()) return nullptr;
  auto it = s.out.find(alias->second);
  return it == s.out.end() ? nullptr : &it->second;
}

absl::Status InStream::OnSubgroupHeader(const SubgroupHeader& header) {
  key_ = header.track_alias;
  counted_ = Target() != nullptr;
  return absl::OkStatus();
}

absl::Status InStream::OnFetchHeader(uint64_t request_id) {
  is_fetch_ = true;
  key_ = request_id;
  auto it = session_->out.find(request_id);
  if (it == session_->out.end() || it->second.kind != OutRequest::Kind::kFetch) {
    // A fetch we cancelled may still deliver; anything else is a violation.
    if (request_id >= session_->next_request_id ||
        (request_id % 2) != (session_->next_request_id % 2)) {
      return ProtocolError(TerminationCode::kProtocolViolation,
                           absl::StrCat("FETCH_HEADER for unknown request ", request_id));
    }
  }
  return absl::OkStatus();
}

namespace {

// One payload buffer per loop thread, handed from object to object. A
// fresh string per object grew by doubling (copying as it went) into new
// memory that the allocator took from the kernel and gave back after each
// object (payloads of 128 KiB and more are mmap'ed): page faults and
// zeroing on every object of every receiving session.
thread_local std::string spare_payload;

// Objects up to this size are reserved whole on their first fragment; a
// larger one (the peer says how large) grows as its bytes arrive.
constexpr uint64_t kReserveLimit = 1 << 20;
// The spare buffer kept is at most this large (one huge object does not
// pin its memory).
constexpr size_t kSpareLimit = 4 << 20;

}  // namespace

absl::Status InStream::OnObject(const ObjectHeader& header,
                                absl::Span<const uint8_t> fragment, bool last) {
  OutRequest* target = Target();
  if (target != nullptr) target->last_data = absl::Now();
  if (payload_.empty()) {
    if (payload_.capacity() < spare_payload.capacity()) payload_.swap(spare_payload);
    payload_.reserve(size_t(std::min<uint64_t>(header.payload_length, kReserveLimit)));
  }
  payload_.append(reinterpret_cast<const char*>(fragment.data()), fragment.size());
  if (!last) return absl::OkStatus();
  // Moved out: the consumer may end this stream (and destroy this object).
  std::string payload = std::move(payload_);
  payload_.clear();
  if (target == nullptr) {
    if (is_fetch_) return absl::OkStatus();  // cancelled fetch: drop
    // The SUBSCRIBE_OK carrying this alias may not have arrived yet.
    if (session_->pending_bytes + payload.size() > kMaxPendingBytes) {
      return ProtocolError(TerminationCode::kProtocolViolation,
                           absl::StrCat("objects for unknown track alias ", key_,
                                        " exceed the buffer"));
    }
    session_->pending_bytes += payload.size();
    pending_bytes_ += payload.size();
    pending_.emplace_back(header, std::move(payload));
    return absl::OkStatus();
  }
  ++session_->stats.objects_received;
  session_->stats.bytes_received += payload.size();
  if (target->consumer) target->consumer->OnObject(header, AsBytes(payload));
  if (payload.capacity() > spare_payload.capacity() && payload.capacity() <= kSpareLimit) {
    payload.clear();
    spare_payload.swap(payload);
  }
  return absl::OkStatus();
}

void InStream::FlushPending() {
  if (pending_.empty() && counted_) return;
  OutRequest* target = Target();
  if (target == nullptr) return;
  if (!counted_) counted_ = true;
  auto pending = std::move(pending_);
  pending_.clear();
  session_->pending_bytes -= pending_bytes_;
  pending_bytes_ = 0;
  std::shared_ptr<TrackConsumer> consumer = target->consumer;
  for (auto& [header, payload] : pending) {
    ++session_->stats.objects_received;
    session_->stats.bytes_received += payload.size();
    if (consumer) consumer->OnObject(header, AsBytes(payload));
  }
}

absl::Status InStream::OnStreamEnd() {
  ended_ = true;
  return absl::OkStatus();
}

void SessionImpl::ReapEndedStream(int64_t stream_id) {
  auto it = in_streams.find(stream_id);
  if (it == in_streams.end() || !it->second->ended() || it->second->has_pending()) return;
  std::unique_ptr<InStream> stream = std::move(it->second);
  in_streams.erase(it);
  OnInStreamEnded(stream.get());
}

void SessionImpl::FlushAlias(uint64_t alias) {
  std::vector<int64_t> ids;
  for (auto& [id, stream] : in_streams) {
    if (!stream->is_fetch() && stream->key() == alias) ids.push_back(id);
  }
  for (int64_t id : ids) {
    if (state == State::kClosed) return;
    auto it = in_streams.find(id);
    if (it == in_streams.end()) continue;
    it->second->FlushPending();
    ReapEndedStream(id);
  }
}

}  // namespace kvcast::moqt::internal
