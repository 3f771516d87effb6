// MoqtSession over real loopback QUIC: setup, request-id flow control,
// joining fetch, protocol violations and failure paths.
#include "transport/moqt/session.h"

#include <gtest/gtest.h>

#include "transport/moqt/testing/moqt_test_util.h"
#include "transport/quic/endpoint.h"

namespace kvcast::moqt {
namespace {

using testing::AsSpan;
using testing::Bytes;
using testing::ClientHandler;
using testing::CollectingConsumer;
using testing::RelayHarness;
using testing::WaitOnLoop;

const TrackNamespace kNs = {"kvcast", "session"};

class Origin : public Relay {
 public:
  explicit Origin(quic::EventLoop* loop) : Relay(loop, RelayOptions{}) { AddLocalNamespace(kNs); }
  void OnSessionReady(MoqtSession* session) override {
    AnnounceTo(session, [this](absl::Status s) { announced = s.ok(); });
  }
  bool announced = false;
};

TEST(MoqtSessionTest, RequestsBeyondThePeersLimitWaitForMaxRequestId) {
  SessionOptions server;
  server.max_requests = 2;
  ClientHandler handler;
  RelayHarness h(RelayOptions{}, server);
  MoqtClient* client = h.Connect(&handler);
  ASSERT_NE(client, nullptr);
  constexpr int kRequests = 7;
  int replies = 0, not_found = 0;
  h.thread()->RunSync([&] {
    for (int i = 0; i < kRequests; ++i) {
      Subscribe s;
      s.track = FullTrackName{{"missing"}, absl::StrCat("t", i)};
      auto id = client->session()->Subscribe(
          s, std::make_shared<CollectingConsumer>(), [&](absl::StatusOr<TrackInfo> r) {
            ++replies;
            not_found += r.status().code() == absl::StatusCode::kNotFound;
          });
      ASSERT_TRUE(id.ok());
      EXPECT_EQ(*id, 2u * i);  // client request ids are even, from 0
    }
  });
  ASSERT_TRUE(WaitOnLoop(h.thread(), [&] { return replies == kRequests; }));
  h.thread()->RunSync([&] {
    EXPECT_EQ(not_found, kRequests);
    EXPECT_GE(client->session()->stats().requests_blocked, 1u);
    EXPECT_TRUE(client->session()->ready());
  });
}

TEST(MoqtSessionTest, RelativeJoiningFetchReturnsTheGroupsBeforeTheLiveEdge) {
  // Handlers outlive the harness, whose destructor closes their sessions.
  std::unique_ptr<Origin> origin;
  ClientHandler handler;
  RelayHarness h;
  h.thread()->RunSync([&] { origin = std::make_unique<Origin>(h.loop()); });
  ASSERT_NE(h.Connect(origin.get()), nullptr);
  ASSERT_TRUE(WaitOnLoop(h.thread(), [&] { return origin->announced; }));
  const FullTrackName track{kNs, "live"};
  h.thread()->RunSync([&] {
    for (uint64_t g = 0; g < 3; ++g) {
      for (uint64_t o = 0; o < 4; ++o) {
        ObjectHeader oh;
        oh.group = g;
        oh.object = o;
        origin->PublishObject(track, oh, AsSpan(Bytes(g, o, 500)));
      }
    }
  });
  MoqtClient* client = h.Connect(&handler);
  auto live = std::make_shared<CollectingConsumer>();
  auto joined = std::make_shared<CollectingConsumer>();
  absl::StatusOr<TrackInfo> sub_reply = absl::UnknownError("none");
  absl::StatusOr<TrackInfo> fetch_reply = absl::UnknownError("none");
  h.thread()->RunSync([&] {
    Subscribe s;
    s.track = track;
    s.filter_type = FilterType::kLargestObject;
    auto sub_id = client->session()->Subscribe(s, live, [&](auto r) { sub_reply = r; });
    ASSERT_TRUE(sub_id.ok());
    Fetch f;
    f.fetch_type = FetchType::kRelativeJoining;
    f.joining_request_id = *sub_id;
    f.joining_start = 1;
    ASSERT_TRUE(client->session()->Fetch(f, joined, [&](auto r) { fetch_reply = r; }).ok());
  });
  ASSERT_TRUE(WaitOnLoop(h.thread(), [&] { return joined->done; }));
  h.thread()->RunSync([&] {
    ASSERT_TRUE(sub_reply.ok()) << sub_reply.status();
    EXPECT_EQ(sub_reply->largest, (Location{2, 3}));
    ASSERT_TRUE(fetch_reply.ok()) << fetch_reply.status();
    EXPECT_TRUE(joined->done_status.ok()) << joined->done_status;
    EXPECT_EQ(joined->objects.size(), 8u);  // groups 1 and 2, objects 0..3
    for (uint64_t g = 1; g < 3; ++g) {
      for (uint64_t o = 0; o < 4; ++o) EXPECT_EQ((joined->objects[{g, o}]), Bytes(g, o, 500));
    }
    // The live subscription starts after the largest object: a new one arrives.
    ObjectHeader oh;
    oh.group = 3;
    oh.object = 0;
    origin->PublishObject(track, oh, AsSpan(Bytes(3, 0, 500)));
  });
  ASSERT_TRUE(WaitOnLoop(h.thread(), [&] { return live->objects.size() == 1; }));
  h.thread()->RunSync([&] { EXPECT_EQ((live->objects[{3, 0}]), Bytes(3, 0, 500)); });
}

TEST(MoqtSessionTest, PublisherLossEndsDownstreamSubscriptionsWithAnError) {
  std::unique_ptr<Origin> origin;
  ClientHandler handler;
  RelayHarness h;
  h.thread()->RunSync([&] { origin = std::make_unique<Origin>(h.loop()); });
  MoqtClient* origin_client = h.Connect(origin.get());
  ASSERT_TRUE(WaitOnLoop(h.thread(), [&] { return origin->announced; }));
  MoqtClient* client = h.Connect(&handler);
  auto consumer = std::make_shared<CollectingConsumer>();
  bool replied = false;
  h.thread()->RunSync([&] {
    Subscribe s;
    s.track = FullTrackName{kNs, "x"};
    s.filter_type = FilterType::kLargestObject;
    ASSERT_TRUE(client->session()->Subscribe(s, consumer, [&](auto) { replied = true; }).ok());
  });
  ASSERT_TRUE(WaitOnLoop(h.thread(), [&] { return replied; }));
  h.Disconnect(origin_client);
  ASSERT_TRUE(WaitOnLoop(h.thread(), [&] { return consumer->done; }));
  h.thread()->RunSync([&] {
    // The relay's upstream went away: GOING_AWAY, which reads as UNAVAILABLE.
    EXPECT_EQ(consumer->done_status.code(), absl::StatusCode::kUnavailable)
        << consumer->done_status;
    EXPECT_NE(consumer->done_status.message().find("PUBLISH_DONE 0x4"), std::string::npos)
        << consumer->done_status;
    EXPECT_TRUE(client->session()->ready()) << "the subscriber's session stays up";
  });
}

// A raw QUIC client that speaks garbage on the control stream.
class GarbageClient : public quic::ConnectionHandler {
 public:
  void OnHandshakeDone(quic::Connection* conn) override {
    auto stream = conn->OpenBidiStream();
    ASSERT_TRUE(stream.ok());
    // Type 0x20 (CLIENT_SETUP), length 3, payload claiming 200 versions.
    const uint8_t bytes[] = {0x20, 0x00, 0x03, 0x40, 0xc8, 0x01};
    ASSERT_TRUE(conn->Send(*stream, absl::Span<const uint8_t>(bytes, sizeof(bytes)), false).ok());
  }
  void OnStreamData(quic::Connection*, int64_t, absl::Span<const uint8_t>, bool) override {}
  void OnClosed(quic::Connection*, const absl::Status& reason) override {
    closed = true;
    status = reason;
  }
  bool closed = false;
  absl::Status status;
};

TEST(MoqtSessionTest, MalformedControlMessageClosesWithProtocolViolation) {
  GarbageClient garbage;
  RelayHarness h;
  std::unique_ptr<quic::Client> client;
  h.thread()->RunSync([&] {
    quic::TlsOptions tls;
    tls.ca_file = h.certs().ca_cert;
    tls.server_name = "localhost";
    auto c = quic::Client::Connect(h.loop(), "127.0.0.1", h.port(), tls,
                                   quic::TransportOptions{}, &garbage);
    ASSERT_TRUE(c.ok()) << c.status();
    client = std::move(*c);
  });
  ASSERT_TRUE(WaitOnLoop(h.thread(), [&] { return garbage.closed; }));
  h.thread()->RunSync([&] {
    EXPECT_NE(std::string(garbage.status.message()).find("0x3"), std::string::npos)
        << garbage.status;
    client.reset();
  });
}

}  // namespace
}  // namespace kvcast::moqt
