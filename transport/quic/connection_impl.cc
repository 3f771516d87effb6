#include "transport/quic/connection_impl.h"

#include <gnutls/crypto.h>
#include <time.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "transport/quic/datagram_plan.h"

namespace kvcast::quic {
namespace {

constexpr size_t kMaxBurst = 64;         // Packets written per Flush().
constexpr size_t kMaxStreamVecs = 16;    // Chunks offered per STREAM frame.
constexpr size_t kMaxQueuedDatagrams = 1024;
// Short header (1 + CID + 4-byte packet number) + AEAD tag + DATAGRAM frame
// header: what a DATAGRAM payload must leave free in a minimum-size packet.
constexpr size_t kDatagramOverhead = 1 + 20 + 4 + 16 + 1 + 2;

// For settings, where UINT64_MAX means "never" (also for zero: a zero
// handshake timeout is taken as "none", not "fail at once").
ngtcp2_duration ToNgtcp2(absl::Duration d) {
  if (d == absl::InfiniteDuration() || d <= absl::ZeroDuration()) {
    return UINT64_MAX;
  }
  return static_cast<ngtcp2_duration>(absl::ToInt64Nanoseconds(d));
}

// For the max_idle_timeout transport parameter, where 0 means "none" (it is
// a varint on the wire: UINT64_MAX would not encode).
ngtcp2_duration IdleTimeoutParam(absl::Duration d) {
  if (d == absl::InfiniteDuration() || d <= absl::ZeroDuration()) return 0;
  return static_cast<ngtcp2_duration>(absl::ToInt64Nanoseconds(d));
}

void LogPrintf(void*, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
  std::fputc('\n', stderr);
}

absl::StatusOr<ngtcp2_cid> RandomCid(size_t len) {
  ngtcp2_cid cid;
  cid.datalen = len;
  if (gnutls_rnd(GNUTLS_RND_RANDOM, cid.data, len) != 0) {
    return absl::InternalError("gnutls_rnd failed");
  }
  return cid;
}

SocketAddress FromNgtcp2(const ngtcp2_addr& addr) {
  SocketAddress out;
  std::memcpy(&out.storage, addr.addr, addr.addrlen);
  out.len = addr.addrlen;
  return out;
}

}  // namespace

ngtcp2_tstamp NowTs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<ngtcp2_tstamp>(ts.tv_sec) * NGTCP2_SECONDS + ts.tv_nsec;
}

ConnectionImpl::ConnectionImpl(const ConnectionConfig& config, bool is_server)
    : is_server_(is_server),
      options_(*config.transport),
      tls_context_(*config.tls),
      host_(config.host),
      handler_(config.handler),
      peer_name_(config.peer_name),
      local_(config.local),
      remote_(config.remote) {
  conn_ref_.get_conn = ConnectionCallbacks::GetConn;
  conn_ref_.user_data = this;
}

ConnectionImpl::~ConnectionImpl() {
  if (conn_ != nullptr) ngtcp2_conn_del(conn_);
}

absl::StatusOr<std::unique_ptr<ConnectionImpl>> ConnectionImpl::NewClient(
    const ConnectionConfig& config) {
  std::unique_ptr<ConnectionImpl> conn(new ConnectionImpl(config, false));
  absl::StatusOr<ngtcp2_cid> dcid = RandomCid(kCidLength);
  absl::StatusOr<ngtcp2_cid> scid = RandomCid(kCidLength);
  if (!dcid.ok()) return dcid.status();
  if (!scid.ok()) return scid.status();
  absl::Status st =
      conn->Init(*dcid, *scid, NGTCP2_PROTO_VER_V1, nullptr, nullptr);
  if (!st.ok()) return st;
  return conn;
}

absl::StatusOr<std::unique_ptr<ConnectionImpl>> ConnectionImpl::NewServer(
    const ConnectionConfig& config, const ngtcp2_pkt_hd& initial,
    const ngtcp2_cid& scid, const uint8_t* reset_token) {
  std::unique_ptr<ConnectionImpl> conn(new ConnectionImpl(config, true));
  absl::Status st =
      conn->Init(initial.scid, scid, initial.version, &initial, reset_token);
  if (!st.ok()) return st;
  return conn;
}

