// Data paths over loopback: handshake, bidi echo, bulk transfer, uni
// streams, datagrams, many streams, many connections, transfer under loss.
#include <atomic>
#include <cstdio>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "transport/quic/datagram_plan.h"
#include "transport/quic/quic_test_util.h"

namespace kvcast::quic {
namespace {

using testing::PacketDropper;
using testing::Pattern;
using testing::QuicTestEnv;
using testing::RecordingHandler;

constexpr absl::Duration kWait = absl::Seconds(20);

absl::Span<const uint8_t> Bytes(const std::string& s) {
  return absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()),
                                   s.size());
}

TEST(QuicTransferTest, HandshakeAndBidiEcho) {
  QuicTestEnv env;
  RecordingHandler::Options echo;
  echo.echo_bidi = true;
  ASSERT_TRUE(env.StartServer(env.ServerTls(), {}, echo).ok());
  absl::StatusOr<size_t> c = env.Connect(env.ClientTls(), {});
  ASSERT_TRUE(c.ok()) << c.status();
  RecordingHandler* client = env.client_handler(*c);
  ASSERT_TRUE(client->WaitHandshake(kWait));

  int64_t stream = -1;
  env.Run([&] {
    Connection* conn = env.client(*c)->connection();
    EXPECT_FALSE(conn->is_server());
    EXPECT_EQ(conn->peer_address(), absl::StrCat("127.0.0.1:", env.port()));
    absl::StatusOr<int64_t> id = conn->OpenBidiStream();
    ASSERT_TRUE(id.ok()) << id.status();
    stream = *id;
    ASSERT_TRUE(conn->Send(stream, "hello ", false).ok());
    ASSERT_TRUE(conn->Send(stream, "quic", true).ok());
    // After FIN the stream takes no more data.
    EXPECT_EQ(conn->Send(stream, "late", false).code(),
              absl::StatusCode::kNotFound);
    EXPECT_EQ(conn->Send(stream + 400, "x", false).code(),
              absl::StatusCode::kNotFound);
  });
  ASSERT_TRUE(client->WaitFin(stream, kWait));
  EXPECT_EQ(client->stream_data(stream), "hello quic");
  EXPECT_GE(client->drained_count(stream), 1);
  RecordingHandler* server = env.ServerHandler(0);
  ASSERT_NE(server, nullptr);
  EXPECT_TRUE(server->handshake_done());
  EXPECT_EQ(server->stream_data(stream), "hello quic");
  env.Run([&] { EXPECT_EQ(env.server()->num_connections(), 1u); });
}

TEST(QuicTransferTest, Ipv6Loopback) {
  QuicTestEnv env;
  RecordingHandler::Options echo;
  echo.echo_bidi = true;
  absl::Status st = env.StartServer(env.ServerTls(), {}, echo, 0, "::1");
  if (!st.ok()) GTEST_SKIP() << "no IPv6 loopback here: " << st;
  absl::StatusOr<size_t> c = env.Connect(env.ClientTls(), {}, "::1");
  ASSERT_TRUE(c.ok()) << c.status();
  RecordingHandler* client = env.client_handler(*c);
  ASSERT_TRUE(client->WaitHandshake(kWait));  // Verified against IP SAN ::1.
  env.Run([&] {
    Connection* conn = env.client(*c)->connection();
    EXPECT_EQ(conn->peer_address(), absl::StrCat("[::1]:", env.port()));
    int64_t id = *conn->OpenBidiStream();
    ASSERT_TRUE(conn->Send(id, "over v6", true).ok());
  });
  ASSERT_TRUE(client->WaitFin(0, kWait));
  EXPECT_EQ(client->stream_data(0), "over v6");
}

