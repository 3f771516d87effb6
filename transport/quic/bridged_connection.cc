// BridgedConnection: see bridged_connection.h.
#include "transport/quic/bridged_connection.h"

#include <atomic>
#include <utility>
#include <vector>

#include "absl/synchronization/notification.h"

namespace kvcast::quic {

struct BridgedConnection::Shared {
  EventLoop* io = nullptr;
  EventLoop* owner = nullptr;
  // I/O loop only.
  Connection* conn = nullptr;  // null once closed
  struct Applied {
    uint64_t bytes = 0;  // handed to conn
    bool fin = false;
  };
  absl::flat_hash_map<int64_t, Applied> applied;
  std::unique_ptr<IoHandler> io_handler;
  // Keeps this (and io_handler, which the endpoint borrows) alive until
  // conn's OnClosed has returned.
  std::shared_ptr<Shared> self;
  // Any thread.
  std::atomic<int64_t> probe_timeout_us{0};
  std::atomic<bool> closed{false};  // the I/O loop saw OnClosed
  // Owner loop only.
  BridgedConnection* bridge = nullptr;   // null once destroyed
  ConnectionHandler* handler = nullptr;  // null until attached, and once detached or closed
};

class BridgedConnection::IoHandler final : public ConnectionHandler {
 public:
  explicit IoHandler(Shared* s) : s_(s) {}

  void OnHandshakeDone(Connection* conn) override {
    Note(conn);
    ToOwner([](ConnectionHandler* h, BridgedConnection* b) { h->OnHandshakeDone(b); });
  }
  void OnStreamData(Connection* conn, int64_t id, absl::Span<const uint8_t> data,
                    bool fin) override {
    Note(conn);
    ToOwner([id, bytes = std::vector<uint8_t>(data.begin(), data.end()), fin](
                ConnectionHandler* h, BridgedConnection* b) { h->OnStreamData(b, id, bytes, fin); });
  }
  void OnStreamReset(Connection* conn, int64_t id, uint64_t app_error) override {
    Note(conn);
    s_->applied.erase(id);
    ToOwner([id, app_error](ConnectionHandler* h, BridgedConnection* b) {
      b->queued_.erase(id);
      h->OnStreamReset(b, id, app_error);
    });
  }
  void OnStreamDrained(Connection* conn, int64_t id) override {
    Note(conn);
    ReportDrained(id);
  }
  void OnDatagram(Connection* conn, absl::Span<const uint8_t> data) override {
    Note(conn);
    ToOwner([bytes = std::vector<uint8_t>(data.begin(), data.end())](
                ConnectionHandler* h, BridgedConnection* b) { h->OnDatagram(b, bytes); });
  }
  void OnStreamsAvailable(Connection* conn) override {
    ToOwner([](ConnectionHandler* h, BridgedConnection* b) { h->OnStreamsAvailable(b); });
  }
  void OnClosed(Connection*, const absl::Status& reason) override {
    s_->conn = nullptr;
    s_->closed = true;
    s_->applied.clear();
    ToOwner([s = s_->self, reason](ConnectionHandler* h, BridgedConnection* b) {
      s->handler = nullptr;  // nothing after OnClosed
      h->OnClosed(b, reason);
    });
    // Let go once this call has returned (the endpoint is inside it).
    s_->io->Post([keep = std::move(s_->self)] {});
  }

  // Tells the owner how far `id`'s bytes were handed to QUIC.
  void ReportDrained(int64_t id) {
    auto it = s_->applied.find(id);
    const uint64_t applied = it == s_->applied.end() ? 0 : it->second.bytes;
    if (it != s_->applied.end() && it->second.fin) s_->applied.erase(it);
    ToOwner([id, applied](ConnectionHandler*, BridgedConnection* b) { b->Drained(id, applied); });
  }

 private:
  using Event = std::function<void(ConnectionHandler*, BridgedConnection*)>;
  void Note(Connection* conn) {
    s_->probe_timeout_us.store(absl::ToInt64Microseconds(conn->probe_timeout()),
                               std::memory_order_relaxed);
  }
  // Queues `fn` for the owner. The events of one turn of the I/O loop (a
  // batch of received packets) cross in one task: one post, not one per
  // stream frame.
  void ToOwner(Event fn) {
    pending_.push_back(std::move(fn));
    if (flush_posted_) return;
    flush_posted_ = true;
    s_->io->Post([keep = s_->self] { keep->io_handler->Flush(keep); });
  }
  // `keep`: the task's hold on the shared state (`self` may be gone once
  // the connection closed).
  void Flush(std::shared_ptr<Shared> keep) {
    flush_posted_ = false;
    s_->owner->Post([keep = std::move(keep), events = std::move(pending_)] {
      for (const Event& fn : events) {
        if (keep->bridge == nullptr || keep->handler == nullptr) return;
        fn(keep->handler, keep->bridge);
      }
    });
    pending_.clear();
  }

