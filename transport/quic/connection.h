// A QUIC connection (ngtcp2 0.12 + GnuTLS, TLS 1.3, ALPN from options) as
// seen by an application protocol such as MoQT.
//
// The connection does no I/O of its own: its Endpoint (client or server)
// owns the UDP socket on an EventLoop, feeds packets in, writes packets out
// and re-arms one timer from the connection's expiry after every event.
//
// Thread safety: none. A Connection and its handler live on the loop thread
// of the endpoint that created it; call every method there.
//
// Ownership: the endpoint owns the Connection. The pointer stays valid until
// the handler's OnClosed() returns; do not use it afterwards.
#ifndef KVCAST_TRANSPORT_QUIC_CONNECTION_H_
#define KVCAST_TRANSPORT_QUIC_CONNECTION_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "transport/quic/shared_bytes.h"

namespace kvcast::quic {

class Connection;

// Events of one connection, delivered on the loop thread. The handler is
// borrowed: it must outlive the connection (until OnClosed returns).
class ConnectionHandler {
 public:
  virtual ~ConnectionHandler() = default;
  // TLS handshake finished; streams may be opened. For a client this is
  // where the application starts.
  virtual void OnHandshakeDone(Connection* conn) = 0;
  // Bytes that arrived in order on `stream_id` (a peer-opened stream shows up
  // here first). `fin` marks the end of the stream; it may come with no data.
  virtual void OnStreamData(Connection* conn, int64_t stream_id,
                            absl::Span<const uint8_t> data, bool fin) = 0;
  // The peer reset its sending side (RESET_STREAM) or asked us to stop
  // sending (STOP_SENDING); `app_error` is the peer's application code.
  virtual void OnStreamReset(Connection* conn, int64_t stream_id,
                             uint64_t app_error) {}
  // All data queued on `stream_id` so far has been handed to QUIC (not
  // necessarily acknowledged): a producer may queue more.
  virtual void OnStreamDrained(Connection* conn, int64_t stream_id) {}
  // A QUIC DATAGRAM frame.
  virtual void OnDatagram(Connection* conn, absl::Span<const uint8_t> data) {}
  // The peer raised how many streams we may open (MAX_STREAMS): an
  // OpenBidiStream/OpenUniStream that returned RESOURCE_EXHAUSTED may now
  // succeed. (Added with the ngtcp2 implementation.)
  virtual void OnStreamsAvailable(Connection* conn) {}
  // The connection is gone: graceful close by either side (OK if the
  // application error code was 0, else an error carrying the code and reason
  // phrase), idle timeout (DEADLINE_EXCEEDED), handshake failure or
  // certificate rejection (UNAVAILABLE / UNAUTHENTICATED), stateless reset or
  // peer loss (UNAVAILABLE). Called exactly once.
  virtual void OnClosed(Connection* conn, const absl::Status& reason) = 0;
};

class Connection {
 public:
  virtual ~Connection() = default;

  virtual bool is_server() const = 0;
  // Peer address as "ip:port".
  virtual std::string peer_address() const = 0;
  // The current probe timeout (RFC 9002: smoothed RTT + 4 x RTT variance +
  // max ack delay): how long a lost packet may go unrepaired, doubling with
  // each consecutive loss. Zero when not known.
  virtual absl::Duration probe_timeout() const { return absl::ZeroDuration(); }

  // Opens a stream. RESOURCE_EXHAUSTED while the peer's stream limit is
  // reached; FAILED_PRECONDITION before the handshake or after close.
  virtual absl::StatusOr<int64_t> OpenBidiStream() = 0;
  virtual absl::StatusOr<int64_t> OpenUniStream() = 0;

  // Queues `data` (copied) on the stream, then FIN if `fin`. Data is sent as
  // flow control allows; OnStreamDrained fires when the queue empties.
  // NOT_FOUND for an unknown or already finished stream.
  virtual absl::Status Send(int64_t stream_id, absl::Span<const uint8_t> data,
                            bool fin) = 0;
  absl::Status Send(int64_t stream_id, absl::string_view data, bool fin) {
    return Send(stream_id,
                absl::Span<const uint8_t>(
                    reinterpret_cast<const uint8_t*>(data.data()), data.size()),
                fin);
  }
  // As Send, without copying: the stream holds `data.owner` until QUIC no
  // longer needs the bytes (acknowledged, reset, or the connection gone).
  virtual absl::Status SendShared(int64_t stream_id, SharedBytes data, bool fin) = 0;
  // Bytes queued on the stream and not yet handed to QUIC.
  virtual size_t QueuedBytes(int64_t stream_id) const = 0;
  // Orders sending between streams: data of the lowest priority value with
  // anything queued goes first; equal priorities share round robin. Streams
  // start at 0 (first), which suits a control stream.
  virtual void SetStreamPriority(int64_t stream_id, uint64_t priority) = 0;
  // Abandons a stream in both directions (RESET_STREAM + STOP_SENDING) with
  // an application error code; queued data is dropped.
  virtual void ResetStream(int64_t stream_id, uint64_t app_error) = 0;
  // Sends one DATAGRAM frame. RESOURCE_EXHAUSTED if larger than the peer
  // allows; FAILED_PRECONDITION if DATAGRAM was not negotiated.
  virtual absl::Status SendDatagram(absl::Span<const uint8_t> data) = 0;
  // Graceful close: CONNECTION_CLOSE with an application error code and
  // reason; OnClosed follows (from the loop, not from inside this call).
  virtual void Close(uint64_t app_error, absl::string_view reason) = 0;
};

}  // namespace kvcast::quic

#endif  // KVCAST_TRANSPORT_QUIC_CONNECTION_H_