TEST(QuicTransferTest, Transfer32MiBByteExact) {
  QuicTestEnv env;
  ASSERT_TRUE(env.StartServer(env.ServerTls(), {}).ok());
  absl::StatusOr<size_t> c = env.Connect(env.ClientTls(), {});
  ASSERT_TRUE(c.ok()) << c.status();
  RecordingHandler* client = env.client_handler(*c);
  ASSERT_TRUE(client->WaitHandshake(kWait));

  const std::string payload = Pattern(32 << 20, 7);
  int64_t stream = -1;
  absl::Time start = absl::Now();
  env.Run([&] {
    Connection* conn = env.client(*c)->connection();
    stream = *conn->OpenBidiStream();
    ASSERT_TRUE(conn->Send(stream, payload, true).ok());
    EXPECT_GT(conn->QueuedBytes(stream), 0u);
  });
  RecordingHandler* server = env.ServerHandler(0);
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(server->WaitFin(stream, absl::Seconds(60)));
  absl::Duration took = absl::Now() - start;
  EXPECT_TRUE(server->stream_data(stream) == payload) << "payload differs";
  EXPECT_EQ(client->drained_count(stream), 1);
  env.Run([&] {
    EXPECT_EQ(env.client(*c)->connection()->QueuedBytes(stream), 0u);
  });
  std::printf("32 MiB over loopback QUIC in %s: %.1f MiB/s\n",
              absl::FormatDuration(took).c_str(),
              32.0 / absl::ToDoubleSeconds(took));
}

TEST(QuicTransferTest, UniStreamsBothWays) {
  QuicTestEnv env;
  RecordingHandler::Options echo;
  echo.echo_uni = true;
  ASSERT_TRUE(env.StartServer(env.ServerTls(), {}, echo).ok());
  absl::StatusOr<size_t> c = env.Connect(env.ClientTls(), {});
  ASSERT_TRUE(c.ok());
  RecordingHandler* client = env.client_handler(*c);
  ASSERT_TRUE(client->WaitHandshake(kWait));
  const std::string msg = Pattern(100000, 3);
  env.Run([&] {
    Connection* conn = env.client(*c)->connection();
    int64_t id = *conn->OpenUniStream();
    EXPECT_EQ(id & 0x3, 0x2);  // Client-initiated unidirectional.
    ASSERT_TRUE(conn->Send(id, msg, true).ok());
  });
  ASSERT_TRUE(client->WaitFinCount(1, kWait));
  std::map<int64_t, std::string> got = client->all_streams();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got.begin()->first & 0x3, 0x3);  // Server-initiated uni.
  EXPECT_TRUE(got.begin()->second == msg);
  env.Run([&] {
    // A peer's uni stream is receive-only.
    EXPECT_EQ(env.client(*c)->connection()->Send(got.begin()->first, "x", true)
                  .code(),
              absl::StatusCode::kFailedPrecondition);
  });
}

TEST(QuicTransferTest, DatagramsBothWays) {
  QuicTestEnv env;
  RecordingHandler::Options echo;
  echo.echo_datagrams = true;
  ASSERT_TRUE(env.StartServer(env.ServerTls(), {}, echo).ok());
  absl::StatusOr<size_t> c = env.Connect(env.ClientTls(), {});
  ASSERT_TRUE(c.ok());
  RecordingHandler* client = env.client_handler(*c);
  ASSERT_TRUE(client->WaitHandshake(kWait));
  std::set<std::string> sent;
  env.Run([&] {
    Connection* conn = env.client(*c)->connection();
    for (int i = 0; i < 20; ++i) {
      std::string d = absl::StrCat("datagram-", i, "-", Pattern(500, i));
      sent.insert(d);
      ASSERT_TRUE(conn->SendDatagram(Bytes(d)).ok());
    }
    std::string huge(1200, 'x');  // Beyond one packet: refused, not split.
    EXPECT_EQ(conn->SendDatagram(Bytes(huge)).code(),
              absl::StatusCode::kResourceExhausted);
  });
  ASSERT_TRUE(client->WaitDatagrams(20, kWait));
  std::vector<std::string> echoed = client->datagrams();
  EXPECT_EQ(std::set<std::string>(echoed.begin(), echoed.end()), sent);
}

TEST(QuicTransferTest, DatagramsRefusedWhenPeerDisabledThem) {
  QuicTestEnv env;
  TransportOptions no_datagrams;
  no_datagrams.max_datagram_frame_size = 0;
  ASSERT_TRUE(env.StartServer(env.ServerTls(), no_datagrams).ok());
  absl::StatusOr<size_t> c = env.Connect(env.ClientTls(), {});
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(env.client_handler(*c)->WaitHandshake(kWait));
  env.Run([&] {
    EXPECT_EQ(env.client(*c)->connection()->SendDatagram(Bytes("x")).code(),
              absl::StatusCode::kFailedPrecondition);
  });
}

