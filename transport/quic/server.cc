// Server endpoint: routes datagrams to connections by destination CID
// (every CID a connection issued, retired ones dropped), accepts new
// connections from Initial packets, answers unknown versions with Version
// Negotiation and unknown short-header CIDs with a Stateless Reset whose
// token derives from the static secret.
#include <gnutls/crypto.h>
#include <ngtcp2/ngtcp2_crypto.h>

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "transport/quic/endpoint.h"
#include "transport/quic/endpoint_core.h"

namespace kvcast::quic {
namespace {

std::string CidKey(const uint8_t* data, size_t len) {
  return std::string(reinterpret_cast<const char*>(data), len);
}
std::string CidKey(const ngtcp2_cid& cid) {
  return CidKey(cid.data, cid.datalen);
}

class ServerImpl final : public Server, private EndpointCore {
 public:
  ServerImpl(EventLoop* loop, const TransportOptions& transport,
             std::unique_ptr<TlsContext> tls, AcceptFn accept)
      : EndpointCore(loop, transport, std::move(tls)),
        accept_(std::move(accept)) {}

  ~ServerImpl() override { ShutdownAll(); }

  absl::Status Init(const SocketAddress& local) {
    secret_ = options_.stateless_reset_secret;
    if (secret_.empty()) {
      secret_.resize(32);
      if (gnutls_rnd(GNUTLS_RND_KEY, secret_.data(), secret_.size()) != 0) {
        return absl::InternalError("gnutls_rnd failed");
      }
    }
    // A client that died is then noticed at our next packet to it (its
    // port answers ICMP "unreachable"), not at the idle timeout.
    return Start(local, /*report_unreachable=*/options_.fail_fast_on_unreachable);
  }

  uint16_t port() const override { return socket_->local_address().port(); }
  size_t num_connections() const override { return LiveConnections(); }

  // ConnectionHost (the rest is in EndpointCore).
  absl::Status OnNewConnectionId(ConnectionImpl* conn, const ngtcp2_cid& cid,
                                 uint8_t* token) override {
    RETURN_IF_ERROR(ResetToken(cid, token));
    Route(CidKey(cid), conn);
    return absl::OkStatus();
  }

  void OnRetireConnectionId(ConnectionImpl* conn,
                            const ngtcp2_cid& cid) override {
    auto it = by_cid_.find(CidKey(cid));
    if (it != by_cid_.end() && it->second == conn) by_cid_.erase(it);
  }

 private:
  absl::Status ResetToken(const ngtcp2_cid& cid, uint8_t* token) const {
    if (ngtcp2_crypto_generate_stateless_reset_token(
            token, reinterpret_cast<const uint8_t*>(secret_.data()),
            secret_.size(), &cid) != 0) {
      return absl::InternalError("cannot derive stateless reset token");
    }
    return absl::OkStatus();
  }
  void Route(const std::string& key, ConnectionImpl* conn) {
    by_cid_[key] = conn;
    cids_of_[conn].push_back(key);
  }

  bool DestroyFinished() const override { return true; }

  void OnConnectionRemoved(ConnectionImpl* conn) override {
    auto it = cids_of_.find(conn);
    if (it == cids_of_.end()) return;
    for (const std::string& key : it->second) {
      auto route = by_cid_.find(key);
      if (route != by_cid_.end() && route->second == conn) by_cid_.erase(route);
    }
    cids_of_.erase(it);
  }

  void OnPeerUnreachable(const SocketAddress& peer, int error) override {
    const std::string address = peer.ToString();
    for (ConnectionImpl* conn : ConnectionsTo(address)) {
      conn->PeerUnreachable(absl::StrCat(std::strerror(error), " (ICMP)"));
      Touch(conn);
    }
  }

  void OnDatagram(const SocketAddress& from,
                  absl::Span<uint8_t> data) override {
    ngtcp2_version_cid vc;
    int rv = ngtcp2_pkt_decode_version_cid(&vc, data.data(), data.size(),
                                           ConnectionImpl::kCidLength);
    if (rv == NGTCP2_ERR_VERSION_NEGOTIATION) {
      SendVersionNegotiation(from, vc);
      return;
    }
    if (rv != 0) return;
    // Looked up by view: no allocation per received packet.
    auto it = by_cid_.find(
        absl::string_view(reinterpret_cast<const char*>(vc.dcid), vc.dcidlen));
    if (it != by_cid_.end()) {
      it->second->OnPacket(from, data);
      Touch(it->second);
      return;
    }
    if (vc.version == 0) {  // Short header for a connection we do not know.
      SendStatelessReset(from, vc, data.size());
      return;
    }
    Accept(from, data);
  }

