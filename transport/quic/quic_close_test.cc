// How connections end: application close codes, closes from inside
// callbacks, idle timeout, keep-alive, peer loss (silent, or a dead process
// reported by ICMP), stateless reset, version negotiation, handshake timeout
// and endpoint destruction.
#include <arpa/inet.h>
#include <ngtcp2/ngtcp2.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "transport/quic/close_status.h"
#include "transport/quic/quic_test_util.h"

namespace kvcast::quic {
namespace {

using testing::PacketDropper;
using testing::QuicTestEnv;
using testing::RecordingHandler;

constexpr absl::Duration kWait = absl::Seconds(20);

// A plain UDP socket on 127.0.0.1 standing in for a peer that is not QUIC.
class RawUdp {
 public:
  RawUdp() {
    fd_ = socket(AF_INET, SOCK_DGRAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    socklen_t len = sizeof(addr);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
  }
  ~RawUdp() { close(fd_); }
  uint16_t port() const { return port_; }

  void SendTo(uint16_t port, const std::vector<uint8_t>& data) {
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    to.sin_port = htons(port);
    sendto(fd_, data.data(), data.size(), 0, reinterpret_cast<sockaddr*>(&to),
           sizeof(to));
  }
  // Next datagram within `timeout`, with its source port; empty on timeout.
  std::vector<uint8_t> Receive(absl::Duration timeout, uint16_t* from_port) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) <= 0) {
      return {};
    }
    std::vector<uint8_t> buf(65536);
    sockaddr_in from{};
    socklen_t len = sizeof(from);
    ssize_t n = recvfrom(fd_, buf.data(), buf.size(), 0,
                         reinterpret_cast<sockaddr*>(&from), &len);
    if (n < 0) return {};
    buf.resize(n);
    if (from_port != nullptr) *from_port = ntohs(from.sin_port);
    return buf;
  }

 private:
  int fd_;
  uint16_t port_ = 0;
};

uint32_t ReadBe32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) |
         (uint32_t{p[2]} << 8) | p[3];
}

// Opens a connected client/server pair with the given client options.
size_t ConnectPair(QuicTestEnv& env, const TransportOptions& server_opts,
                   const TransportOptions& client_opts,
                   RecordingHandler::Options server_handler = {}) {
  EXPECT_TRUE(env.StartServer(env.ServerTls(), server_opts, server_handler).ok());
  absl::StatusOr<size_t> c = env.Connect(env.ClientTls(), client_opts);
  EXPECT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(env.client_handler(*c)->WaitHandshake(kWait));
  EXPECT_NE(env.ServerHandler(0), nullptr);
  EXPECT_TRUE(env.ServerHandler(0)->WaitHandshake(kWait));
  return *c;
}

TEST(QuicCloseTest, GracefulCloseCarriesApplicationErrorCode) {
  QuicTestEnv env;
  size_t c = ConnectPair(env, {}, {});
  env.Run([&] { env.client(c)->connection()->Close(0x3, "reason"); });
  std::optional<absl::Status> server_st = env.ServerHandler(0)->WaitClosed(kWait);
  ASSERT_TRUE(server_st.has_value());
  EXPECT_EQ(server_st->message(), "application error 0x3: reason");
  EXPECT_EQ(ApplicationErrorCode(*server_st), 3u);
  std::optional<absl::Status> client_st = env.client_handler(c)->WaitClosed(kWait);
  ASSERT_TRUE(client_st.has_value());
  EXPECT_EQ(ApplicationErrorCode(*client_st), 3u);
  env.Run([&] {
    Connection* conn = env.client(c)->connection();
    EXPECT_EQ(conn->OpenBidiStream().status().code(),
              absl::StatusCode::kFailedPrecondition);
    conn->Close(0x9, "again");  // Ignored: already closed.
  });
  env.Run([] {});
  EXPECT_EQ(env.client_handler(c)->closed_count(), 1);
  EXPECT_EQ(env.ServerHandler(0)->closed_count(), 1);
}