// 600 echoed streams with at most 16 open at once: stream credit must come
// back as streams close (OnStreamsAvailable drives the opener).
TEST(QuicTransferTest, ManyStreams) {
  QuicTestEnv env;
  TransportOptions server_opts;
  server_opts.max_streams_bidi = 16;
  RecordingHandler::Options echo;
  echo.echo_bidi = true;
  ASSERT_TRUE(env.StartServer(env.ServerTls(), server_opts, echo).ok());
  absl::StatusOr<size_t> c = env.Connect(env.ClientTls(), {});
  ASSERT_TRUE(c.ok());
  RecordingHandler* client = env.client_handler(*c);
  ASSERT_TRUE(client->WaitHandshake(kWait));

  constexpr int kStreams = 600;
  int opened = 0;
  int exhausted = 0;
  std::map<int64_t, std::string> expected;
  auto open_more = [&](Connection* conn) {
    while (opened < kStreams) {
      absl::StatusOr<int64_t> id = conn->OpenBidiStream();
      if (!id.ok()) {
        EXPECT_EQ(id.status().code(), absl::StatusCode::kResourceExhausted);
        ++exhausted;
        return;
      }
      std::string body = Pattern(1000 + opened, opened);
      expected[*id] = body;
      ++opened;
      EXPECT_TRUE(conn->Send(*id, body, true).ok());
    }
  };
  client->on_streams_available = open_more;
  env.Run([&] { open_more(env.client(*c)->connection()); });
  ASSERT_TRUE(client->WaitFinCount(kStreams, absl::Seconds(60)))
      << "opened " << opened;
  env.Run([&] {
    EXPECT_EQ(opened, kStreams);
    EXPECT_GT(exhausted, 0);
  });
  std::map<int64_t, std::string> got = client->all_streams();
  ASSERT_EQ(got.size(), expected.size());
  EXPECT_TRUE(got == expected);
}

TEST(QuicTransferTest, ConcurrentConnections) {
  QuicTestEnv env;
  RecordingHandler::Options echo;
  echo.echo_bidi = true;
  ASSERT_TRUE(env.StartServer(env.ServerTls(), {}, echo).ok());
  constexpr int kClients = 8;
  std::vector<size_t> ids;
  for (int i = 0; i < kClients; ++i) {
    absl::StatusOr<size_t> c = env.Connect(env.ClientTls(), {});
    ASSERT_TRUE(c.ok());
    ids.push_back(*c);
  }
  for (size_t id : ids) {
    ASSERT_TRUE(env.client_handler(id)->WaitHandshake(kWait));
  }
  env.Run([&] {
    EXPECT_EQ(env.server()->num_connections(), size_t{kClients});
    for (size_t id : ids) {
      Connection* conn = env.client(id)->connection();
      int64_t s = *conn->OpenBidiStream();
      EXPECT_TRUE(conn->Send(s, Pattern(200000, id), true).ok());
    }
  });
  for (size_t id : ids) {
    ASSERT_TRUE(env.client_handler(id)->WaitFin(0, kWait));
    EXPECT_TRUE(env.client_handler(id)->stream_data(0) == Pattern(200000, id));
  }
  env.Run([&] {
    for (size_t id : ids) env.client(id)->connection()->Close(0, "bye");
  });
  for (size_t i = 0; i < kClients; ++i) {
    ASSERT_TRUE(env.ServerHandler(i)->WaitClosed(kWait).has_value());
  }
  env.Run([&] { EXPECT_EQ(env.server()->num_connections(), 0u); });
}

