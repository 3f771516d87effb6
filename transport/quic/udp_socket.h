// UdpSocket: a non-blocking UDP socket with batched receive (recvmmsg) and
// batched send (UDP GSO via UDP_SEGMENT where the kernel accepts it, else
// sendmmsg), plus the outgoing-datagram filter used for fault injection.
// SocketAddress: a sockaddr with its length.
//
// Thread safety: none; a socket is used on its endpoint's loop thread.
#ifndef KVCAST_TRANSPORT_QUIC_UDP_SOCKET_H_
#define KVCAST_TRANSPORT_QUIC_UDP_SOCKET_H_

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace kvcast::quic {

// The largest UDP payload a UdpSocket receives whole without GRO (a larger
// datagram is dropped): QUIC's max_udp_payload_size transport parameter.
inline constexpr size_t kMaxUdpDatagram = 16384;

struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t len = 0;

  sockaddr* sa() { return reinterpret_cast<sockaddr*>(&storage); }
  const sockaddr* sa() const {
    return reinterpret_cast<const sockaddr*>(&storage);
  }
  int family() const { return storage.ss_family; }
  uint16_t port() const;
  // "1.2.3.4:443" or "[::1]:443".
  std::string ToString() const;

  // Resolves `host` (numeric address or name, first result) and `port`.
  // INVALID_ARGUMENT when it cannot be resolved.
  static absl::StatusOr<SocketAddress> Resolve(const std::string& host,
                                               uint16_t port);
};

class UdpSocket {
 public:
  // Called for each outgoing datagram; false drops it (fault injection).
  using OutgoingFilter = std::function<bool(absl::Span<const uint8_t>)>;

  struct Options {
    // sendmmsg/GSO when true; one sendmsg per datagram when false.
    bool batch_send = true;
    OutgoingFilter filter;  // May be empty.
    // Queue the network's "unreachable" reports (ICMP) for datagrams sent to
    // any peer (IP_RECVERR), so that an unconnected (server) socket learns
    // which peer is gone: drain them with TakeUnreachable.
    bool report_unreachable = false;
    // Sharing the port with other sockets of this process (SO_REUSEPORT),
    // each read by its own loop: a datagram goes to socket
    // SteeringShard(payload, shards) of the group, in the order the sockets
    // were bound (a classic BPF program the first socket attaches). A
    // server whose connection IDs carry their shard (sharded_server.h)
    // then receives each connection's packets on its own loop. 0: not
    // shared.
    int shards = 0;
  };
  // The shard a datagram goes to: the first byte of its destination
  // connection ID (byte 6 of a long header, byte 1 of a short one) modulo
  // `shards`; 0 for a datagram too short to have one. The BPF program
  // computes the same.
  static int SteeringShard(absl::Span<const uint8_t> datagram, int shards);

  // Binds `local` (port 0 picks one). UNAVAILABLE if the bind fails.
  static absl::StatusOr<std::unique_ptr<UdpSocket>> Bind(
      const SocketAddress& local, Options options);
  // OK when a socket that does not share its port could bind `local` now
  // (checked by binding one and closing it): sockets with Options::shards
  // join any group of this user's sockets on the port, so a second server
  // started on a port in use would take part of the first's traffic
  // instead of failing. UNAVAILABLE naming the address otherwise.
  static absl::Status CheckPortFree(const SocketAddress& local);
  ~UdpSocket();

  int fd() const { return fd_; }
  const SocketAddress& local_address() const { return local_; }

  // Reads the datagrams waiting on the socket, at most `max_batches` recvmmsg
  // calls, and calls `fn` for each datagram (a GRO-coalesced receive is
  // split back into its datagrams). Returns the count.
  size_t Receive(
      absl::FunctionRef<void(const SocketAddress& from, absl::Span<uint8_t>)>
          fn,
      int max_batches = 4);

  // Client sockets: only `remote` is heard from, and the kernel reports an
  // ICMP "port unreachable" for it as ECONNREFUSED (TakeError), so a peer
  // process that died is noticed at the next packet, not at the idle
  // timeout. Errors: the errno's code.
  absl::Status Connect(const SocketAddress& remote);
  // With Options::report_unreachable: calls fn(peer, errno) for each
  // report queued since the last call that a datagram sent to `peer` was
  // refused (ICMP port unreachable: ECONNREFUSED) or could not be routed
  // (EHOSTUNREACH, ENETUNREACH). Other reports are dropped. Returns the
  // number of reports passed to fn.
  size_t TakeUnreachable(absl::FunctionRef<void(const SocketAddress& peer, int error)> fn);
  // The last receive error other than "no data" (e.g. ECONNREFUSED), once;
  // 0 for none.
  int TakeError() {
    int e = error_;
    error_ = 0;
    return e;
  }

  // Sends `data` to `to` as datagrams of `segment_size` bytes (the last may
  // be shorter). Returns the number of bytes taken (whole datagrams); fewer
  // than data.size() means the socket buffer is full (EAGAIN): send the rest
  // once writable. Hard errors drop the datagrams (UDP may lose them anyway).
  size_t Send(const SocketAddress& to, absl::Span<const uint8_t> data,
              size_t segment_size);

  // Datagrams written with one UDP_SEGMENT sendmsg at most.
  static size_t MaxGsoSegments(size_t segment_size);

 private:
  UdpSocket(int fd, const SocketAddress& local, Options options);
  size_t SendGso(const SocketAddress& to, absl::Span<const uint8_t> data,
                 size_t segment_size);
  size_t SendMmsg(const SocketAddress& to, absl::Span<const uint8_t> data,
                  size_t segment_size);
  size_t SendOneByOne(const SocketAddress& to, absl::Span<const uint8_t> data,
                      size_t segment_size);

  const int fd_;
  const SocketAddress local_;
  const Options options_;
  bool gso_ok_;
  bool gro_;  // UDP_GRO on receive: one slot may hold several datagrams.
  size_t rx_slot_;
  size_t rx_batch_;
  std::vector<uint8_t> rx_buffers_;
  int error_ = 0;
};

}  // namespace kvcast::quic

#endif  // KVCAST_TRANSPORT_QUIC_UDP_SOCKET_H_