TEST(QuicCloseTest, CloseWithCodeZeroIsOk) {
  QuicTestEnv env;
  size_t c = ConnectPair(env, {}, {});
  env.Run([&] { env.client(c)->connection()->Close(0, "done"); });
  std::optional<absl::Status> st = env.ServerHandler(0)->WaitClosed(kWait);
  ASSERT_TRUE(st.has_value());
  EXPECT_TRUE(st->ok()) << *st;
}

// The handler closes the connection from inside OnStreamData and keeps
// calling into it: nothing breaks, OnClosed comes later, exactly once.
TEST(QuicCloseTest, CloseFromInsideStreamCallback) {
  QuicTestEnv env;
  size_t c = ConnectPair(env, {}, {});
  RecordingHandler* server = env.ServerHandler(0);
  server->on_data = [](Connection* conn, int64_t id, absl::Span<const uint8_t>,
                       bool) {
    conn->Close(0x7, "bye from callback");
    EXPECT_EQ(conn->Send(id, "x", true).code(),
              absl::StatusCode::kFailedPrecondition);
    conn->ResetStream(id, 1);
  };
  env.Run([&] {
    Connection* conn = env.client(c)->connection();
    int64_t id = *conn->OpenBidiStream();
    ASSERT_TRUE(conn->Send(id, "trigger", false).ok());
  });
  std::optional<absl::Status> st = env.client_handler(c)->WaitClosed(kWait);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->message(), "application error 0x7: bye from callback");
  ASSERT_TRUE(server->WaitClosed(kWait).has_value());
  EXPECT_EQ(server->closed_count(), 1);
}

TEST(QuicCloseTest, RefusedConnectionFailsFast) {
  QuicTestEnv env;
  std::unique_ptr<Server> server;
  env.Run([&] {
    absl::StatusOr<std::unique_ptr<Server>> s = Server::Create(
        env.loop().loop(), "127.0.0.1", 0, env.ServerTls(), {},
        [](Connection*) -> ConnectionHandler* { return nullptr; });
    ASSERT_TRUE(s.ok()) << s.status();
    server = std::move(*s);
  });
  absl::StatusOr<size_t> c =
      env.Connect(env.ClientTls(), {}, "127.0.0.1", server->port());
  ASSERT_TRUE(c.ok());
  std::optional<absl::Status> st = env.client_handler(*c)->WaitClosed(kWait);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->code(), absl::StatusCode::kUnavailable) << *st;
  EXPECT_TRUE(absl::StrContains(st->message(), "CONNECTION_REFUSED")) << *st;
  env.Run([&] {
    EXPECT_EQ(server->num_connections(), 0u);
    server.reset();
  });
}

// The shorter idle timeout of the two ends governs both, and the error
// names it (the server's own is 30 s).
TEST(QuicCloseTest, IdleTimeoutFires) {
  QuicTestEnv env;
  TransportOptions opts;
  opts.idle_timeout = absl::Milliseconds(400);
  opts.keep_alive = absl::ZeroDuration();
  TransportOptions server_opts = opts;
  server_opts.idle_timeout = absl::Seconds(30);
  absl::Time start = absl::Now();
  size_t c = ConnectPair(env, server_opts, opts);
  std::optional<absl::Status> st = env.client_handler(c)->WaitClosed(kWait);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->code(), absl::StatusCode::kDeadlineExceeded) << *st;
  EXPECT_TRUE(absl::StrContains(st->message(), "idle timeout")) << *st;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  std::optional<absl::Status> server_st = env.ServerHandler(0)->WaitClosed(kWait);
  ASSERT_TRUE(server_st.has_value());
  EXPECT_EQ(server_st->code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(absl::StrContains(server_st->message(), "nothing heard from the peer for 400ms"))
      << *server_st;
}

TEST(QuicCloseTest, KeepAliveKeepsIdleConnectionOpen) {
  QuicTestEnv env;
  TransportOptions opts;
  opts.idle_timeout = absl::Milliseconds(600);
  opts.keep_alive = absl::Milliseconds(150);
  size_t c = ConnectPair(env, opts, opts);
  // Proving an absence needs waiting: three idle timeouts without traffic.
  EXPECT_FALSE(env.client_handler(c)->WaitClosed(absl::Milliseconds(1800)));
}