// Synthetic 5% loss in both directions (every 20th datagram each side
// sends is dropped, handshake included): the transfer still completes
// byte-exact.
// max_udp_payload: datagrams grow to the configured size (the peer
// accepts 16384); by default, to a peer on this host (loopback), to
// kLargeUdpPayload (datagram_plan.h).
TEST(QuicTransferTest, DatagramSizeByPathAndConfiguration) {
  for (size_t configured : {size_t{0}, size_t{8952}, size_t{1452}}) {
    QuicTestEnv env;
    ASSERT_TRUE(env.StartServer(env.ServerTls(), {}).ok());
    std::atomic<size_t> largest{0};
    TransportOptions opts;
    opts.max_udp_payload = configured;
    opts.outgoing_packet_filter = [&](absl::Span<const uint8_t> datagram) {
      largest = std::max(largest.load(), datagram.size());
      return true;
    };
    absl::StatusOr<size_t> c = env.Connect(env.ClientTls(), opts);
    ASSERT_TRUE(c.ok()) << c.status();
    RecordingHandler* client = env.client_handler(*c);
    ASSERT_TRUE(client->WaitHandshake(kWait));
    const std::string payload = Pattern(4 << 20, 3);
    int64_t stream = -1;
    env.Run([&] {
      Connection* conn = env.client(*c)->connection();
      stream = *conn->OpenBidiStream();
      ASSERT_TRUE(conn->Send(stream, payload, true).ok());
    });
    RecordingHandler* server = env.ServerHandler(0);
    ASSERT_NE(server, nullptr);
    ASSERT_TRUE(server->WaitFin(stream, absl::Seconds(60)));
    EXPECT_TRUE(server->stream_data(stream) == payload) << "payload differs";
    EXPECT_EQ(largest.load(), configured == 0 ? kLargeUdpPayload : configured);
  }
}

TEST(QuicTransferTest, TransferUnderFivePercentLoss) {
  QuicTestEnv env;
  PacketDropper server_drop(20), client_drop(20);
  TransportOptions server_opts, client_opts;
  server_opts.outgoing_packet_filter = server_drop.Filter();
  client_opts.outgoing_packet_filter = client_drop.Filter();
  // Internet-sized datagrams: thousands of packets, so >50 losses each way.
  server_opts.max_udp_payload = client_opts.max_udp_payload = kDefaultUdpPayload;
  RecordingHandler::Options echo;
  echo.echo_bidi = true;
  ASSERT_TRUE(env.StartServer(env.ServerTls(), server_opts, echo).ok());
  absl::StatusOr<size_t> c = env.Connect(env.ClientTls(), client_opts);
  ASSERT_TRUE(c.ok());
  RecordingHandler* client = env.client_handler(*c);
  ASSERT_TRUE(client->WaitHandshake(kWait));
  const std::string payload = Pattern(4 << 20, 11);
  env.Run([&] {
    Connection* conn = env.client(*c)->connection();
    int64_t s = *conn->OpenBidiStream();
    ASSERT_TRUE(conn->Send(s, payload, true).ok());
  });
  ASSERT_TRUE(client->WaitFin(0, absl::Seconds(90)));
  EXPECT_TRUE(client->stream_data(0) == payload);
  EXPECT_GT(client_drop.dropped(), 50u);
  EXPECT_GT(server_drop.dropped(), 50u);
  std::printf("loss test: client dropped %llu of %llu, server %llu of %llu\n",
              (unsigned long long)client_drop.dropped(),
              (unsigned long long)(client_drop.sent() + client_drop.dropped()),
              (unsigned long long)server_drop.dropped(),
              (unsigned long long)(server_drop.sent() + server_drop.dropped()));
}

TEST(QuicTransferTest, ResetStreamReachesPeer) {
  QuicTestEnv env;
  ASSERT_TRUE(env.StartServer(env.ServerTls(), {}).ok());
  absl::StatusOr<size_t> c = env.Connect(env.ClientTls(), {});
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(env.client_handler(*c)->WaitHandshake(kWait));
  int64_t s = -1;
  env.Run([&] {
    Connection* conn = env.client(*c)->connection();
    s = *conn->OpenBidiStream();
    ASSERT_TRUE(conn->Send(s, "partial", false).ok());
  });
  RecordingHandler* server = env.ServerHandler(0);
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(server->WaitHandshake(kWait));
  env.Run([&] { env.client(*c)->connection()->ResetStream(s, 0x42); });
  ASSERT_TRUE(server->WaitResets(1, kWait));
  EXPECT_EQ(server->resets()[0], std::make_pair(s, uint64_t{0x42}));
  env.Run([&] {
    EXPECT_EQ(env.client(*c)->connection()->Send(s, "x", false).code(),
              absl::StatusCode::kNotFound);
  });
}

}  // namespace
}  // namespace kvcast::quic
