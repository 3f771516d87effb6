// ShardedServer and BridgedConnection over real loopback QUIC: the kernel
// steers each connection's packets to its loop by connection ID, new
// connections are placed round robin (handed between loops during the
// handshake), and a connection used from another loop through a bridge
// carries streams, datagrams and its close as a direct one does.
#include "transport/quic/sharded_server.h"

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "transport/quic/bridged_connection.h"
#include "transport/quic/quic_test_util.h"
#include "transport/quic/udp_socket.h"

namespace kvcast::quic {
namespace {

using testing::Pattern;
using testing::QuicTestEnv;
using testing::RecordingHandler;

constexpr absl::Duration kWait = absl::Seconds(20);

TEST(SteeringShardTest, ReadsTheFirstByteOfTheDestinationConnectionId) {
  // Long header: flags, version (4), DCID length, DCID...
  const std::vector<uint8_t> initial = {0xc3, 0, 0, 0, 1, 8, 203, 1, 2, 3};
  EXPECT_EQ(UdpSocket::SteeringShard(initial, 4), 203 % 4);
  EXPECT_EQ(UdpSocket::SteeringShard(initial, 3), 203 % 3);
  // Short header: flags, DCID...
  const std::vector<uint8_t> short_header = {0x41, 97, 5, 5};
  EXPECT_EQ(UdpSocket::SteeringShard(short_header, 4), 97 % 4);
  EXPECT_EQ(UdpSocket::SteeringShard(short_header, 1), 0);
  EXPECT_EQ(UdpSocket::SteeringShard(std::vector<uint8_t>{0xc3, 0, 0}, 4), 0);
  EXPECT_EQ(UdpSocket::SteeringShard({}, 4), 0);
}

// Loops for the server's shards, and the clients' loop (env).
class ShardedServerTest : public ::testing::Test {
 protected:
  void StartLoops(int n) {
    for (int i = 0; i < n; ++i) {
      auto t = LoopThread::Start(absl::StrCat("shard-", i));
      ASSERT_TRUE(t.ok()) << t.status();
      loops_.push_back(std::move(*t));
    }
  }
  std::vector<EventLoop*> Loops() const {
    std::vector<EventLoop*> out;
    for (const auto& t : loops_) out.push_back(t->loop());
    return out;
  }
  // ShardedServer::Create and the server's end run on the first loop.
  absl::Status Start(std::vector<EventLoop*> loops, const TransportOptions& transport,
                     ShardedServer::AcceptFn accept) {
    absl::StatusOr<std::unique_ptr<ShardedServer>> server = absl::UnknownError("not run");
    loops_[0]->RunSync([&] {
      server = ShardedServer::Create(loops, "127.0.0.1", 0, env_.ServerTls(), transport,
                                     std::move(accept));
    });
    if (!server.ok()) return server.status();
    server_ = std::move(*server);
    return absl::OkStatus();
  }
  void Stop() {
    if (server_) loops_[0]->RunSync([&] { server_.reset(); });
  }
  void TearDown() override {
    Stop();  // closes its connections: then their handlers may go
    absl::MutexLock lock(&mu_);
    handlers_.clear();
  }
  static RecordingHandler::Options Echo() {
    RecordingHandler::Options o;
    o.echo_bidi = o.echo_uni = o.echo_datagrams = true;
    return o;
  }