ngtcp2_path ConnectionImpl::Path(const SocketAddress& remote) {
  ngtcp2_path path{};
  path.local.addr = const_cast<sockaddr*>(local_.sa());
  path.local.addrlen = local_.len;
  path.remote.addr = const_cast<sockaddr*>(remote.sa());
  path.remote.addrlen = remote.len;
  return path;
}

absl::Status ConnectionImpl::Init(const ngtcp2_cid& dcid,
                                  const ngtcp2_cid& scid, uint32_t version,
                                  const ngtcp2_pkt_hd* initial,
                                  const uint8_t* reset_token) {
  ngtcp2_settings settings;
  ngtcp2_settings_default(&settings);
  settings.initial_ts = NowTs();
  settings.handshake_timeout = ToNgtcp2(options_.handshake_timeout);
  settings.max_window = options_.max_data;
  settings.max_stream_window = options_.max_stream_data;
  if (std::getenv("KVCAST_QUIC_LOG") != nullptr) settings.log_printf = LogPrintf;
  // Kept until ngtcp2_conn_*_new has copied it.
  const DatagramPlan datagrams =
      PlanDatagrams(options_.max_udp_payload, LookUpPath(remote_), remote_.family());
  settings.max_tx_udp_payload_size = datagrams.max_payload;
  settings.no_tx_udp_payload_size_shaping = datagrams.fixed ? 1 : 0;
  if (!datagrams.probes.empty()) {
    settings.pmtud_probes = datagrams.probes.data();
    settings.pmtud_probeslen = datagrams.probes.size();
  }

  ngtcp2_transport_params params;
  ngtcp2_transport_params_default(&params);
  params.initial_max_stream_data_bidi_local = options_.max_stream_data;
  params.initial_max_stream_data_bidi_remote = options_.max_stream_data;
  params.initial_max_stream_data_uni = options_.max_stream_data;
  params.initial_max_data = options_.max_data;
  params.initial_max_streams_bidi = options_.max_streams_bidi;
  params.initial_max_streams_uni = options_.max_streams_uni;
  params.max_idle_timeout = IdleTimeoutParam(options_.idle_timeout);
  params.max_datagram_frame_size = options_.max_datagram_frame_size;
  params.max_udp_payload_size = kMaxUdpDatagram;
  params.active_connection_id_limit = 4;
  if (is_server_) {
    params.original_dcid = initial->dcid;
    params.original_dcid_present = 1;
    params.stateless_reset_token_present = 1;
    std::memcpy(params.stateless_reset_token, reset_token,
                NGTCP2_STATELESS_RESET_TOKENLEN);
  }

  ngtcp2_callbacks callbacks = ConnectionCallbacks::Make(is_server_);
  ngtcp2_path path = Path(remote_);
  int rv = is_server_
               ? ngtcp2_conn_server_new(&conn_, &dcid, &scid, &path, version,
                                        &callbacks, &settings, &params,
                                        nullptr, this)
               : ngtcp2_conn_client_new(&conn_, &dcid, &scid, &path, version,
                                        &callbacks, &settings, &params,
                                        nullptr, this);
  if (rv != 0) {
    conn_ = nullptr;
    return absl::InternalError(
        absl::StrCat("ngtcp2 connection setup: ", ngtcp2_strerror(rv)));
  }
  absl::StatusOr<std::unique_ptr<TlsSession>> tls =
      tls_context_.NewSession(&conn_ref_, peer_name_);
  if (!tls.ok()) return tls.status();
  tls_ = std::move(*tls);
  ngtcp2_conn_set_tls_native_handle(conn_, tls_->native());
  if (options_.keep_alive > absl::ZeroDuration() &&
      options_.keep_alive != absl::InfiniteDuration()) {
    ngtcp2_conn_set_keep_alive_timeout(conn_, ToNgtcp2(options_.keep_alive));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ConnectionImpl::OpenStream(bool bidi) {
  if (state_ != State::kOpen || pending_close_.has_value()) {
    return absl::FailedPreconditionError(
        state_ == State::kHandshake ? "handshake not finished"
                                    : "connection closed");
  }
  int64_t id = -1;
  int rv = bidi ? ngtcp2_conn_open_bidi_stream(conn_, &id, nullptr)
                : ngtcp2_conn_open_uni_stream(conn_, &id, nullptr);
  if (rv == NGTCP2_ERR_STREAM_ID_BLOCKED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("peer's ", bidi ? "bidirectional" : "unidirectional",
                     " stream limit reached"));
  }
  if (rv != 0) {
    return absl::InternalError(
        absl::StrCat("cannot open stream: ", ngtcp2_strerror(rv)));
  }
  streams_[id].can_send = true;
  return id;
}

absl::StatusOr<int64_t> ConnectionImpl::OpenBidiStream() {
  return OpenStream(true);
}

absl::StatusOr<int64_t> ConnectionImpl::OpenUniStream() {
  return OpenStream(false);
}

absl::Status ConnectionImpl::Send(int64_t stream_id,
                                  absl::Span<const uint8_t> data, bool fin) {
  return Queue(stream_id, fin, [&](StreamSendBuffer& b) { b.Append(data); }, !data.empty());
}

absl::Status ConnectionImpl::SendShared(int64_t stream_id, SharedBytes data, bool fin) {
  const bool any = !data.bytes.empty();
  return Queue(stream_id, fin, [&](StreamSendBuffer& b) { b.AppendShared(std::move(data)); },
               any);
}

absl::Status ConnectionImpl::Queue(int64_t stream_id, bool fin,
                                   absl::FunctionRef<void(StreamSendBuffer&)> append,
                                   bool any) {
  if (state_ != State::kOpen || pending_close_.has_value()) {
    return absl::FailedPreconditionError("connection is not open");
  }
  auto it = streams_.find(stream_id);
  // A peer's unidirectional stream is receive-only, also once it is closed.
  if (it == streams_.end() && !ngtcp2_is_bidi_stream(stream_id) &&
      !ngtcp2_conn_is_local_stream(conn_, stream_id)) {
    return absl::FailedPreconditionError(absl::StrCat("stream ", stream_id, " is receive-only"));
  }
  if (it == streams_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown stream ", stream_id));
  }
  Stream& s = it->second;
  if (!s.can_send) {
    return absl::FailedPreconditionError(
        absl::StrCat("stream ", stream_id, " is receive-only"));
  }
  if (s.fin_queued || s.local_reset) {
    return absl::NotFoundError(
        absl::StrCat("stream ", stream_id, " already finished"));
  }
  append(s.send);
  s.fin_queued = fin;
  if (any || fin) {
    MarkReady(stream_id, s);
    host_->RequestFlush(this);
  }
  return absl::OkStatus();
}

size_t ConnectionImpl::QueuedBytes(int64_t stream_id) const {
  auto it = streams_.find(stream_id);
  return it == streams_.end() ? 0 : it->second.send.unsent();
}

void ConnectionImpl::ResetStream(int64_t stream_id, uint64_t app_error) {
  auto it = streams_.find(stream_id);
  if (it == streams_.end() || it->second.local_reset) return;
  if (state_ != State::kOpen || pending_close_.has_value()) return;
  Stream& s = it->second;
  s.local_reset = true;
  s.send.DropUnsent();
  // ngtcp2_conn_shutdown_stream may free the stream: never call it from
  // inside a callback that is processing that stream. Flush() applies it.
  pending_resets_.emplace_back(stream_id, app_error);
  host_->RequestFlush(this);
}

void ConnectionImpl::ApplyPendingResets() {
  std::vector<std::pair<int64_t, uint64_t>> resets;
  resets.swap(pending_resets_);
  for (const auto& [id, code] : resets) {
    ngtcp2_conn_shutdown_stream(conn_, /*flags=*/0, id, code);
  }
}

absl::Status ConnectionImpl::SendDatagram(absl::Span<const uint8_t> data) {
  if (state_ != State::kOpen || pending_close_.has_value()) {
    return absl::FailedPreconditionError("connection is not open");
  }
  const ngtcp2_transport_params* remote =
      ngtcp2_conn_get_remote_transport_params(conn_);
  if (options_.max_datagram_frame_size == 0 || remote == nullptr ||
      remote->max_datagram_frame_size == 0) {
    return absl::FailedPreconditionError("DATAGRAM extension not negotiated");
  }
  // The frame (type + length + payload) must fit the peer's limit, and the
  // payload must fit a minimum-size packet: DATAGRAMs are never split.
  if (remote->max_datagram_frame_size <= 3) {
    return absl::FailedPreconditionError("peer accepts no DATAGRAM payload");
  }
  size_t limit = std::min<uint64_t>(remote->max_datagram_frame_size - 3,
                                    NGTCP2_MAX_UDP_PAYLOAD_SIZE -
                                        kDatagramOverhead);
  if (data.size() > limit) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "datagram of ", data.size(), " bytes exceeds the limit of ", limit));
  }
  if (datagrams_.size() >= kMaxQueuedDatagrams) {
    return absl::ResourceExhaustedError("datagram queue full");
  }
  datagrams_.emplace_back(data.begin(), data.end());
  host_->RequestFlush(this);
  return absl::OkStatus();
}

