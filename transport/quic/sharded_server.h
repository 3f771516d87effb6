// ShardedServer: one QUIC server port served by several event loops, each
// owning the connections placed on it, so that the per-packet work of
// different connections (decryption, encryption, system calls) runs on
// different threads.
//
// Every loop binds the port (SO_REUSEPORT) and the kernel hands each
// datagram to the loop its destination connection ID names: the server's
// connection IDs carry their shard in their first byte
// (UdpSocket::SteeringShard). A new connection is placed round robin: the
// loop that received the client's first Initial (steered by the client's
// random connection ID) hands it, and the client's Initials until it has
// learnt the server's connection ID, to the chosen loop.
//
// Thread safety: Create and destroy on the first loop's thread (or, before
// that loop runs, on the thread that will run it); the other loops must be
// running, and each of their servers is made and destroyed there while the
// caller waits (none of them may be waiting for the first loop). AcceptFn
// and the connections' handlers run on the connection's loop; Connection
// rules apply per loop.
#ifndef KVCAST_TRANSPORT_QUIC_SHARDED_SERVER_H_
#define KVCAST_TRANSPORT_QUIC_SHARDED_SERVER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "transport/quic/endpoint.h"

namespace kvcast::quic {

class ShardedServer {
 public:
  // As Server::AcceptFn, with the index of the loop (in `loops`) that owns
  // the connection; runs on that loop.
  using AcceptFn = std::function<ConnectionHandler*(Connection*, int shard)>;

  // One server per loop on `host:port` (port 0 picks one for all). Errors
  // as Server::Create; UNAVAILABLE also when the kernel refuses the
  // steering program.
  static absl::StatusOr<std::unique_ptr<ShardedServer>> Create(
      std::vector<EventLoop*> loops, const std::string& host, uint16_t port,
      const TlsOptions& tls, const TransportOptions& transport, AcceptFn accept);
  // Destroys each loop's server on its loop (waiting for it): their
  // connections close as a Server's do.
  virtual ~ShardedServer() = default;

  virtual uint16_t port() const = 0;
  virtual int shards() const = 0;
  // Connections placed on each loop so far.
  virtual std::vector<uint64_t> placed() const = 0;
};

}  // namespace kvcast::quic

#endif  // KVCAST_TRANSPORT_QUIC_SHARDED_SERVER_H_