// The server goes silent (its host gone: no ICMP comes back either): the
// client notices through its idle timeout, keep-alive PINGs unanswered.
TEST(QuicCloseTest, ServerSilentClientSeesLossWithinIdleTimeout) {
  QuicTestEnv env;
  PacketDropper dropper;
  TransportOptions server_opts;
  server_opts.outgoing_packet_filter = dropper.Filter();
  TransportOptions client_opts;
  client_opts.idle_timeout = absl::Seconds(1);
  client_opts.keep_alive = absl::Milliseconds(300);
  size_t c = ConnectPair(env, server_opts, client_opts);
  dropper.set_blackhole(true);
  absl::Time silenced = absl::Now();
  std::optional<absl::Status> st = env.client_handler(c)->WaitClosed(kWait);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->code(), absl::StatusCode::kDeadlineExceeded) << *st;
  absl::Duration noticed = absl::Now() - silenced;
  EXPECT_LT(noticed, absl::Seconds(3)) << noticed;
  std::printf("silent server noticed after %s\n", absl::FormatDuration(noticed).c_str());
}

// The server process dies without a word (its last packets are dropped, its
// socket closes, as with kill -9): the client's next packet (a keep-alive
// PING) draws an ICMP port unreachable, and the connection ends at once with
// UNAVAILABLE, long before the 10 s idle timeout.
TEST(QuicCloseTest, ServerKilledClientNoticesAtItsNextPacket) {
  QuicTestEnv env;
  PacketDropper dropper;
  TransportOptions server_opts;
  server_opts.outgoing_packet_filter = dropper.Filter();
  TransportOptions client_opts;
  client_opts.idle_timeout = absl::Seconds(10);
  client_opts.keep_alive = absl::Milliseconds(300);
  size_t c = ConnectPair(env, server_opts, client_opts);
  dropper.set_blackhole(true);
  absl::Time killed = absl::Now();
  env.StopServer();
  std::optional<absl::Status> st = env.client_handler(c)->WaitClosed(kWait);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->code(), absl::StatusCode::kUnavailable) << *st;
  EXPECT_TRUE(absl::StrContains(st->message(), "peer unreachable")) << *st;
  absl::Duration noticed = absl::Now() - killed;
  EXPECT_LT(noticed, absl::Seconds(2)) << noticed;
  std::printf("server process loss noticed after %s\n", absl::FormatDuration(noticed).c_str());
}

// The probe timeout (what a MoQT subscription's linger allows for a loss
// repair) is known once the handshake has measured the path: on loopback,
// about the 25 ms max ack delay plus the timer granularity.
TEST(QuicCloseTest, ProbeTimeoutIsKnownAfterTheHandshake) {
  QuicTestEnv env;
  size_t c = ConnectPair(env, {}, {});
  absl::Duration pto;
  env.Run([&] { pto = env.client(c)->connection()->probe_timeout(); });
  EXPECT_GT(pto, absl::Milliseconds(1));
  EXPECT_LT(pto, absl::Seconds(1));
}

// The same from the server's side: a client process dies without a word;
// the server's next packet to it (a keep-alive PING) draws an ICMP port
// unreachable, reported on the server's unconnected socket (IP_RECVERR)
// for that client's address, and only that connection ends, at once.
TEST(QuicCloseTest, ClientKilledServerNoticesAtItsNextPacket) {
  QuicTestEnv env;
  PacketDropper dropper;
  TransportOptions server_opts;
  server_opts.idle_timeout = absl::Seconds(10);
  server_opts.keep_alive = absl::Milliseconds(300);
  TransportOptions client_opts;
  client_opts.outgoing_packet_filter = dropper.Filter();
  client_opts.idle_timeout = absl::Seconds(10);
  ConnectPair(env, server_opts, client_opts);
  absl::StatusOr<size_t> other = env.Connect(env.ClientTls(), TransportOptions{});
  ASSERT_TRUE(other.ok()) << other.status();
  ASSERT_TRUE(env.client_handler(*other)->WaitHandshake(kWait));
  dropper.set_blackhole(true);  // its CONNECTION_CLOSE is lost with it
  absl::Time killed = absl::Now();
  env.DestroyClient(0);
  std::optional<absl::Status> st = env.ServerHandler(0)->WaitClosed(kWait);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->code(), absl::StatusCode::kUnavailable) << *st;
  EXPECT_TRUE(absl::StrContains(st->message(), "peer unreachable")) << *st;
  absl::Duration noticed = absl::Now() - killed;
  EXPECT_LT(noticed, absl::Seconds(2)) << noticed;
  std::printf("client process loss noticed after %s\n", absl::FormatDuration(noticed).c_str());
  EXPECT_FALSE(env.ServerHandler(1)->WaitClosed(absl::Milliseconds(500)).has_value())
      << "the other client's connection stays";
}