void ConnectionImpl::OnPacket(const SocketAddress& from,
                              absl::Span<const uint8_t> packet) {
  switch (state_) {
    case State::kDone:
    case State::kDraining:
      return;
    case State::kClosing:
      // Answer the peer with our CONNECTION_CLOSE again, exponentially less
      // often, until the closing period ends.
      ++packets_since_close_;
      if ((packets_since_close_ & (packets_since_close_ - 1)) == 0 &&
          !close_packet_.empty()) {
        host_->SendPackets(remote_, close_packet_, close_packet_.size());
      }
      return;
    default:
      break;
  }
  ngtcp2_path path = Path(from);
  ngtcp2_pkt_info pi{};
  int rv = ngtcp2_conn_read_pkt(conn_, &path, &pi, packet.data(),
                                packet.size(), NowTs());
  if (rv != 0) FailWithLibError(rv);
}

void ConnectionImpl::OnTimer() {
  if (state_ == State::kClosing || state_ == State::kDraining) {
    if (NowTs() >= linger_until_) EnterState(State::kDone);
    return;
  }
  if (state_ == State::kDone) return;
  int rv = ngtcp2_conn_handle_expiry(conn_, NowTs());
  if (rv != 0) FailWithLibError(rv);
}

ngtcp2_tstamp ConnectionImpl::Expiry() const {
  switch (state_) {
    case State::kClosing:
    case State::kDraining:
      return linger_until_;
    case State::kDone:
      return UINT64_MAX;
    default:
      return ngtcp2_conn_get_expiry(conn_);
  }
}

