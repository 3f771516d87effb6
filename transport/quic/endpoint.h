// QUIC client and server endpoints: each owns a UDP socket registered with an
// EventLoop and the connections that arrive on or leave from it.
//
// Thread safety: create, use and destroy an endpoint on its loop thread.
// Destroying an endpoint closes its connections (OnClosed is called for each).
#ifndef KVCAST_TRANSPORT_QUIC_ENDPOINT_H_
#define KVCAST_TRANSPORT_QUIC_ENDPOINT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "transport/quic/connection.h"
#include "transport/quic/event_loop.h"

namespace kvcast::quic {

struct TlsOptions {
  // PEM files. A server needs cert+key; a client needs them only for mutual
  // TLS.
  std::string cert_file;
  std::string key_file;
  // PEM CA bundle that verifies the peer. Client: verification is on unless
  // `insecure_skip_verify`. Server: when `require_client_cert`, clients must
  // present a certificate chaining to this CA.
  std::string ca_file;
  bool insecure_skip_verify = false;
  bool require_client_cert = false;
  // Client: name checked against the server certificate and sent as SNI;
  // defaults to the host being connected to.
  std::string server_name;
};

struct TransportOptions {
  std::string alpn = "moq-00";
  absl::Duration idle_timeout = absl::Seconds(30);
  // 0 disables keep-alive PINGs.
  absl::Duration keep_alive = absl::Seconds(10);
  absl::Duration handshake_timeout = absl::Seconds(10);
  // Flow control windows, sized for multi-megabyte objects.
  uint64_t max_stream_data = 16 << 20;
  uint64_t max_data = 64 << 20;
  uint64_t max_streams_bidi = 128;
  uint64_t max_streams_uni = 1024;
  // Largest DATAGRAM frame accepted; 0 disables the extension.
  uint64_t max_datagram_frame_size = 1200;
  // Batch outgoing packets with sendmmsg/UDP GSO where the kernel allows.
  bool batch_send = true;
  // Largest UDP datagram payload we send. 0: chosen per connection from
  // the path (datagram_plan.h): 16,376 bytes to a peer on this host, path
  // MTU discovery up to the route's MTU on jumbo-frame routes, ngtcp2's
  // 1452 bytes and discovery elsewhere. Set (up to kMaxUdpDatagram in
  // udp_socket.h, the largest we accept): datagrams up to this size and the
  // peer's max_udp_payload_size from the first packet, for paths known to
  // carry them (MTU 9000: 8952). Fewer, larger packets cost less CPU per
  // byte (docs/benchmarks.md); on a path that cannot carry them nothing
  // gets through.
  size_t max_udp_payload = 0;
  // End a connection at once (UNAVAILABLE "peer unreachable") when the
  // network reports its peer unreachable (ICMP port or host unreachable,
  // e.g. the peer's process died): a client hears it for its server, a
  // server for each client it sends to (IP_RECVERR). false waits for the
  // idle timeout (a server restarting on the same port may still answer).
  // Inside a cluster the reports are trustworthy; across the Internet an
  // off-path attacker who knows a connection's addresses could forge one.
  bool fail_fast_on_unreachable = true;

  // Added with the ngtcp2 implementation:
  // Server: secret (any length, >= 16 bytes recommended) from which the
  // stateless reset token of every connection ID is derived. A server
  // restarted with the same secret can reset connections it forgot. Empty:
  // a random secret per Server.
  std::string stateless_reset_secret;
  // Testing (fault injection): sees every outgoing UDP datagram of the
  // endpoint just before it is written; returning false drops it. Runs on
  // the loop thread. Setting it turns off send batching.
  std::function<bool(absl::Span<const uint8_t> datagram)>
      outgoing_packet_filter;
};

class Server {
 public:
  // Called for each new connection (before the handshake completes); returns
  // the handler for it, borrowed, which must outlive the connection. Return
  // nullptr to refuse the connection.
  using AcceptFn = std::function<ConnectionHandler*(Connection*)>;

  // Binds UDP `host:port` (port 0 picks one). Errors: INVALID_ARGUMENT for a
  // bad address or unreadable certificate/key, UNAVAILABLE if binding fails.
  static absl::StatusOr<std::unique_ptr<Server>> Create(
      EventLoop* loop, const std::string& host, uint16_t port,
      const TlsOptions& tls, const TransportOptions& transport, AcceptFn accept);
  virtual ~Server() = default;
  virtual uint16_t port() const = 0;
  virtual size_t num_connections() const = 0;
};

class Client {
 public:
  // Resolves and connects to `host:port`. The handshake continues on the
  // loop; `handler` gets OnHandshakeDone or OnClosed with the failure.
  // Errors here are immediate ones (bad address, unreadable CA file).
  static absl::StatusOr<std::unique_ptr<Client>> Connect(
      EventLoop* loop, const std::string& host, uint16_t port,
      const TlsOptions& tls, const TransportOptions& transport,
      ConnectionHandler* handler);
  virtual ~Client() = default;
  virtual Connection* connection() = 0;
};

}  // namespace kvcast::quic

#endif  // KVCAST_TRANSPORT_QUIC_ENDPOINT_H_
