// MoQT over raw QUIC: a server that runs one MoqtSession per accepted
// connection, and a client that connects and runs one session.
//
// A server may spread its connections' packet work (decryption,
// encryption, system calls) over several loop threads: with
// `loop_threads` N > 1 it starts N - 1 loops of its own beside `loop` and
// serves its port from all N (quic/sharded_server.h), connections placed
// round robin. Every session still runs on `loop`, so the handler (a relay
// and its track cache) sees one thread; a connection on another loop
// reaches its session through a BridgedConnection.
//
// Thread safety: create, use and destroy on the loop thread.
#ifndef KVCAST_TRANSPORT_MOQT_MOQT_ENDPOINT_H_
#define KVCAST_TRANSPORT_MOQT_MOQT_ENDPOINT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "transport/moqt/session.h"
#include "transport/quic/bridged_connection.h"
#include "transport/quic/endpoint.h"
#include "transport/quic/sharded_server.h"

namespace kvcast::moqt {

class MoqtServer {
 public:
  // `handler` (borrowed, outlives the server) serves every session.
  static absl::StatusOr<std::unique_ptr<MoqtServer>> Create(
      quic::EventLoop* loop, const std::string& host, uint16_t port,
      const quic::TlsOptions& tls, const quic::TransportOptions& transport,
      const SessionOptions& session_options, RequestHandler* handler, int loop_threads = 1);
  ~MoqtServer();
  uint16_t port() const { return port_; }
  size_t num_sessions() const { return sessions_.size(); }
  int loop_threads() const { return int(io_threads_.size()) + 1; }
  // Connections placed on each loop so far (`loop` first); {} with one loop.
  std::vector<uint64_t> placed() const;

 private:
  MoqtServer() = default;
  // A session for `conn` (on `loop`; `bridge`: the connection's owner half
  // when it runs on another loop).
  MoqtSession* NewSession(quic::Connection* conn,
                          std::shared_ptr<quic::BridgedConnection> bridge = nullptr);
  struct Entry {
    std::shared_ptr<quic::BridgedConnection> bridge;  // outlives the session
    std::unique_ptr<MoqtSession> session;
  };

  quic::EventLoop* loop_ = nullptr;
  RequestHandler* handler_ = nullptr;
  SessionOptions options_;
  uint16_t port_ = 0;
  absl::flat_hash_map<MoqtSession*, Entry> sessions_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  std::vector<std::unique_ptr<quic::LoopThread>> io_threads_;  // destroyed last
  // Destroyed first: closes the connections (one of the two is set).
  std::unique_ptr<quic::Server> quic_;
  std::unique_ptr<quic::ShardedServer> sharded_;
};

class MoqtClient {
 public:
  // Connects; the session sends CLIENT_SETUP after the handshake and reports
  // RequestHandler::OnSessionReady / OnSessionClosed. Requests made before
  // then are queued.
  static absl::StatusOr<std::unique_ptr<MoqtClient>> Connect(
      quic::EventLoop* loop, const std::string& host, uint16_t port,
      const quic::TlsOptions& tls, const quic::TransportOptions& transport,
      const SessionOptions& session_options, RequestHandler* handler);
  ~MoqtClient();
  MoqtSession* session() const { return session_.get(); }

 private:
  MoqtClient() = default;
  std::unique_ptr<MoqtSession> session_;
  std::unique_ptr<quic::Client> quic_;  // destroyed first
};

}  // namespace kvcast::moqt

#endif  // KVCAST_TRANSPORT_MOQT_MOQT_ENDPOINT_H_
