// EndpointCore: what the client and server endpoints share. It owns the UDP
// socket (registered with the loop), the TLS context and the connections, and
// performs all their I/O: it feeds received datagrams in (via the subclass's
// routing), writes their packets out, re-arms each connection's one timer
// from its expiry after every event, and delivers OnClosed.
//
// Event rules that make handler re-entrancy safe:
//  * packets are written after a read batch or a timer, never from inside a
//    handler call; Send/Close/... from a handler only request a flush, which
//    runs from a posted task;
//  * OnClosed is delivered from a posted task and nothing of the endpoint is
//    touched after it returns, so a handler may destroy the endpoint there;
//  * finished connections are destroyed only after OnClosed returned.
// Destroying the endpoint from any other handler callback is not supported:
// post a task for it.
//
// Thread safety: none; the loop thread only.
#ifndef KVCAST_TRANSPORT_QUIC_ENDPOINT_CORE_H_
#define KVCAST_TRANSPORT_QUIC_ENDPOINT_CORE_H_

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "transport/quic/connection_impl.h"
#include "transport/quic/event_loop.h"
#include "transport/quic/tls_context.h"
#include "transport/quic/udp_socket.h"

namespace kvcast::quic {

class EndpointCore : public ConnectionHost {
 public:
  ~EndpointCore() override;

  // ConnectionHost.
  bool SendPackets(const SocketAddress& to, absl::Span<const uint8_t> data,
                   size_t segment_size) override;
  void RequestFlush(ConnectionImpl* conn) override;

 protected:
  EndpointCore(EventLoop* loop, const TransportOptions& options,
               std::unique_ptr<TlsContext> tls);

  // Binds the socket and starts reading from it.
  // `report_unreachable`: OnPeerUnreachable hears of peers the network
  // reports unreachable (UdpSocket::Options::report_unreachable).
  // `shards`: UdpSocket::Options::shards (a port shared by several loops).
  absl::Status Start(const SocketAddress& local, bool report_unreachable = false,
                     int shards = 0);
  ConnectionImpl* AddConnection(std::unique_ptr<ConnectionImpl> conn);
  // The connection got a packet in the current read batch: it is serviced
  // once the batch is done.
  void Touch(ConnectionImpl* conn);
  // After any event of `conn`: flush, deliver a close, re-arm the timer.
  void Service(ConnectionImpl* conn);
  // Services every connection touched since the last call.
  void ServiceTouched();
  // Teardown (call first in the subclass destructor): open connections send
  // CONNECTION_CLOSE and every handler not yet told gets OnClosed now.
  void ShutdownAll();
  // Connections neither closed nor closing.
  size_t LiveConnections() const;
  // The connections whose peer is at `peer_address` (SocketAddress::ToString).
  std::vector<ConnectionImpl*> ConnectionsTo(const std::string& peer_address) const;
  ConnectionConfig MakeConfig(const SocketAddress& remote,
                              ConnectionHandler* handler) const;

  // Routes one received datagram.
  virtual void OnDatagram(const SocketAddress& from,
                          absl::Span<uint8_t> data) = 0;
  // The socket reported `error` (an errno, e.g. ECONNREFUSED).
  virtual void OnSocketError(int error) {}
  // A datagram to `peer` was reported unreachable (`error`: ECONNREFUSED,
  // EHOSTUNREACH or ENETUNREACH); only with Start's report_unreachable.
  virtual void OnPeerUnreachable(const SocketAddress& peer, int error) {}
  // A finished connection is about to be destroyed (server: drop its CIDs).
  virtual void OnConnectionRemoved(ConnectionImpl* conn) {}
  // Server: destroy finished connections. Client: keep its one connection
  // so that connection() stays a valid (closed) object.
  virtual bool DestroyFinished() const = 0;

  EventLoop* const loop_;
  const TransportOptions options_;
  const std::unique_ptr<TlsContext> tls_;
  std::unique_ptr<UdpSocket> socket_;

 private:
  struct Slot {
    std::unique_ptr<ConnectionImpl> conn;
    uint64_t serial = 0;
    EventLoop::TimerId timer = 0;
    ngtcp2_tstamp armed = UINT64_MAX;
    std::optional<absl::Status> close_status;  // Posted, not yet delivered.
    bool close_delivered = false;
  };
  struct Blocked {
    SocketAddress to;
    std::vector<uint8_t> data;
    size_t segment_size;
  };

  void OnReadable();
  void OnWritable();
  void OnConnectionTimer(ConnectionImpl* conn);
  void ArmTimer(Slot& slot);
  void DeliverClose(ConnectionImpl* conn, uint64_t serial);
  void MaybeDestroy(ConnectionImpl* conn);

  absl::flat_hash_map<ConnectionImpl*, std::unique_ptr<Slot>> slots_;
  uint64_t next_serial_ = 1;
  std::vector<ConnectionImpl*> touched_;
  absl::flat_hash_set<ConnectionImpl*> touched_set_;
  absl::flat_hash_set<ConnectionImpl*> flush_requested_;
  bool flush_posted_ = false;
  std::deque<Blocked> blocked_;
  bool shutting_down_ = false;
  // Posted tasks hold a copy; false once the endpoint is gone.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace kvcast::quic

#endif  // KVCAST_TRANSPORT_QUIC_ENDPOINT_CORE_H_