void ConnectionImpl::Flush() {
  if (state_ != State::kHandshake && state_ != State::kOpen) return;
  if (!pending_close_.has_value()) {
    ApplyPendingResets();
    WritePackets();
  }
  if (pending_close_.has_value()) {
    ExecutePendingClose();
    return;
  }
  std::vector<int64_t> drained;
  drained.swap(drained_);
  for (int64_t id : drained) {
    auto it = streams_.find(id);
    if (it == streams_.end()) continue;
    it->second.drained = false;
    if (it->second.send.unsent() == 0 && HandlerLive()) {
      handler_->OnStreamDrained(this, id);
    }
  }
}

void ConnectionImpl::MarkReady(int64_t stream_id, Stream& s) {
  if (s.in_ready || s.blocked) return;
  s.in_ready = true;
  ready_[s.priority].push_back(stream_id);
}

void ConnectionImpl::ReadyQueue::push_back(int64_t id) {
  if (size_ == ids_.size()) {  // full: unroll into twice the room
    std::vector<int64_t> grown(std::max<size_t>(4, 2 * ids_.size()));
    for (size_t i = 0; i < size_; ++i) grown[i] = ids_[(head_ + i) % ids_.size()];
    ids_.swap(grown);
    head_ = 0;
  }
  ids_[(head_ + size_) % ids_.size()] = id;
  ++size_;
}

