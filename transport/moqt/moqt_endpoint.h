// MoQT over raw QUIC: a server that runs one MoqtSession per accepted
// connection, and a client that connects and runs one session.
//
// Thread safety: create, use and destroy on the loop thread.
#ifndef KVCAST_TRANSPORT_MOQT_MOQT_ENDPOINT_H_
#define KVCAST_TRANSPORT_MOQT_MOQT_ENDPOINT_H_

#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "transport/moqt/session.h"
#include "transport/quic/endpoint.h"

namespace kvcast::moqt {

class MoqtServer {
 public:
  // `handler` (borrowed, outlives the server) serves every session.
  static absl::StatusOr<std::unique_ptr<MoqtServer>> Create(
      quic::EventLoop* loop, const std::string& host, uint16_t port,
      const quic::TlsOptions& tls, const quic::TransportOptions& transport,
      const SessionOptions& session_options, RequestHandler* handler);
  ~MoqtServer();
  uint16_t port() const { return quic_->port(); }
  size_t num_sessions() const { return sessions_.size(); }

 private:
  MoqtServer() = default;
  quic::EventLoop* loop_ = nullptr;
  RequestHandler* handler_ = nullptr;
  SessionOptions options_;
  absl::flat_hash_map<MoqtSession*, std::unique_ptr<MoqtSession>> sessions_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  std::unique_ptr<quic::Server> quic_;  // destroyed first: closes sessions
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
