// BridgedConnection: a Connection used from another loop than the one its
// endpoint runs it on.
//
// A ShardedServer runs each connection on one of several I/O loops; the
// application (a MoQT session and the relay it serves) runs on one owner
// loop. The bridge has two halves: on the I/O loop, the ConnectionHandler
// the server is given, which passes every event to the owner loop; on the
// owner loop, this Connection, which passes every call to the I/O loop.
// Each side gathers what one turn of its loop produced and hands it over in
// one task (per stream frame and per send, the hand-offs cost more than
// they carried: docs/benchmarks.md). Events keep their order, and so do
// calls.
//
// What crosses: received stream data and datagrams are copied once; bytes
// sent with SendShared cross without a copy (Send copies them once). The
// owner half keeps its own count of each stream's queued bytes (posted, less
// what the I/O loop has handed to QUIC by its last OnStreamDrained), so
// QueuedBytes needs no round trip. Opening a stream does need one: the owner
// loop waits for the I/O loop's answer (the stream id, or the peer's limit).
// Errors of calls that return a Status are the I/O loop's where they can be
// known ahead (a closed connection); a send the I/O loop then refuses (a
// stream the peer reset) counts as handed on, and the reset arrives as
// OnStreamReset.
//
// Thread safety: Accept on the I/O loop; everything else on the owner loop.
// The owner loop must never be the I/O loop (use the connection directly
// there).
#ifndef KVCAST_TRANSPORT_QUIC_BRIDGED_CONNECTION_H_
#define KVCAST_TRANSPORT_QUIC_BRIDGED_CONNECTION_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "transport/quic/connection.h"
#include "transport/quic/event_loop.h"

namespace kvcast::quic {

class BridgedConnection final : public Connection,
                                public std::enable_shared_from_this<BridgedConnection> {
 public:
  // On `io`'s thread (e.g. in a ShardedServer's AcceptFn): bridges `conn`
  // to `owner` and returns the handler for `conn` (it lives until conn's
  // OnClosed returns). `attach` runs on the owner loop before any event is
  // delivered: it keeps the bridge (the owner half; dropping it closes the
  // connection) and returns its handler (borrowed: it must outlive the
  // bridge or Detach it first); null closes the connection.
  using AttachFn = std::function<ConnectionHandler*(std::shared_ptr<BridgedConnection>)>;
  static ConnectionHandler* Accept(Connection* conn, EventLoop* io, EventLoop* owner,
                                   AttachFn attach);
  ~BridgedConnection() override;

  // The handler gets OnClosed(`reason`) now unless it already had it, and
  // no event after (its owner is going away). The connection itself closes
  // when its endpoint does.
  void Detach(const absl::Status& reason);

  // Connection
  bool is_server() const override { return is_server_; }
  std::string peer_address() const override { return peer_; }
  absl::Duration probe_timeout() const override;
  absl::StatusOr<int64_t> OpenBidiStream() override { return Open(/*uni=*/false); }
  absl::StatusOr<int64_t> OpenUniStream() override { return Open(/*uni=*/true); }
  absl::Status Send(int64_t stream_id, absl::Span<const uint8_t> data, bool fin) override;
  absl::Status SendShared(int64_t stream_id, SharedBytes data, bool fin) override;
  size_t QueuedBytes(int64_t stream_id) const override;
  void SetStreamPriority(int64_t stream_id, uint64_t priority) override;
  void ResetStream(int64_t stream_id, uint64_t app_error) override;
  absl::Status SendDatagram(absl::Span<const uint8_t> data) override;
  void Close(uint64_t app_error, absl::string_view reason) override;

 private:
  struct Shared;
  class IoHandler;
  BridgedConnection(std::shared_ptr<Shared> shared, bool is_server, std::string peer);
  absl::StatusOr<int64_t> Open(bool uni);
  // Runs `fn` on the I/O loop while the connection is open there: queued,
  // and sent with the rest of this turn's calls by FlushToIo.
  void OnIo(std::function<void(Shared&)> fn);
  void FlushToIo();
  // The I/O loop handed `stream_id`'s bytes up to `applied` to QUIC.
  void Drained(int64_t stream_id, uint64_t applied);

  const std::shared_ptr<Shared> shared_;
  const bool is_server_;
  const std::string peer_;
  struct Queued {
    uint64_t posted = 0;   // bytes passed to Send/SendShared
    uint64_t drained = 0;  // of those, handed to QUIC by the last report
    bool fin = false;
  };
  absl::flat_hash_map<int64_t, Queued> queued_;
  std::vector<std::function<void(Shared&)>> to_io_;
  bool io_flush_posted_ = false;
};

}  // namespace kvcast::quic

#endif  // KVCAST_TRANSPORT_QUIC_BRIDGED_CONNECTION_H_