  Shared* const s_;
  std::vector<Event> pending_;
  bool flush_posted_ = false;
};

ConnectionHandler* BridgedConnection::Accept(Connection* conn, EventLoop* io, EventLoop* owner,
                                             AttachFn attach) {
  auto shared = std::make_shared<Shared>();
  shared->io = io;
  shared->owner = owner;
  shared->conn = conn;
  shared->io_handler = std::make_unique<IoHandler>(shared.get());
  shared->self = shared;
  shared->probe_timeout_us = absl::ToInt64Microseconds(conn->probe_timeout());
  std::shared_ptr<BridgedConnection> bridge(
      new BridgedConnection(shared, conn->is_server(), conn->peer_address()));
  shared->bridge = bridge.get();  // read on the owner loop, after the post below
  owner->Post([shared, bridge = std::move(bridge), attach = std::move(attach)]() mutable {
    BridgedConnection* b = bridge.get();
    shared->handler = attach(std::move(bridge));  // the last holder if refused: closes
    if (shared->handler == nullptr && shared->bridge == b) b->Close(0, "refused");
  });
  return shared->io_handler.get();
}

BridgedConnection::BridgedConnection(std::shared_ptr<Shared> shared, bool is_server,
                                     std::string peer)
    : shared_(std::move(shared)), is_server_(is_server), peer_(std::move(peer)) {}

BridgedConnection::~BridgedConnection() {
  shared_->bridge = nullptr;
  shared_->handler = nullptr;
  if (shared_->closed.load()) return;
  OnIo([](Shared& s) { s.conn->Close(0, "closed by its owner"); });
  FlushToIo();  // no turn of the owner loop comes for this object
}

void BridgedConnection::Detach(const absl::Status& reason) {
  ConnectionHandler* h = shared_->handler;
  shared_->handler = nullptr;
  if (h != nullptr) h->OnClosed(this, reason);
}

absl::Duration BridgedConnection::probe_timeout() const {
  return absl::Microseconds(shared_->probe_timeout_us.load(std::memory_order_relaxed));
}

void BridgedConnection::OnIo(std::function<void(Shared&)> fn) {
  if (shared_->closed.load()) return;
  // As events the other way: the calls of one turn of the owner loop cross
  // in one task, so the I/O loop sends them in full batches.
  to_io_.push_back(std::move(fn));
  if (io_flush_posted_) return;
  io_flush_posted_ = true;
  shared_->owner->Post([weak = weak_from_this()] {
    if (std::shared_ptr<BridgedConnection> self = weak.lock()) self->FlushToIo();
  });
}

void BridgedConnection::FlushToIo() {
  io_flush_posted_ = false;
  if (to_io_.empty()) return;
  shared_->io->Post([s = shared_, calls = std::move(to_io_)] {
    for (const auto& fn : calls) {
      if (s->conn == nullptr) return;
      fn(*s);
    }
  });
  to_io_.clear();
}

absl::StatusOr<int64_t> BridgedConnection::Open(bool uni) {
  struct Result {
    absl::Notification done;
    absl::StatusOr<int64_t> id = absl::FailedPreconditionError("the connection is closed");
  };
  if (shared_->closed.load()) return absl::FailedPreconditionError("the connection is closed");
  auto r = std::make_shared<Result>();
  FlushToIo();  // what was asked before goes first
  shared_->io->Post([s = shared_, r, uni] {
    if (s->conn != nullptr) r->id = uni ? s->conn->OpenUniStream() : s->conn->OpenBidiStream();
    r->done.Notify();
  });
  if (!r->done.WaitForNotificationWithTimeout(absl::Seconds(10))) {
    return absl::DeadlineExceededError("the connection's loop did not answer within 10s");
  }
  return r->id;
}

absl::Status BridgedConnection::Send(int64_t stream_id, absl::Span<const uint8_t> data,
                                     bool fin) {
  auto copy = std::make_shared<const std::vector<uint8_t>>(data.begin(), data.end());
  const absl::Span<const uint8_t> bytes(copy->data(), copy->size());
  return SendShared(stream_id, SharedBytes{std::move(copy), bytes}, fin);
}

absl::Status BridgedConnection::SendShared(int64_t stream_id, SharedBytes data, bool fin) {
  if (shared_->closed.load()) return absl::FailedPreconditionError("the connection is closed");
  Queued& q = queued_[stream_id];
  q.posted += data.bytes.size();
  q.fin = q.fin || fin;
  OnIo([stream_id, data = std::move(data), fin](Shared& s) {
    Shared::Applied& a = s.applied[stream_id];
    a.bytes += data.bytes.size();
    a.fin = a.fin || fin;
    // Refused (the peer reset the stream): as good as handed on.
    if (!s.conn->SendShared(stream_id, data, fin).ok()) s.io_handler->ReportDrained(stream_id);
  });
  return absl::OkStatus();
}

void BridgedConnection::Drained(int64_t stream_id, uint64_t applied) {
  auto it = queued_.find(stream_id);
  if (it == queued_.end()) return;
  it->second.drained = std::max(it->second.drained, applied);
  if (it->second.drained < it->second.posted) return;  // more was sent since
  if (it->second.fin) queued_.erase(it);
  shared_->handler->OnStreamDrained(this, stream_id);
}

size_t BridgedConnection::QueuedBytes(int64_t stream_id) const {
  auto it = queued_.find(stream_id);
  return it == queued_.end() ? 0 : size_t(it->second.posted - it->second.drained);
}

void BridgedConnection::SetStreamPriority(int64_t stream_id, uint64_t priority) {
  OnIo([stream_id, priority](Shared& s) { s.conn->SetStreamPriority(stream_id, priority); });
}

void BridgedConnection::ResetStream(int64_t stream_id, uint64_t app_error) {
  queued_.erase(stream_id);
  OnIo([stream_id, app_error](Shared& s) {
    s.applied.erase(stream_id);
    s.conn->ResetStream(stream_id, app_error);
  });
}

absl::Status BridgedConnection::SendDatagram(absl::Span<const uint8_t> data) {
  if (shared_->closed.load()) return absl::FailedPreconditionError("the connection is closed");
  OnIo([bytes = std::vector<uint8_t>(data.begin(), data.end())](Shared& s) {
    (void)s.conn->SendDatagram(bytes);
  });
  return absl::OkStatus();
}

void BridgedConnection::Close(uint64_t app_error, absl::string_view reason) {
  OnIo([app_error, reason = std::string(reason)](Shared& s) { s.conn->Close(app_error, reason); });
}

}  // namespace kvcast::quic
