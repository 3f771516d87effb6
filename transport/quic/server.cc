// Server endpoint: routes datagrams to connections by destination CID
// (every CID a connection issued, retired ones dropped), accepts new
// connections from Initial packets, answers unknown versions with Version
// Negotiation and unknown short-header CIDs with a Stateless Reset whose
// token derives from the static secret. As a shard of a ShardedServer, it
// stamps its shard into its CIDs and hands new connections to the shard
// whose turn it is.
#include <gnutls/crypto.h>
#include <ngtcp2/ngtcp2_crypto.h>

#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/status_macros.h"
#include "transport/quic/endpoint.h"
#include "transport/quic/endpoint_core.h"
#include "transport/quic/sharded_server.h"

namespace kvcast::quic {
namespace {

std::string CidKey(const uint8_t* data, size_t len) {
  return std::string(reinterpret_cast<const char*>(data), len);
}
std::string CidKey(const ngtcp2_cid& cid) {
  return CidKey(cid.data, cid.datalen);
}

class ServerImpl;

// What the shards of one ShardedServer share. Each entry of `servers` is
// set and cleared on its own loop; `alive[i]` says whether servers[i] may
// be used (read on loop i only).
struct ShardGroup {
  explicit ShardGroup(std::vector<EventLoop*> l)
      : loops(std::move(l)), servers(loops.size()), placed(loops.size()) {}
  int size() const { return int(loops.size()); }
  // The shard the next new connection goes to.
  int Pick() { return int(next.fetch_add(1) % loops.size()); }

  const std::vector<EventLoop*> loops;
  std::vector<ServerImpl*> servers;
  std::vector<std::atomic<uint64_t>> placed;
  // From shard 1: the first loop is usually also the application's (the
  // owner of bridged connections), so the first connection goes elsewhere.
  std::atomic<uint64_t> next{1};
};

class ServerImpl final : public Server, private EndpointCore {
 public:
  ServerImpl(EventLoop* loop, const TransportOptions& transport,
             std::unique_ptr<TlsContext> tls, AcceptFn accept,
             std::shared_ptr<ShardGroup> group = nullptr, int shard = 0)
      : EndpointCore(loop, transport, std::move(tls)),
        accept_(std::move(accept)),
        group_(std::move(group)),
        shard_(shard) {}

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
    return Start(local, /*report_unreachable=*/options_.fail_fast_on_unreachable,
                 group_ ? group_->size() : 0);
  }

  uint16_t port() const override { return socket_->local_address().port(); }
  size_t num_connections() const override { return LiveConnections(); }

  // ConnectionHost (the rest is in EndpointCore).
  absl::Status OnNewConnectionId(ConnectionImpl* conn, ngtcp2_cid* cid,
                                 uint8_t* token) override {
    Stamp(cid);
    RETURN_IF_ERROR(ResetToken(*cid, token));
    Route(CidKey(*cid), conn);
    return absl::OkStatus();
  }

  // A datagram another shard received for a connection placed here.
  void OnForwarded(const SocketAddress& from, std::vector<uint8_t> data) {
    Dispatch(from, absl::MakeSpan(data), /*may_hand_off=*/false);
    ServiceTouched();
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
    if (MarkUnreachable(peer, error) || !group_) return;
    // The kernel files the report on whichever socket of the port its
    // lookup picks (no steering program runs for it), not the one that
    // sent: the other shards hear of it.
    std::shared_ptr<ShardGroup> group = group_;
    for (int i = 0; i < group->size(); ++i) {
      if (i == shard_) continue;
      group->loops[i]->Post([group, i, peer, error] {
        if (ServerImpl* server = group->servers[i]) {
          server->MarkUnreachable(peer, error);
          server->ServiceTouched();
        }
      });
    }
  }
  // Ends this shard's connections to `peer`; false when it has none.
  bool MarkUnreachable(const SocketAddress& peer, int error) {
    const std::vector<ConnectionImpl*> conns = ConnectionsTo(peer.ToString());
    for (ConnectionImpl* conn : conns) {
      conn->PeerUnreachable(absl::StrCat(std::strerror(error), " (ICMP)"));
      Touch(conn);
    }
    return !conns.empty();
  }

  // As a shard: the CID's first byte steers the kernel to this shard
  // (UdpSocket::SteeringShard).
  void Stamp(ngtcp2_cid* cid) const {
    if (!group_ || cid->datalen == 0) return;
    const int n = group_->size();
    cid->data[0] = uint8_t((cid->data[0] % (256 / n)) * n + shard_);
  }

  void OnDatagram(const SocketAddress& from,
                  absl::Span<uint8_t> data) override {
    Dispatch(from, data, /*may_hand_off=*/true);
  }

  void Dispatch(const SocketAddress& from, absl::Span<uint8_t> data, bool may_hand_off) {
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
    if (may_hand_off && group_ && HandOff(from, vc, data)) return;
    Accept(from, data);
  }

