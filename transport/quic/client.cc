// Client endpoint: one connection on its own UDP socket (bound to an
// ephemeral port of the server's address family).
#include <gnutls/crypto.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "transport/quic/endpoint.h"
#include "transport/quic/endpoint_core.h"

namespace kvcast::quic {
namespace {

SocketAddress WildcardFor(const SocketAddress& remote) {
  SocketAddress local;
  if (remote.family() == AF_INET6) {
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(&local.storage);
    sin6->sin6_family = AF_INET6;
    sin6->sin6_addr = in6addr_any;
    local.len = sizeof(sockaddr_in6);
  } else {
    auto* sin = reinterpret_cast<sockaddr_in*>(&local.storage);
    sin->sin_family = AF_INET;
    sin->sin_addr.s_addr = htonl(INADDR_ANY);
    local.len = sizeof(sockaddr_in);
  }
  return local;
}

std::string Unbracket(const std::string& host) {
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    return host.substr(1, host.size() - 2);
  }
  return host;
}

class ClientImpl final : public Client, private EndpointCore {
 public:
  ClientImpl(EventLoop* loop, const TransportOptions& transport,
             std::unique_ptr<TlsContext> tls)
      : EndpointCore(loop, transport, std::move(tls)) {}

  ~ClientImpl() override { ShutdownAll(); }

  absl::Status Init(const SocketAddress& remote, const std::string& host,
                    ConnectionHandler* handler) {
    RETURN_IF_ERROR(Start(WildcardFor(remote)));
    RETURN_IF_ERROR(socket_->Connect(remote));
    ConnectionConfig config = MakeConfig(remote, handler);
    config.peer_name = Unbracket(host);
    ASSIGN_OR_RETURN(std::unique_ptr<ConnectionImpl> conn,
                     ConnectionImpl::NewClient(config));
    conn_ = AddConnection(std::move(conn));
    // The first Initial goes out from the loop, not from inside Connect().
    RequestFlush(conn_);
    return absl::OkStatus();
  }

  Connection* connection() override { return conn_; }

  absl::Status OnNewConnectionId(ConnectionImpl*, ngtcp2_cid*,
                                 uint8_t* token) override {
    // A server never resets a client; the token only has to be unguessable.
    if (gnutls_rnd(GNUTLS_RND_RANDOM, token, NGTCP2_STATELESS_RESET_TOKENLEN) !=
        0) {
      return absl::InternalError("gnutls_rnd failed");
    }
    return absl::OkStatus();
  }
  void OnRetireConnectionId(ConnectionImpl*, const ngtcp2_cid&) override {}

 private:
  void OnDatagram(const SocketAddress& from,
                  absl::Span<uint8_t> data) override {
    if (conn_ == nullptr) return;
    conn_->OnPacket(from, data);
    Touch(conn_);
  }
  bool DestroyFinished() const override { return false; }
  void OnSocketError(int error) override {
    if (conn_ == nullptr || !options_.fail_fast_on_unreachable) return;
    if (error != ECONNREFUSED && error != EHOSTUNREACH && error != ENETUNREACH) return;
    conn_->PeerUnreachable(absl::StrCat(std::strerror(error), " (ICMP)"));
    Touch(conn_);
  }

  ConnectionImpl* conn_ = nullptr;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(
    EventLoop* loop, const std::string& host, uint16_t port,
    const TlsOptions& tls, const TransportOptions& transport,
    ConnectionHandler* handler) {
  if (handler == nullptr) return absl::InvalidArgumentError("null handler");
  ASSIGN_OR_RETURN(SocketAddress remote, SocketAddress::Resolve(host, port));
  ASSIGN_OR_RETURN(
      std::unique_ptr<TlsContext> ctx,
      TlsContext::Create(TlsContext::Role::kClient, tls, transport.alpn));
  auto client =
      std::make_unique<ClientImpl>(loop, transport, std::move(ctx));
  RETURN_IF_ERROR(client->Init(remote, host, handler));
  return std::unique_ptr<Client>(std::move(client));
}

}  // namespace kvcast::quic