// Nothing listens on the port: the first Initial draws an ICMP port
// unreachable and the connection attempt fails at once, not at the
// handshake timeout.
TEST(QuicCloseTest, ConnectingToAClosedPortFailsAtOnce) {
  QuicTestEnv env;
  uint16_t closed_port = 0;
  {
    RawUdp gone;
    closed_port = gone.port();
  }
  TransportOptions opts;
  opts.handshake_timeout = absl::Seconds(10);
  absl::Time start = absl::Now();
  absl::StatusOr<size_t> c = env.Connect(env.ClientTls(), opts, "127.0.0.1", closed_port);
  ASSERT_TRUE(c.ok());
  std::optional<absl::Status> st = env.client_handler(*c)->WaitClosed(kWait);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->code(), absl::StatusCode::kUnavailable) << *st;
  EXPECT_TRUE(absl::StrContains(st->message(), "Connection refused")) << *st;
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

// A server restarted on the same port with the same static secret answers
// packets of a connection it forgot with a stateless reset.
TEST(QuicCloseTest, StatelessResetAfterServerRestart) {
  QuicTestEnv env;
  PacketDropper dropper;
  TransportOptions server_opts;
  server_opts.stateless_reset_secret = "kvcast-test-static-secret-0123456";
  server_opts.outgoing_packet_filter = dropper.Filter();
  TransportOptions client_opts;
  client_opts.keep_alive = absl::ZeroDuration();
  // A packet sent while no server listens would end the connection on the
  // ICMP reply before the restarted server can reset it.
  client_opts.fail_fast_on_unreachable = false;
  size_t c = ConnectPair(env, server_opts, client_opts);
  uint16_t port = env.port();
  dropper.set_blackhole(true);
  env.StopServer();

  TransportOptions restarted = server_opts;
  restarted.outgoing_packet_filter = nullptr;
  ASSERT_TRUE(env.StartServer(env.ServerTls(), restarted, {}, port).ok());
  env.Run([&] {
    Connection* conn = env.client(c)->connection();
    int64_t id = *conn->OpenBidiStream();
    ASSERT_TRUE(conn->Send(id, std::string(200, 'x'), false).ok());
  });
  std::optional<absl::Status> st = env.client_handler(c)->WaitClosed(kWait);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->code(), absl::StatusCode::kUnavailable) << *st;
  EXPECT_TRUE(absl::StrContains(st->message(), "stateless reset")) << *st;
}

TEST(QuicCloseTest, ServerAnswersUnknownVersionWithVersionNegotiation) {
  QuicTestEnv env;
  ASSERT_TRUE(env.StartServer(env.ServerTls(), {}).ok());
  std::vector<uint8_t> pkt(1200, 0);
  pkt[0] = 0xc0;  // Long header, "Initial".
  const uint32_t version = 0xbabababa;
  for (int i = 0; i < 4; ++i) pkt[1 + i] = (version >> (24 - 8 * i)) & 0xff;
  pkt[5] = 8;  // DCID
  for (int i = 0; i < 8; ++i) pkt[6 + i] = 0x11;
  pkt[14] = 8;  // SCID
  for (int i = 0; i < 8; ++i) pkt[15 + i] = 0x22;
  RawUdp raw;
  raw.SendTo(env.port(), pkt);
  std::vector<uint8_t> reply = raw.Receive(absl::Seconds(5), nullptr);
  ASSERT_GE(reply.size(), 7u + 16u + 4u);
  EXPECT_NE(reply[0] & 0x80, 0);
  EXPECT_EQ(ReadBe32(&reply[1]), 0u);  // Version Negotiation.
  ASSERT_EQ(reply[5], 8);
  EXPECT_EQ(reply[6], 0x22);  // DCID echoes our SCID.
  bool offers_v1 = false;
  for (size_t off = 1 + 4 + 1 + 8 + 1 + 8; off + 4 <= reply.size();
       off += 4) {
    offers_v1 |= ReadBe32(&reply[off]) == NGTCP2_PROTO_VER_V1;
  }
  EXPECT_TRUE(offers_v1);
}