  // A long-header packet of a connection this shard has not accepted: true
  // when it went to the shard whose turn it was (or that has it).
  bool HandOff(const SocketAddress& from, const ngtcp2_version_cid& vc,
               absl::Span<uint8_t> data) {
    const std::string key = CidKey(vc.dcid, vc.dcidlen);
    const absl::Time now = absl::Now();
    int to;
    auto it = handed_.find(key);
    if (it != handed_.end() && it->second.until > now) {
      to = it->second.shard;
    } else {
      if ((data[0] & 0x30) != 0) return false;  // not an Initial: Accept drops it
      to = group_->Pick();
      if (to == shard_) return false;
      if (handed_.size() >= 1024) {
        absl::erase_if(handed_, [now](const auto& e) { return e.second.until <= now; });
      }
      // The client's Initials carry this CID until it learns the server's
      // (stamped with the new shard): well within the handshake timeout.
      handed_[key] = {to, now + options_.handshake_timeout + absl::Seconds(1)};
    }
    std::shared_ptr<ShardGroup> group = group_;
    group->loops[to]->Post([group, to, from, bytes = std::vector<uint8_t>(data.begin(), data.end())]() mutable {
      if (ServerImpl* server = group->servers[to]) server->OnForwarded(from, std::move(bytes));
    });
    return true;
  }

  void Accept(const SocketAddress& from, absl::Span<uint8_t> data) {
    ngtcp2_pkt_hd hd;
    if (ngtcp2_accept(&hd, data.data(), data.size()) != 0) return;
    ngtcp2_cid scid;
    scid.datalen = ConnectionImpl::kCidLength;
    uint8_t token[NGTCP2_STATELESS_RESET_TOKENLEN];
    if (gnutls_rnd(GNUTLS_RND_RANDOM, scid.data, scid.datalen) != 0) return;
    Stamp(&scid);
    if (!ResetToken(scid, token).ok()) return;
    absl::StatusOr<std::unique_ptr<ConnectionImpl>> created =
        ConnectionImpl::NewServer(MakeConfig(from, nullptr), hd, scid, token);
    if (!created.ok()) return;
    ConnectionImpl* conn = AddConnection(std::move(*created));
    Route(CidKey(scid), conn);
    Route(CidKey(hd.dcid), conn);  // The client's Initials until it learns scid.
    if (group_) group_->placed[shard_].fetch_add(1);
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
  const std::shared_ptr<ShardGroup> group_;  // null: not a shard
  const int shard_;
  struct Handed {
    int shard;
    absl::Time until;
  };
  absl::flat_hash_map<std::string, Handed> handed_;  // client CIDs given to other shards
  std::string secret_;
  absl::flat_hash_map<std::string, ConnectionImpl*> by_cid_;
  absl::flat_hash_map<ConnectionImpl*, std::vector<std::string>> cids_of_;
};

// Runs `fn` on shard `i`'s loop, waiting for it. Shard 0's is the
// caller's (ShardedServer's contract): at once.
void RunOn(const ShardGroup& group, int i, std::function<void()> fn) {
  EventLoop* loop = group.loops[i];
  if (i == 0 || loop->InLoopThread()) {
    fn();
    return;
  }
  absl::Notification done;
  loop->Post([&] {
    fn();
    done.Notify();
  });
  done.WaitForNotification();
}

class ShardedServerImpl final : public ShardedServer {
 public:
  explicit ShardedServerImpl(std::shared_ptr<ShardGroup> group) : group_(std::move(group)) {}
  ~ShardedServerImpl() override {
    for (int i = 0; i < group_->size(); ++i) {
      RunOn(*group_, i, [this, i] {
        group_->servers[i] = nullptr;
        owned_[i].reset();
      });
    }
  }
  uint16_t port() const override { return port_; }
  int shards() const override { return group_->size(); }
  std::vector<uint64_t> placed() const override {
    std::vector<uint64_t> out;
    for (const auto& p : group_->placed) out.push_back(p.load());
    return out;
  }

  std::shared_ptr<ShardGroup> group_;
  std::vector<std::unique_ptr<ServerImpl>> owned_;  // touched on their loops
  uint16_t port_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ShardedServer>> ShardedServer::Create(
    std::vector<EventLoop*> loops, const std::string& host, uint16_t port,
    const TlsOptions& tls, const TransportOptions& transport, AcceptFn accept) {
  if (loops.empty()) return absl::InvalidArgumentError("a sharded server needs a loop");
  if (loops.size() > 128) return absl::InvalidArgumentError("at most 128 loops share a port");
  if (port != 0) {
    // The loops' sockets share the port (SO_REUSEPORT): first make sure no
    // one else holds it, or this server would quietly take part of its
    // traffic.
    absl::StatusOr<SocketAddress> local = SocketAddress::Resolve(host, port);
    if (!local.ok()) return local.status();
    if (absl::Status free = UdpSocket::CheckPortFree(*local); !free.ok()) return free;
  }
  auto group = std::make_shared<ShardGroup>(std::move(loops));
  auto sharded = std::make_unique<ShardedServerImpl>(group);
  sharded->owned_.resize(group->size());
  sharded->port_ = port;
  for (int i = 0; i < group->size(); ++i) {
    absl::Status st;
    RunOn(*group, i, [&, i] {
      absl::StatusOr<SocketAddress> local = SocketAddress::Resolve(host, sharded->port_);
      if (!local.ok()) {
        st = local.status();
        return;
      }
      absl::StatusOr<std::unique_ptr<TlsContext>> ctx =
          TlsContext::Create(TlsContext::Role::kServer, tls, transport.alpn);
      if (!ctx.ok()) {
        st = ctx.status();
        return;
      }
      auto server = std::make_unique<ServerImpl>(
          group->loops[i], transport, std::move(*ctx),
          [accept, i](Connection* conn) { return accept(conn, i); }, group, i);
      st = server->Init(*local);
      if (!st.ok()) return;
      sharded->port_ = server->port();
      group->servers[i] = server.get();
      sharded->owned_[i] = std::move(server);
    });
    if (!st.ok()) return st;  // the destructor takes down the shards made
  }
  return std::unique_ptr<ShardedServer>(std::move(sharded));
}

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
