#include "transport/quic/endpoint_core.h"

#include <utility>

namespace kvcast::quic {

EndpointCore::EndpointCore(EventLoop* loop, const TransportOptions& options,
                           std::unique_ptr<TlsContext> tls)
    : loop_(loop), options_(options), tls_(std::move(tls)) {}

EndpointCore::~EndpointCore() {
  ShutdownAll();
  if (socket_ != nullptr) loop_->RemoveFd(socket_->fd());
}

absl::Status EndpointCore::Start(const SocketAddress& local, bool report_unreachable,
                                 int shards) {
  UdpSocket::Options socket_options;
  socket_options.shards = shards;
  socket_options.batch_send = options_.batch_send;
  socket_options.filter = options_.outgoing_packet_filter;
  socket_options.report_unreachable = report_unreachable;
  absl::StatusOr<std::unique_ptr<UdpSocket>> socket =
      UdpSocket::Bind(local, std::move(socket_options));
  if (!socket.ok()) return socket.status();
  socket_ = std::move(*socket);
  absl::Status st = loop_->AddFd(socket_->fd(), [this] { OnReadable(); });
  if (!st.ok()) socket_.reset();
  return st;
}

ConnectionConfig EndpointCore::MakeConfig(const SocketAddress& remote,
                                          ConnectionHandler* handler) const {
  ConnectionConfig config;
  config.transport = &options_;
  config.tls = tls_.get();
  config.host = const_cast<EndpointCore*>(this);
  config.local = socket_->local_address();
  config.remote = remote;
  config.handler = handler;
  return config;
}

ConnectionImpl* EndpointCore::AddConnection(
    std::unique_ptr<ConnectionImpl> conn) {
  ConnectionImpl* raw = conn.get();
  auto slot = std::make_unique<Slot>();
  slot->conn = std::move(conn);
  slot->serial = next_serial_++;
  slots_[raw] = std::move(slot);
  return raw;
}

size_t EndpointCore::LiveConnections() const {
  size_t n = 0;
  for (const auto& [conn, slot] : slots_) {
    ConnectionImpl::State s = conn->state();
    n += s == ConnectionImpl::State::kHandshake ||
         s == ConnectionImpl::State::kOpen;
  }
  return n;
}

std::vector<ConnectionImpl*> EndpointCore::ConnectionsTo(const std::string& peer_address) const {
  std::vector<ConnectionImpl*> out;
  for (const auto& [conn, slot] : slots_) {
    if (conn->peer_address() == peer_address) out.push_back(conn);
  }
  return out;
}

void EndpointCore::OnReadable() {
  socket_->Receive([this](const SocketAddress& from, absl::Span<uint8_t> data) {
    OnDatagram(from, data);
  });
  // A queued ICMP report is what makes a receive fail: only then is the
  // error queue read (no extra system call per receive otherwise).
  std::vector<std::pair<SocketAddress, int>> unreachable;
  if (int error = socket_->TakeError()) {
    OnSocketError(error);
    socket_->TakeUnreachable([&](const SocketAddress& peer, int error) {
      unreachable.emplace_back(peer, error);
    });
  }
  ServiceTouched();
  if (unreachable.empty()) return;
  // Only after the datagrams are in: a peer that closed before its port
  // went away (its CONNECTION_CLOSE is among them) ends as it said.
  for (const auto& [peer, error] : unreachable) OnPeerUnreachable(peer, error);
  ServiceTouched();
}

void EndpointCore::ServiceTouched() {
  std::vector<ConnectionImpl*> touched;
  touched.swap(touched_);
  touched_set_.clear();
  for (ConnectionImpl* conn : touched) Service(conn);
}

void EndpointCore::Touch(ConnectionImpl* conn) {
  if (touched_set_.insert(conn).second) touched_.push_back(conn);
}

void EndpointCore::Service(ConnectionImpl* conn) {
  auto it = slots_.find(conn);
  if (it == slots_.end()) return;
  Slot& slot = *it->second;
  conn->Flush();
  if (std::optional<absl::Status> status = conn->TakeCloseStatus()) {
    slot.close_status = std::move(*status);
    uint64_t serial = slot.serial;
    loop_->Post([this, conn, serial, alive = alive_] {
      if (*alive) DeliverClose(conn, serial);
    });
  }
  ArmTimer(slot);
  MaybeDestroy(conn);
}

void EndpointCore::DeliverClose(ConnectionImpl* conn, uint64_t serial) {
  auto it = slots_.find(conn);
  if (it == slots_.end() || it->second->serial != serial ||
      it->second->close_delivered) {
    return;
  }
  Slot& slot = *it->second;
  slot.close_delivered = true;
  absl::Status status = std::move(*slot.close_status);
  slot.close_status.reset();
  std::shared_ptr<bool> alive = alive_;
  if (ConnectionHandler* handler = conn->handler()) {
    handler->OnClosed(conn, status);
  }
  if (*alive) MaybeDestroy(conn);  // The handler may have destroyed us.
}

void EndpointCore::MaybeDestroy(ConnectionImpl* conn) {
  auto it = slots_.find(conn);
  if (it == slots_.end()) return;
  Slot& slot = *it->second;
  if (!DestroyFinished() || !slot.close_delivered ||
      conn->state() != ConnectionImpl::State::kDone) {
    return;
  }
  if (slot.timer != 0) loop_->Cancel(slot.timer);
  OnConnectionRemoved(conn);
  flush_requested_.erase(conn);
  slots_.erase(it);
}

void EndpointCore::ArmTimer(Slot& slot) {
  ngtcp2_tstamp expiry = slot.conn->Expiry();
  if (slot.timer != 0 && expiry == slot.armed) return;
  if (slot.timer != 0) loop_->Cancel(slot.timer);
  slot.timer = 0;
  slot.armed = expiry;
  if (expiry == UINT64_MAX) return;
  ngtcp2_tstamp now = NowTs();
  absl::Duration delay =
      absl::Nanoseconds(expiry > now ? static_cast<int64_t>(expiry - now) : 0);
  ConnectionImpl* conn = slot.conn.get();
  slot.timer = loop_->RunAfter(delay, [this, conn] { OnConnectionTimer(conn); });
}

void EndpointCore::OnConnectionTimer(ConnectionImpl* conn) {
  auto it = slots_.find(conn);
  if (it == slots_.end()) return;
  it->second->timer = 0;
  it->second->armed = UINT64_MAX;
  conn->OnTimer();
  Service(conn);
}

void EndpointCore::RequestFlush(ConnectionImpl* conn) {
  if (shutting_down_) return;
  flush_requested_.insert(conn);
  if (flush_posted_) return;
  flush_posted_ = true;
  loop_->Post([this, alive = alive_] {
    if (!*alive) return;
    flush_posted_ = false;
    absl::flat_hash_set<ConnectionImpl*> conns;
    conns.swap(flush_requested_);
    for (ConnectionImpl* conn : conns) Service(conn);
  });
}

bool EndpointCore::SendPackets(const SocketAddress& to,
                               absl::Span<const uint8_t> data,
                               size_t segment_size) {
  size_t sent = blocked_.empty() ? socket_->Send(to, data, segment_size) : 0;
  if (sent == data.size()) return true;
  bool first = blocked_.empty();
  blocked_.push_back(Blocked{
      to, std::vector<uint8_t>(data.begin() + sent, data.end()), segment_size});
  if (first) {
    (void)loop_->WatchWritableOnce(socket_->fd(), [this] { OnWritable(); });
  }
  return false;
}

void EndpointCore::OnWritable() {
  while (!blocked_.empty()) {
    Blocked& b = blocked_.front();
    size_t sent = socket_->Send(b.to, b.data, b.segment_size);
    if (sent < b.data.size()) {
      b.data.erase(b.data.begin(), b.data.begin() + sent);
      (void)loop_->WatchWritableOnce(socket_->fd(), [this] { OnWritable(); });
      return;
    }
    blocked_.pop_front();
  }
  // Connections stopped writing when the socket filled up: resume them all.
  std::vector<ConnectionImpl*> conns;
  for (const auto& [conn, slot] : slots_) conns.push_back(conn);
  for (ConnectionImpl* conn : conns) Service(conn);
}

void EndpointCore::ShutdownAll() {
  if (shutting_down_) return;
  shutting_down_ = true;
  *alive_ = false;  // Posted flushes and closes become no-ops.
  for (auto& [conn, slot] : slots_) {
    if (slot->timer != 0) loop_->Cancel(slot->timer);
    slot->timer = 0;
    conn->Shutdown(absl::CancelledError("endpoint destroyed"));
    std::optional<absl::Status> status = conn->TakeCloseStatus();
    if (slot->close_status.has_value()) status = std::move(slot->close_status);
    if (!slot->close_delivered) {
      slot->close_delivered = true;
      if (ConnectionHandler* handler = conn->handler()) {
        handler->OnClosed(conn, status.value_or(
                                    absl::CancelledError("endpoint destroyed")));
      }
    }
  }
  slots_.clear();
}

}  // namespace kvcast::quic
