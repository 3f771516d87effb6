// ConnectionImpl: one QUIC connection (ngtcp2_conn + GnuTLS session) behind
// the Connection interface. It does no I/O: its endpoint feeds packets in
// (OnPacket), fires its timer (OnTimer), lets it write (Flush), reads the one
// deadline to re-arm (Expiry) and delivers the close (TakeCloseStatus).
//
// ngtcp2 calls back through one-line trampolines into the On* members, which
// return absl::Status; ToLibError() is the one place that maps a Status onto
// ngtcp2's error code. Application calls (Send, Close, ResetStream, ...) only
// queue work and ask the host for a flush, so a handler may call them from
// inside any callback.
//
// Thread safety: none; the owning endpoint's loop thread only.
#ifndef KVCAST_TRANSPORT_QUIC_CONNECTION_IMPL_H_
#define KVCAST_TRANSPORT_QUIC_CONNECTION_IMPL_H_

#include <ngtcp2/ngtcp2.h>
#include <ngtcp2/ngtcp2_crypto.h>

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "transport/quic/connection.h"
#include "transport/quic/endpoint.h"
#include "transport/quic/stream_send_buffer.h"
#include "transport/quic/tls_context.h"
#include "transport/quic/udp_socket.h"

namespace kvcast::quic {

class ConnectionImpl;

// CLOCK_MONOTONIC in nanoseconds, the clock of ngtcp2 timestamps here.
ngtcp2_tstamp NowTs();

// What a connection needs from the endpoint that owns it.
class ConnectionHost {
 public:
  virtual ~ConnectionHost() = default;
  // Sends datagrams of `segment_size` bytes (the last may be shorter).
  // False when the socket is full: the host kept them and will call Flush()
  // again once writable; stop writing until then.
  virtual bool SendPackets(const SocketAddress& to,
                           absl::Span<const uint8_t> data,
                           size_t segment_size) = 0;
  // The connection queued work outside an I/O event of its own; the host
  // calls Flush() soon, from the loop (never from inside this call).
  virtual void RequestFlush(ConnectionImpl* conn) = 0;
  // `cid` (random bytes, which the host may adjust: a sharded server puts
  // its shard in the first byte) now names `conn`; write its stateless
  // reset token (16 bytes).
  virtual absl::Status OnNewConnectionId(ConnectionImpl* conn, ngtcp2_cid* cid,
                                         uint8_t* token) = 0;
  virtual void OnRetireConnectionId(ConnectionImpl* conn,
                                    const ngtcp2_cid& cid) = 0;
};

struct ConnectionConfig {
  const TransportOptions* transport = nullptr;  // Outlives the connection.
  const TlsContext* tls = nullptr;              // Outlives the connection.
  ConnectionHost* host = nullptr;               // Outlives the connection.
  SocketAddress local;
  SocketAddress remote;
  std::string peer_name;  // Client: name verified in the server certificate.
  ConnectionHandler* handler = nullptr;
};

class ConnectionImpl final : public Connection {
 public:
  enum class State { kHandshake, kOpen, kClosing, kDraining, kDone };

  // Server-side CID length: short-header packets are routed by it.
  static constexpr size_t kCidLength = 18;

  static absl::StatusOr<std::unique_ptr<ConnectionImpl>> NewClient(
      const ConnectionConfig& config);
  // `initial`: header of the client's first Initial packet; `scid`: the CID
  // the server picked; `reset_token`: its stateless reset token.
  static absl::StatusOr<std::unique_ptr<ConnectionImpl>> NewServer(
      const ConnectionConfig& config, const ngtcp2_pkt_hd& initial,
      const ngtcp2_cid& scid, const uint8_t* reset_token);
  ~ConnectionImpl() override;

