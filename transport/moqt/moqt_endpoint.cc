#include "transport/moqt/moqt_endpoint.h"

#include <pthread.h>

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace kvcast::moqt {

absl::StatusOr<std::unique_ptr<MoqtServer>> MoqtServer::Create(
    quic::EventLoop* loop, const std::string& host, uint16_t port,
    const quic::TlsOptions& tls, const quic::TransportOptions& transport,
    const SessionOptions& session_options, RequestHandler* handler, int loop_threads) {
  std::unique_ptr<MoqtServer> server(new MoqtServer());
  server->loop_ = loop;
  server->handler_ = handler;
  server->options_ = session_options;
  MoqtServer* self = server.get();
  if (loop_threads <= 1) {
    ASSIGN_OR_RETURN(server->quic_,
                     quic::Server::Create(loop, host, port, tls, transport,
                                          [self](quic::Connection* conn) -> quic::ConnectionHandler* {
                                            return self->NewSession(conn);
                                          }));
    server->port_ = server->quic_->port();
    return server;
  }
  // Named after the creating thread (the loop's, usually): "relay" -> "relay-1".
  char name[16] = "kvcast-moqt";
  pthread_getname_np(pthread_self(), name, sizeof(name));
  std::vector<quic::EventLoop*> loops = {loop};
  for (int i = 1; i < loop_threads; ++i) {
    ASSIGN_OR_RETURN(auto thread,
                     quic::LoopThread::Start(absl::StrCat(std::string(name).substr(0, 11), "-", i)));
    loops.push_back(thread->loop());
    server->io_threads_.push_back(std::move(thread));
  }
  ASSIGN_OR_RETURN(
      server->sharded_,
      quic::ShardedServer::Create(
          loops, host, port, tls, transport,
          [self, loops](quic::Connection* conn, int shard) -> quic::ConnectionHandler* {
            if (shard == 0) return self->NewSession(conn);  // on `loop` itself
            std::weak_ptr<bool> alive = self->alive_;       // read here, used on `loop`
            return quic::BridgedConnection::Accept(
                conn, loops[shard], self->loop_,
                [self, alive](std::shared_ptr<quic::BridgedConnection> bridge)
                    -> quic::ConnectionHandler* {
                  if (alive.expired()) return nullptr;
                  quic::BridgedConnection* raw = bridge.get();
                  return self->NewSession(raw, std::move(bridge));
                });
          }));
  server->port_ = server->sharded_->port();
  return server;
}

MoqtSession* MoqtServer::NewSession(quic::Connection* conn,
                                    std::shared_ptr<quic::BridgedConnection> bridge) {
  auto session = std::make_unique<MoqtSession>(loop_, conn, handler_, options_);
  MoqtSession* raw = session.get();
  std::weak_ptr<bool> alive = alive_;
  raw->SetClosedCallback([this, raw, alive] {
    loop_->Post([this, raw, alive] {
      if (alive.expired()) return;
      sessions_.erase(raw);
    });
  });
  sessions_[raw] = Entry{std::move(bridge), std::move(session)};
  return raw;
}

std::vector<uint64_t> MoqtServer::placed() const {
  return sharded_ ? sharded_->placed() : std::vector<uint64_t>{};
}

MoqtServer::~MoqtServer() {
  // Closes every connection: a session on this loop sees OnClosed now; a
  // bridged one's is queued for this loop, so it is told here instead.
  quic_.reset();
  sharded_.reset();
  for (auto& [raw, entry] : sessions_) {
    if (entry.bridge) entry.bridge->Detach(absl::CancelledError("endpoint destroyed"));
  }
  alive_.reset();
  sessions_.clear();
  io_threads_.clear();
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