  QuicTestEnv env_;
  std::vector<std::unique_ptr<LoopThread>> loops_;
  std::unique_ptr<ShardedServer> server_;
  absl::Mutex mu_;
  std::vector<std::unique_ptr<RecordingHandler>> handlers_ ABSL_GUARDED_BY(mu_);
  std::vector<int> shard_of_ ABSL_GUARDED_BY(mu_);
  std::atomic<int> wrong_thread_{0};
};

TEST_F(ShardedServerTest, ConnectionsArePlacedRoundRobinAndEachStaysOnItsLoop) {
  StartLoops(3);
  const std::vector<EventLoop*> loops = Loops();
  ASSERT_TRUE(Start(loops, {}, [&](Connection*, int shard) -> ConnectionHandler* {
        if (!loops[shard]->InLoopThread()) ++wrong_thread_;
        auto h = std::make_unique<RecordingHandler>(Echo());
        h->on_data = [&, loop = loops[shard]](Connection*, int64_t, absl::Span<const uint8_t>,
                                              bool) {
          if (!loop->InLoopThread()) ++wrong_thread_;
        };
        absl::MutexLock lock(&mu_);
        shard_of_.push_back(shard);
        handlers_.push_back(std::move(h));
        return handlers_.back().get();
      }).ok());
  EXPECT_EQ(server_->shards(), 3);

  // Six clients, each echoing 256 KB (many short-header packets, each of
  // which must reach the loop that holds its connection).
  constexpr int kClients = 6;
  for (int i = 0; i < kClients; ++i) {
    absl::StatusOr<size_t> c = env_.Connect(env_.ClientTls(), {}, "127.0.0.1", server_->port());
    ASSERT_TRUE(c.ok()) << c.status();
    ASSERT_TRUE(env_.client_handler(*c)->WaitHandshake(kWait)) << "client " << i;
  }
  const std::string payload = Pattern(256 << 10, 7);
  std::vector<int64_t> streams(kClients);
  env_.Run([&] {
    for (int i = 0; i < kClients; ++i) {
      Connection* conn = env_.client(i)->connection();
      streams[i] = *conn->OpenBidiStream();
      ASSERT_TRUE(conn->Send(streams[i], payload, true).ok());
    }
  });
  for (int i = 0; i < kClients; ++i) {
    ASSERT_TRUE(env_.client_handler(i)->WaitFin(streams[i], kWait)) << "client " << i;
    EXPECT_EQ(env_.client_handler(i)->stream_data(streams[i]), payload) << "client " << i;
  }
  // Round robin from shard 1 (the first connection off the caller's loop).
  EXPECT_EQ(server_->placed(), (std::vector<uint64_t>{2, 2, 2}));
  {
    absl::MutexLock lock(&mu_);
    EXPECT_EQ(shard_of_, (std::vector<int>{1, 2, 0, 1, 2, 0}));
  }
  EXPECT_EQ(wrong_thread_.load(), 0);
}

// A client process dies without a word: the server's next packet to it
// draws an ICMP port unreachable, which the kernel may file on another
// loop's socket than the one holding the connection; the connection still
// ends at once, and only that one.
TEST_F(ShardedServerTest, APeerReportedUnreachableOnAnyLoopEndsItsConnectionAtOnce) {
  StartLoops(4);
  TransportOptions server_opts;
  server_opts.idle_timeout = absl::Seconds(10);
  server_opts.keep_alive = absl::Milliseconds(300);
  ASSERT_TRUE(Start(Loops(), server_opts, [&](Connection*, int) -> ConnectionHandler* {
                auto h = std::make_unique<RecordingHandler>();
                absl::MutexLock lock(&mu_);
                handlers_.push_back(std::move(h));
                return handlers_.back().get();
              }).ok());
  // Several clients, so that reports land on loops other than their
  // connection's; each dies in turn, its CONNECTION_CLOSE lost with it.
  constexpr int kClients = 4;
  std::vector<std::shared_ptr<testing::PacketDropper>> droppers;
  for (int i = 0; i < kClients; ++i) {
    droppers.push_back(std::make_shared<testing::PacketDropper>());
    TransportOptions client_opts;
    client_opts.outgoing_packet_filter = droppers.back()->Filter();
    client_opts.idle_timeout = absl::Seconds(10);
    absl::StatusOr<size_t> c = env_.Connect(env_.ClientTls(), client_opts, "127.0.0.1", server_->port());
    ASSERT_TRUE(c.ok()) << c.status();
    ASSERT_TRUE(env_.client_handler(*c)->WaitHandshake(kWait));
  }
  std::vector<RecordingHandler*> servers;
  {
    absl::MutexLock lock(&mu_);
    for (auto& h : handlers_) servers.push_back(h.get());
  }
  ASSERT_EQ(servers.size(), size_t(kClients));
  for (int i = 0; i < kClients; ++i) {
    droppers[i]->set_blackhole(true);
    const absl::Time killed = absl::Now();
    env_.DestroyClient(i);
    // Accepted in connection order: server handler i is client i's.
    std::optional<absl::Status> st = servers[i]->WaitClosed(kWait);
    ASSERT_TRUE(st.has_value()) << "client " << i;
    EXPECT_TRUE(absl::StrContains(st->message(), "peer unreachable")) << *st;
    EXPECT_LT(absl::Now() - killed, absl::Seconds(2)) << "client " << i;
    for (int j = i + 1; j < kClients; ++j) EXPECT_EQ(servers[j]->closed_count(), 0) << j;
  }
}

// A port in use is refused, as a server's would be, although the loops'
// own sockets share theirs: a second relay started on a busy port must not
// quietly take part of the first one's traffic.
TEST_F(ShardedServerTest, APortInUseIsRefused) {
  StartLoops(2);
  ASSERT_TRUE(Start(Loops(), {}, [](Connection*, int) -> ConnectionHandler* { return nullptr; }).ok());
  const uint16_t port = server_->port();
  absl::StatusOr<std::unique_ptr<ShardedServer>> second = absl::UnknownError("not run");
  loops_[0]->RunSync([&] {
    second = ShardedServer::Create(Loops(), "127.0.0.1", port, env_.ServerTls(), {},
                                   [](Connection*, int) -> ConnectionHandler* { return nullptr; });
  });
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable) << second.status();
  EXPECT_TRUE(absl::StrContains(second.status().message(), absl::StrCat("127.0.0.1:", port)))
      << second.status();
  // A plain server on the port is refused the same way.
  absl::Status plain;
  env_.Run([&] {
    plain = Server::Create(env_.loop().loop(), "127.0.0.1", port, env_.ServerTls(), {},
                           [](Connection*) -> ConnectionHandler* { return nullptr; })
                .status();
  });
  EXPECT_EQ(plain.code(), absl::StatusCode::kUnavailable) << plain;
}

// An echo handler on an owner loop, reached through a BridgedConnection
// from the connection's loop.
TEST_F(ShardedServerTest, ABridgedConnectionCarriesStreamsDatagramsAndItsClose) {
  StartLoops(2);  // loops_[0]: the connections' loop; loops_[1]: the owner
  EventLoop* io = loops_[0]->loop();
  EventLoop* owner = loops_[1]->loop();
  std::shared_ptr<BridgedConnection> bridge;  // owner loop
  RecordingHandler echo(Echo());
  echo.on_data = [&](Connection* conn, int64_t, absl::Span<const uint8_t>, bool) {
    if (!owner->InLoopThread() || conn != bridge.get()) ++wrong_thread_;
  };
  TransportOptions transport;
  transport.max_datagram_frame_size = 1200;
  ASSERT_TRUE(Start({io}, transport, [&](Connection* conn, int) -> ConnectionHandler* {
                return BridgedConnection::Accept(conn, io, owner,
                                                 [&](std::shared_ptr<BridgedConnection> b) {
                                                   bridge = std::move(b);
                                                   return &echo;
                                                 });
              }).ok());
  absl::StatusOr<size_t> c = env_.Connect(env_.ClientTls(), transport, "127.0.0.1", server_->port());
  ASSERT_TRUE(c.ok()) << c.status();
  RecordingHandler* client = env_.client_handler(*c);
  ASSERT_TRUE(client->WaitHandshake(kWait));
  ASSERT_TRUE(echo.WaitHandshake(kWait));

  // 4 MiB each way on a bidi stream (more than the owner posts at once),
  // 64 KB on a uni stream, three datagrams.
  const std::string big = Pattern(4 << 20, 3), small = Pattern(64 << 10, 4);
  int64_t bidi = -1, uni = -1;
  env_.Run([&] {
    Connection* conn = env_.client(*c)->connection();
    bidi = *conn->OpenBidiStream();
    uni = *conn->OpenUniStream();
    ASSERT_TRUE(conn->Send(bidi, big, true).ok());
    ASSERT_TRUE(conn->Send(uni, small, true).ok());
    for (int i = 0; i < 3; ++i) {
      const std::string d = Pattern(100, 10 + i);
      ASSERT_TRUE(conn->SendDatagram({reinterpret_cast<const uint8_t*>(d.data()), d.size()}).ok());
    }
  });
  ASSERT_TRUE(client->WaitFin(bidi, kWait));
  EXPECT_EQ(client->stream_data(bidi), big);
  ASSERT_TRUE(client->WaitFinCount(2, kWait));  // the echoed uni stream too
  bool echoed_uni = false;
  for (const auto& [id, data] : client->all_streams()) echoed_uni |= id != bidi && data == small;
  EXPECT_TRUE(echoed_uni);
  ASSERT_TRUE(client->WaitDatagrams(3, kWait));
  EXPECT_EQ(client->datagrams()[0], Pattern(100, 10));
  // The owner's view of the queue: all handed on, and told so.
  std::atomic<size_t> queued{1};
  loops_[1]->RunSync([&] { queued = bridge->QueuedBytes(bidi); });
  EXPECT_EQ(queued.load(), 0u);
  EXPECT_GE(echo.drained_count(bidi), 1);
  EXPECT_GT(bridge->probe_timeout(), absl::ZeroDuration());

  // The owner closes: the client hears the code; the owner's handler its
  // OnClosed, once.
  loops_[1]->RunSync([&] { bridge->Close(7, "done here"); });
  std::optional<absl::Status> closed = client->WaitClosed(kWait);
  ASSERT_TRUE(closed.has_value());
  EXPECT_NE(closed->message().find("done here"), std::string::npos) << *closed;
  ASSERT_TRUE(echo.WaitClosed(kWait).has_value());
  loops_[1]->RunSync([&] { bridge->Detach(absl::CancelledError("late")); });
  EXPECT_EQ(echo.closed_count(), 1);
  EXPECT_EQ(wrong_thread_.load(), 0);
  loops_[1]->RunSync([&] { bridge.reset(); });
}

TEST_F(ShardedServerTest, TheServerGoingAwayClosesBridgedConnections) {
  StartLoops(2);
  EventLoop* io = loops_[0]->loop();
  EventLoop* owner = loops_[1]->loop();
  std::shared_ptr<BridgedConnection> bridge;
  RecordingHandler handler;
  ASSERT_TRUE(Start({io}, {}, [&](Connection* conn, int) -> ConnectionHandler* {
                return BridgedConnection::Accept(conn, io, owner,
                                                 [&](std::shared_ptr<BridgedConnection> b) {
                                                   bridge = std::move(b);
                                                   return &handler;
                                                 });
              }).ok());
  absl::StatusOr<size_t> c = env_.Connect(env_.ClientTls(), {}, "127.0.0.1", server_->port());
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(handler.WaitHandshake(kWait));
  Stop();
  ASSERT_TRUE(handler.WaitClosed(kWait).has_value());
  EXPECT_TRUE(env_.client_handler(*c)->WaitClosed(kWait).has_value());
  // Opening a stream on the closed bridge is refused, not a hang.
  absl::StatusOr<int64_t> opened = int64_t{0};
  loops_[1]->RunSync([&] { opened = bridge->OpenUniStream(); });
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kFailedPrecondition) << opened.status();
  EXPECT_EQ(handler.closed_count(), 1);
  loops_[1]->RunSync([&] { bridge.reset(); });
}

}  // namespace
}  // namespace kvcast::quic