  // Connection.
  bool is_server() const override { return is_server_; }
  std::string peer_address() const override { return remote_.ToString(); }
  absl::Duration probe_timeout() const override;
  absl::StatusOr<int64_t> OpenBidiStream() override;
  absl::StatusOr<int64_t> OpenUniStream() override;
  using Connection::Send;
  absl::Status Send(int64_t stream_id, absl::Span<const uint8_t> data,
                    bool fin) override;
  absl::Status SendShared(int64_t stream_id, SharedBytes data, bool fin) override;
  size_t QueuedBytes(int64_t stream_id) const override;
  void ResetStream(int64_t stream_id, uint64_t app_error) override;
  void SetStreamPriority(int64_t stream_id, uint64_t priority) override;
  absl::Status SendDatagram(absl::Span<const uint8_t> data) override;
  void Close(uint64_t app_error, absl::string_view reason) override;

  // Endpoint side.
  void set_handler(ConnectionHandler* handler) { handler_ = handler; }
  ConnectionHandler* handler() const { return handler_; }
  State state() const { return state_; }
  // Feeds one received datagram.
  void OnPacket(const SocketAddress& from, absl::Span<const uint8_t> packet);
  // The deadline from Expiry() passed.
  void OnTimer();
  // Writes what is ready (or the CONNECTION_CLOSE of a pending close), then
  // tells the handler which streams drained.
  void Flush();
  // When OnTimer() is due, in NowTs() time; UINT64_MAX for never.
  ngtcp2_tstamp Expiry() const;
  // The close reason, once, right after the connection stopped being usable.
  std::optional<absl::Status> TakeCloseStatus();
  // Server: the accept callback declined; closes with CONNECTION_REFUSED
  // once Flush() runs.
  void Refuse(absl::string_view reason);
  // Endpoint teardown: sends CONNECTION_CLOSE (if still open) and ends.
  void Shutdown(absl::Status status);
  // The network says the peer cannot be reached (ICMP port or host
  // unreachable): ends the connection now with UNAVAILABLE naming `why`,
  // sending nothing, instead of waiting out the idle timeout.
  void PeerUnreachable(absl::string_view why);
  // The idle timeout in force: the shorter of ours and the peer's
  // max_idle_timeout (either may be none).
  absl::Duration NegotiatedIdleTimeout() const;

 private:
  friend struct ConnectionCallbacks;

  struct Stream {
    StreamSendBuffer send;
    bool can_send = true;
    bool fin_queued = false;
    bool fin_sent = false;
    bool blocked = false;   // Stream flow control; cleared on MAX_STREAM_DATA.
    bool in_ready = false;  // In ready_[priority].
    uint64_t priority = 0;  // Lower is sent first (SetStreamPriority).
    bool drained = false;   // Became empty in this Flush().
    bool local_reset = false;
    bool reset_reported = false;
  };
  enum class CloseAction { kSendClose, kDrain, kDrop };
  struct PendingClose {
    absl::Status status;
    ngtcp2_ccerr ccerr;
    CloseAction action;
    std::string reason;  // Backs ccerr.reason.
  };

  ConnectionImpl(const ConnectionConfig& config, bool is_server);
  absl::Status Init(const ngtcp2_cid& dcid, const ngtcp2_cid& scid,
                    uint32_t version, const ngtcp2_pkt_hd* initial,
                    const uint8_t* reset_token);
  ngtcp2_path Path(const SocketAddress& remote);
  absl::StatusOr<int64_t> OpenStream(bool bidi);

  // Callbacks (trampolines in connection_callbacks.cc).
  int ToLibError(absl::Status status);
  absl::Status OnHandshakeCompleted();
  absl::Status OnHandshakeConfirmed();
  absl::Status OnRecvStreamData(uint32_t flags, int64_t stream_id,
                                const uint8_t* data, size_t len);
  absl::Status OnAckedStreamData(int64_t stream_id, uint64_t offset,
                                 uint64_t len);
  absl::Status OnStreamClose(uint32_t flags, int64_t stream_id,
                             uint64_t app_error);
  absl::Status OnStreamReset(int64_t stream_id, uint64_t app_error);
  absl::Status OnExtendMaxStreamData(int64_t stream_id);
  absl::Status OnExtendMaxLocalStreams();
  absl::Status OnRecvDatagram(const uint8_t* data, size_t len);
  absl::Status OnRecvStatelessReset();
  absl::Status OnRecvVersionNegotiation(const uint32_t* versions, size_t n);
  absl::Status OnNewConnectionId(ngtcp2_cid* cid, uint8_t* token,
                                 size_t cidlen);
  absl::Status OnRemoveConnectionId(const ngtcp2_cid* cid);