  void Accept(const SocketAddress& from, absl::Span<uint8_t> data) {
    ngtcp2_pkt_hd hd;
    if (ngtcp2_accept(&hd, data.data(), data.size()) != 0) return;
    ngtcp2_cid scid;
    scid.datalen = ConnectionImpl::kCidLength;
    uint8_t token[NGTCP2_STATELESS_RESET_TOKENLEN];
    if (gnutls_rnd(GNUTLS_RND_RANDOM, scid.data, scid.datalen) != 0 ||
        !ResetToken(scid, token).ok()) {
      return;
    }
    absl::StatusOr<std::unique_ptr<ConnectionImpl>> created =
        ConnectionImpl::NewServer(MakeConfig(from, nullptr), hd, scid, token);
    if (!created.ok()) return;
    ConnectionImpl* conn = AddConnection(std::move(*created));
    Route(CidKey(scid), conn);
    Route(CidKey(hd.dcid), conn);  // The client's Initials until it learns scid.
    ConnectionHandler* handler = accept_ ? accept_(conn) : nullptr;
    conn->set_handler(handler);
    conn->OnPacket(from, data);
    if (handler == nullptr) conn->Refuse("connection refused");
    Touch(conn);
  }

  void SendVersionNegotiation(const SocketAddress& to,
                              const ngtcp2_version_cid& vc) {
    uint8_t unused_random = 0;
    (void)gnutls_rnd(GNUTLS_RND_NONCE, &unused_random, 1);
    // A reserved (greasing) version first, then the one we speak.
    const uint32_t versions[] = {0x1a2a3a4au, NGTCP2_PROTO_VER_V1};
    uint8_t buf[NGTCP2_MAX_UDP_PAYLOAD_SIZE];
    ngtcp2_ssize n = ngtcp2_pkt_write_version_negotiation(
        buf, sizeof(buf), unused_random, vc.scid, vc.scidlen, vc.dcid,
        vc.dcidlen, versions, 2);
    if (n > 0) SendPackets(to, absl::MakeConstSpan(buf, n), n);
  }

  void SendStatelessReset(const SocketAddress& to, const ngtcp2_version_cid& vc,
                          size_t packet_size) {
    // Smaller than the packet that triggered it (no reset loops between two
    // endpoints), and at least the minimum a peer recognises.
    constexpr size_t kMinSize =
        NGTCP2_MIN_STATELESS_RESET_RANDLEN + NGTCP2_STATELESS_RESET_TOKENLEN + 1;
    if (packet_size <= kMinSize || vc.dcidlen != ConnectionImpl::kCidLength) {
      return;
    }
    ngtcp2_cid cid;
    ngtcp2_cid_init(&cid, vc.dcid, vc.dcidlen);
    uint8_t token[NGTCP2_STATELESS_RESET_TOKENLEN];
    if (!ResetToken(cid, token).ok()) return;
    size_t size = std::min<size_t>(packet_size - 1, 64);
    uint8_t random[64];
    size_t randlen = size - NGTCP2_STATELESS_RESET_TOKENLEN;
    if (gnutls_rnd(GNUTLS_RND_NONCE, random, randlen) != 0) return;
    uint8_t buf[64 + NGTCP2_STATELESS_RESET_TOKENLEN];
    ngtcp2_ssize n = ngtcp2_pkt_write_stateless_reset(buf, sizeof(buf), token,
                                                      random, randlen);
    if (n > 0) SendPackets(to, absl::MakeConstSpan(buf, n), n);
  }

  AcceptFn accept_;
  std::string secret_;
  absl::flat_hash_map<std::string, ConnectionImpl*> by_cid_;
  absl::flat_hash_map<ConnectionImpl*, std::vector<std::string>> cids_of_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Server>> Server::Create(
    EventLoop* loop, const std::string& host, uint16_t port,
    const TlsOptions& tls, const TransportOptions& transport,
    AcceptFn accept) {
  absl::StatusOr<SocketAddress> local = SocketAddress::Resolve(host, port);
  if (!local.ok()) return local.status();
  absl::StatusOr<std::unique_ptr<TlsContext>> ctx =
      TlsContext::Create(TlsContext::Role::kServer, tls, transport.alpn);
  if (!ctx.ok()) return ctx.status();
  auto server = std::make_unique<ServerImpl>(loop, transport, std::move(*ctx),
                                             std::move(accept));
  absl::Status st = server->Init(*local);
  if (!st.ok()) return st;
  return std::unique_ptr<Server>(std::move(server));
}

}  // namespace kvcast::quic
