#include "transport/moqt/moqt_endpoint.h"

#include <utility>

#include "common/status_macros.h"

namespace kvcast::moqt {

absl::StatusOr<std::unique_ptr<MoqtServer>> MoqtServer::Create(
    quic::EventLoop* loop, const std::string& host, uint16_t port,
    const quic::TlsOptions& tls, const quic::TransportOptions& transport,
    const SessionOptions& session_options, RequestHandler* handler) {
  std::unique_ptr<MoqtServer> server(new MoqtServer());
  server->loop_ = loop;
  server->handler_ = handler;
  server->options_ = session_options;
  MoqtServer* self = server.get();
  ASSIGN_OR_RETURN(
      server->quic_,
      quic::Server::Create(loop, host, port, tls, transport,
                           [self](quic::Connection* conn) -> quic::ConnectionHandler* {
                             auto session = std::make_unique<MoqtSession>(
                                 self->loop_, conn, self->handler_, self->options_);
                             MoqtSession* raw = session.get();
                             std::weak_ptr<bool> alive = self->alive_;
                             raw->SetClosedCallback([self, raw, alive] {
                               self->loop_->Post([self, raw, alive] {
                                 if (alive.expired()) return;
                                 self->sessions_.erase(raw);
                               });
                             });
                             self->sessions_[raw] = std::move(session);
                             return raw;
                           }));
  return server;
}

MoqtServer::~MoqtServer() {
  quic_.reset();  // closes every connection: each session sees OnClosed
  alive_.reset();
  sessions_.clear();
}

absl::StatusOr<std::unique_ptr<MoqtClient>> MoqtClient::Connect(
    quic::EventLoop* loop, const std::string& host, uint16_t port,
    const quic::TlsOptions& tls, const quic::TransportOptions& transport,
    const SessionOptions& session_options, RequestHandler* handler) {
  std::unique_ptr<MoqtClient> client(new MoqtClient());
  client->session_ = std::make_unique<MoqtSession>(loop, nullptr, handler, session_options);
  ASSIGN_OR_RETURN(client->quic_, quic::Client::Connect(loop, host, port, tls, transport,
                                                        client->session_.get()));
  return client;
}

MoqtClient::~MoqtClient() {
  quic_.reset();
  session_.reset();
}

}  // namespace kvcast::moqt