void ConnectionImpl::PopReady(uint64_t priority) {
  auto bucket = ready_.find(priority);
  if (bucket == ready_.end()) return;
  if (!bucket->second.empty()) bucket->second.pop_front();
  if (bucket->second.empty()) ready_.erase(bucket);
}

ConnectionImpl::Stream* ConnectionImpl::NextReadyStream(int64_t* stream_id) {
  while (!ready_.empty()) {
    auto& [priority, queue] = *ready_.begin();
    int64_t id = queue.front();
    auto it = streams_.find(id);
    if (it != streams_.end() && it->second.priority == priority) {
      Stream& s = it->second;
      bool pending = s.send.unsent() > 0 || (s.fin_queued && !s.fin_sent);
      if (pending && !s.blocked && !s.local_reset) {
        *stream_id = id;
        return &s;
      }
      s.in_ready = false;
    }
    PopReady(priority);
  }
  return nullptr;
}

void ConnectionImpl::SetStreamPriority(int64_t stream_id, uint64_t priority) {
  auto it = streams_.find(stream_id);
  if (it == streams_.end() || it->second.priority == priority) return;
  Stream& s = it->second;
  if (s.in_ready) {
    // Leave the old queue; NextReadyStream skips entries whose priority no
    // longer matches, so only the new queue holds it.
    s.in_ready = false;
    s.priority = priority;
    MarkReady(stream_id, s);
    return;
  }
  s.priority = priority;
}

void ConnectionImpl::AfterStreamWrite(int64_t stream_id, Stream& s,
                                      ngtcp2_ssize ndatalen, bool fin_offered) {
  // ngtcp2 includes FIN only when it took every byte offered with it.
  uint64_t before = s.send.unsent();
  s.send.MarkSent(static_cast<uint64_t>(ndatalen));
  if (fin_offered && s.send.unsent() == 0) s.fin_sent = true;
  if ((before > 0 || s.fin_sent) && s.send.unsent() == 0 && !s.drained) {
    s.drained = true;
    drained_.push_back(stream_id);
  }
  // Round robin: the stream goes to the back of its bucket if it still has
  // something (the bucket kept: no allocation per packet), else leaves it.
  if ((s.send.unsent() > 0 || (s.fin_queued && !s.fin_sent)) && !s.blocked) {
    auto bucket = ready_.find(s.priority);
    if (bucket != ready_.end() && !bucket->second.empty() &&
        bucket->second.front() == stream_id) {
      bucket->second.pop_front();
      bucket->second.push_back(stream_id);
      return;
    }
  }
  PopReady(s.priority);
  s.in_ready = false;
  if (s.send.unsent() > 0 || (s.fin_queued && !s.fin_sent)) {
    MarkReady(stream_id, s);
  }
}