TEST(QuicCloseTest, ClientFailsClearlyOnVersionNegotiation) {
  QuicTestEnv env;
  RawUdp fake_server;
  absl::StatusOr<size_t> c =
      env.Connect(env.ClientTls(), {}, "127.0.0.1", fake_server.port());
  ASSERT_TRUE(c.ok());
  uint16_t client_port = 0;
  std::vector<uint8_t> initial =
      fake_server.Receive(absl::Seconds(5), &client_port);
  ASSERT_FALSE(initial.empty());
  ngtcp2_version_cid vc;
  ASSERT_EQ(ngtcp2_pkt_decode_version_cid(&vc, initial.data(), initial.size(),
                                          18),
            0);
  const uint32_t offered[] = {0x1a2a3a4a, 0x5a6a7a8a};
  std::vector<uint8_t> vn(256);
  ngtcp2_ssize n = ngtcp2_pkt_write_version_negotiation(
      vn.data(), vn.size(), 0x5, vc.scid, vc.scidlen, vc.dcid, vc.dcidlen,
      offered, 2);
  ASSERT_GT(n, 0);
  vn.resize(n);
  fake_server.SendTo(client_port, vn);
  std::optional<absl::Status> st = env.client_handler(*c)->WaitClosed(kWait);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->code(), absl::StatusCode::kUnavailable) << *st;
  EXPECT_TRUE(absl::StrContains(st->message(), "version negotiation")) << *st;
  EXPECT_TRUE(absl::StrContains(st->message(), "0x1a2a3a4a")) << *st;
}

TEST(QuicCloseTest, HandshakeTimeout) {
  QuicTestEnv env;
  RawUdp silent_server;
  TransportOptions opts;
  opts.handshake_timeout = absl::Milliseconds(500);
  absl::StatusOr<size_t> c =
      env.Connect(env.ClientTls(), opts, "127.0.0.1", silent_server.port());
  ASSERT_TRUE(c.ok());
  std::optional<absl::Status> st = env.client_handler(*c)->WaitClosed(kWait);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->code(), absl::StatusCode::kDeadlineExceeded) << *st;
  EXPECT_TRUE(absl::StrContains(st->message(), "handshake")) << *st;
}

TEST(QuicCloseTest, DestroyingEndpointClosesItsConnections) {
  QuicTestEnv env;
  size_t c = ConnectPair(env, {}, {});
  env.DestroyClient(c);  // OnClosed runs inside the destructor.
  EXPECT_EQ(env.client_handler(c)->closed_count(), 1);
  std::optional<absl::Status> st = env.client_handler(c)->WaitClosed(kWait);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->code(), absl::StatusCode::kCancelled) << *st;
  std::optional<absl::Status> server_st = env.ServerHandler(0)->WaitClosed(kWait);
  ASSERT_TRUE(server_st.has_value());
  EXPECT_TRUE(server_st->ok()) << *server_st;
}

TEST(QuicCloseTest, HandlerMayDestroyTheClientInsideOnClosed) {
  QuicTestEnv env;
  size_t c = ConnectPair(env, {}, {});
  env.client_handler(c)->on_closed = [&env, c](Connection*,
                                               const absl::Status&) {
    env.DestroyClient(c);  // Runs inline: we are on the loop thread.
  };
  env.Run([&] { env.ServerHandler(0)->conn()->Close(0x5, "go away"); });
  ASSERT_TRUE(env.client_handler(c)->WaitClosed(kWait).has_value());
  env.Run([&] { EXPECT_EQ(env.client(c), nullptr); });
  EXPECT_EQ(env.client_handler(c)->closed_count(), 1);
}

}  // namespace
}  // namespace kvcast::quic