  // Closing (connection_close.cc).
  void FailWithLibError(int liberr);
  void SetPendingClose(absl::Status status, CloseAction action);
  void ExecutePendingClose();
  absl::Status PeerCloseStatus();
  absl::Status HandshakeFailureStatus();
  void EnterState(State state);

  // Writing.
  void WritePackets();
  ngtcp2_ssize WriteOnePacket(ngtcp2_path* path, ngtcp2_pkt_info* pi,
                              uint8_t* dest, size_t destlen, ngtcp2_tstamp ts);
  Stream* NextReadyStream(int64_t* stream_id);
  void AfterStreamWrite(int64_t stream_id, Stream& s, ngtcp2_ssize ndatalen,
                        bool fin_offered);
  void MarkReady(int64_t stream_id, Stream& s);
  // What Send and SendShared share: checks the stream, appends (`any`: bytes
  // were given), queues FIN, schedules a flush.
  absl::Status Queue(int64_t stream_id, bool fin,
                     absl::FunctionRef<void(StreamSendBuffer&)> append, bool any);
  // Drops the front of the ready queue of `priority`.
  void PopReady(uint64_t priority);
  void ApplyPendingResets();
  bool HandlerLive() const;

  const bool is_server_;
  const TransportOptions& options_;
  const TlsContext& tls_context_;
  ConnectionHost* const host_;
  ConnectionHandler* handler_;
  const std::string peer_name_;
  SocketAddress local_;
  SocketAddress remote_;

  ngtcp2_crypto_conn_ref conn_ref_;
  ngtcp2_conn* conn_ = nullptr;
  std::unique_ptr<TlsSession> tls_;
  State state_ = State::kHandshake;

  absl::flat_hash_map<int64_t, Stream> streams_;
  // A FIFO of stream ids on storage it keeps: the packet loop rotates a
  // bucket once a packet, which must not allocate.
  class ReadyQueue {
   public:
    bool empty() const { return size_ == 0; }
    int64_t front() const { return ids_[head_]; }
    void pop_front() {
      head_ = (head_ + 1) % ids_.size();
      --size_;
    }
    void push_back(int64_t id);

   private:
    std::vector<int64_t> ids_;
    size_t head_ = 0, size_ = 0;
  };
  // Streams with data or FIN to hand to QUIC, by priority (lowest first),
  // round robin within one priority. A bucket is erased when it empties.
  std::map<uint64_t, ReadyQueue> ready_;
  std::vector<int64_t> drained_;
  std::vector<std::pair<int64_t, uint64_t>> pending_resets_;
  std::deque<std::vector<uint8_t>> datagrams_;
  std::vector<uint8_t> tx_buffer_;
  bool send_blocked_ = false;

  // Set by a failing callback; read where ngtcp2 reports the failure.
  absl::Status callback_status_;
  std::optional<uint8_t> callback_alert_;
  bool stateless_reset_ = false;
  std::vector<uint32_t> offered_versions_;

  std::optional<PendingClose> pending_close_;
  std::optional<absl::Status> close_status_;  // Not yet taken.
  bool close_reported_ = false;
  std::vector<uint8_t> close_packet_;
  uint64_t packets_since_close_ = 0;
  ngtcp2_tstamp linger_until_ = UINT64_MAX;
};

// ngtcp2's callback table for ConnectionImpl: one-line trampolines into its
// On* members (connection_callbacks.cc).
struct ConnectionCallbacks {
  static ngtcp2_callbacks Make(bool is_server);
  static ngtcp2_conn* GetConn(ngtcp2_crypto_conn_ref* ref);
};

}  // namespace kvcast::quic

#endif  // KVCAST_TRANSPORT_QUIC_CONNECTION_IMPL_H_