ngtcp2_ssize ConnectionImpl::WriteOnePacket(ngtcp2_path* path,
                                            ngtcp2_pkt_info* pi, uint8_t* dest,
                                            size_t destlen, ngtcp2_tstamp ts) {
  for (;;) {
    if (!datagrams_.empty() && state_ == State::kOpen) {
      std::vector<uint8_t>& d = datagrams_.front();
      ngtcp2_vec vec{d.data(), d.size()};
      int accepted = 0;
      ngtcp2_ssize n = ngtcp2_conn_writev_datagram(
          conn_, path, pi, dest, destlen, &accepted,
          NGTCP2_WRITE_DATAGRAM_FLAG_MORE, 0, &vec, 1, ts);
      if (accepted || n == NGTCP2_ERR_INVALID_ARGUMENT) datagrams_.pop_front();
      if (n == NGTCP2_ERR_WRITE_MORE || n == NGTCP2_ERR_INVALID_ARGUMENT) {
        continue;
      }
      return n;  // A full packet, nothing allowed (0), or a fatal error.
    }

    int64_t id = -1;
    Stream* s = NextReadyStream(&id);
    uint64_t priority = s != nullptr ? s->priority : 0;
    ngtcp2_vec vecs[kMaxStreamVecs];
    size_t nvec = 0;
    bool fin_offered = false;
    uint32_t flags = NGTCP2_WRITE_STREAM_FLAG_MORE;
    if (s != nullptr && s->send.unsent() > 0 &&
        ngtcp2_conn_get_max_data_left(conn_) == 0) {
      s = nullptr;  // Connection flow control: only control frames for now.
      id = -1;
    }
    if (s != nullptr) {
      bool covers_all = false;
      nvec = s->send.PeekUnsent(vecs, kMaxStreamVecs, &covers_all);
      if (covers_all && s->fin_queued) {
        flags |= NGTCP2_WRITE_STREAM_FLAG_FIN;
        fin_offered = true;
      }
    }
    ngtcp2_ssize ndatalen = -1;
    ngtcp2_ssize n = ngtcp2_conn_writev_stream(conn_, path, pi, dest, destlen,
                                               &ndatalen, flags, id, vecs,
                                               nvec, ts);
    // Callbacks may have run: look the stream up again.
    auto it = id >= 0 ? streams_.find(id) : streams_.end();
    Stream* stream = it == streams_.end() ? nullptr : &it->second;
    if (n == NGTCP2_ERR_WRITE_MORE) {
      if (stream != nullptr) AfterStreamWrite(id, *stream, ndatalen, fin_offered);
      continue;
    }
    if (n == NGTCP2_ERR_STREAM_DATA_BLOCKED || n == NGTCP2_ERR_STREAM_SHUT_WR ||
        n == NGTCP2_ERR_STREAM_NOT_FOUND) {
      if (stream != nullptr) {
        if (n == NGTCP2_ERR_STREAM_DATA_BLOCKED) {
          stream->blocked = true;
        } else {
          stream->local_reset = true;  // The peer stopped it: nothing to send.
          stream->send.DropUnsent();
        }
        stream->in_ready = false;
      }
      PopReady(priority);
      continue;
    }
    if (n >= 0 && stream != nullptr && ndatalen >= 0) {
      AfterStreamWrite(id, *stream, ndatalen, fin_offered);
    }
    return n;
  }
}

void ConnectionImpl::WritePackets() {
  send_blocked_ = false;
  const size_t max_size = ngtcp2_conn_get_max_tx_udp_payload_size(conn_);
  size_t burst = ngtcp2_conn_get_send_quantum(conn_) / max_size;
  burst = std::clamp<size_t>(burst, 1, kMaxBurst);
  if (tx_buffer_.size() < burst * max_size) tx_buffer_.resize(burst * max_size);

  ngtcp2_path_storage ps;
  ngtcp2_path_storage_zero(&ps);
  ngtcp2_pkt_info pi{};
  const ngtcp2_tstamp ts = NowTs();
  uint8_t* buf = tx_buffer_.data();
  size_t len = 0;
  size_t train_start = 0;
  size_t segment = 0;
  // Datagrams of one size (the last may be shorter) go out as one train.
  auto send_train = [&]() {
    if (len > train_start && !send_blocked_) {
      send_blocked_ = !host_->SendPackets(
          FromNgtcp2(ps.path.remote),
          absl::MakeConstSpan(buf + train_start, len - train_start), segment);
    }
    train_start = len;
    segment = 0;
  };
  for (size_t i = 0; i < burst && !send_blocked_; ++i) {
    ngtcp2_ssize n = WriteOnePacket(&ps.path, &pi, buf + len, max_size, ts);
    if (n < 0) {
      send_train();
      FailWithLibError(static_cast<int>(n));
      return;
    }
    if (n == 0) break;
    size_t size = static_cast<size_t>(n);
    if (segment != 0 && size > segment) send_train();
    if (segment == 0) segment = size;
    len += size;
    if (size < segment) send_train();
  }
  send_train();
  if (len > 0) {
    // ngtcp2 chose the path: after a validated NAT rebinding it is the
    // peer's new address, which CONNECTION_CLOSE must use too.
    remote_ = FromNgtcp2(ps.path.remote);
  }
  ngtcp2_conn_update_pkt_tx_time(conn_, ts);
}

}  // namespace kvcast::quic
