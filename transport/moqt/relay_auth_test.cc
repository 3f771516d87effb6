// MoQT authorization over real loopback QUIC: a relay whose sessions carry
// an HmacTokenAuthority refuses PUBLISH_NAMESPACE, SUBSCRIBE, FETCH and
// TRACK_STATUS without a valid token (the draft's error codes, counted) and
// serves them with one; token forms the draft makes session errors close it.
#include <gtest/gtest.h>

#include "transport/moqt/authorization.h"
#include "transport/moqt/relay.h"
#include "transport/moqt/testing/moqt_test_util.h"

namespace kvcast::moqt {
namespace {

using testing::AsSpan;
using testing::Bytes;
using testing::ClientHandler;
using testing::CollectingConsumer;
using testing::RelayHarness;
using testing::WaitOnLoop;

const TrackNamespace kNs = {"kvcast", "model", "prompt1"};
const FullTrackName kTrack = {kNs, "fp16"};
const FullTrackName kOtherTrack = {{"kvcast", "model", "prompt2"}, "fp16"};

std::shared_ptr<HmacTokenAuthority> NewAuthority(char fill) {
  auto a = HmacTokenAuthority::Create({std::string(32, fill)});
  EXPECT_TRUE(a.ok());
  return *a;
}

// Publishes kNs (one group of 4 objects, ended) and announces it upstream
// with `announce_params`.
class Origin : public Relay {
 public:
  Origin(quic::EventLoop* loop, Parameters announce_params)
      : Relay(loop, RelayOptions{}), announce_params_(std::move(announce_params)) {
    AddLocalNamespace(kNs);
    for (int o = 0; o < 4; ++o) {
      ObjectHeader h;
      h.object = o;
      std::string p = Bytes(0, o, 100);
      PublishObject(kTrack, h, AsSpan(p));
    }
    EndTrack(kTrack);
  }
  void OnSessionReady(MoqtSession* session) override {
    (void)session->PublishNamespace(kNs, [this](absl::Status s) { announce = s; answered = true; },
                                    announce_params_);
  }
  Parameters announce_params_;
  bool answered = false;
  absl::Status announce;
};

class RelayAuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    authority_ = NewAuthority('k');
    SessionOptions server;
    server.authorizer = authority_;
    harness_ = std::make_unique<RelayHarness>(RelayOptions{}, server);
  }
  void TearDown() override {
    harness_.reset();
    origins_.clear();
  }
  Origin* ConnectOrigin(Parameters params) {
    harness_->thread()->RunSync(
        [&] { origins_.push_back(std::make_unique<Origin>(harness_->loop(), params)); });
    Origin* o = origins_.back().get();
    EXPECT_NE(harness_->Connect(o), nullptr);
    EXPECT_TRUE(WaitOnLoop(harness_->thread(), [&] { return o->answered; }));
    return o;
  }
  // SUBSCRIBE (from the start) or FETCH of group 0 with `params`; returns
  // the reply and, when accepted, waits for the objects.
  absl::Status Request(bool fetch, const FullTrackName& track, Parameters params,
                       size_t* objects = nullptr) {
    MoqtClient* client = harness_->Connect(&client_handler_);
    auto consumer = std::make_shared<CollectingConsumer>();
    absl::Status reply = absl::UnknownError("no reply");
    bool replied = false;
    harness_->thread()->RunSync([&] {
      auto on_reply = [&](absl::StatusOr<TrackInfo> info) {
        reply = info.status();
        replied = true;
      };
      absl::StatusOr<uint64_t> id;
      if (fetch) {
        Fetch f;
        f.track = track;
        f.start = Location{0, 0};
        f.end = Location{0, 0};
        f.parameters = params;
        id = client->session()->Fetch(f, consumer, on_reply);
      } else {
        Subscribe s;
        s.track = track;
        s.filter_type = FilterType::kAbsoluteStart;
        s.start = Location{0, 0};
        s.parameters = params;
        id = client->session()->Subscribe(s, consumer, on_reply);
      }
      EXPECT_TRUE(id.ok());
    });
    EXPECT_TRUE(WaitOnLoop(harness_->thread(), [&] { return replied; }));
    if (reply.ok() && objects != nullptr) {
      EXPECT_TRUE(WaitOnLoop(harness_->thread(), [&] { return consumer->objects.size() == 4; }));
      harness_->thread()->RunSync([&] { *objects = consumer->objects.size(); });
    }
    harness_->Disconnect(client);
    return reply;
  }
  Parameters Token(const TrackNamespace& prefix, uint8_t ops,
                   absl::Duration ttl = absl::Minutes(1)) const {
    return {authority_->MintParameter(prefix, ops, absl::Now() + ttl)};
  }

  std::shared_ptr<HmacTokenAuthority> authority_;
  std::unique_ptr<RelayHarness> harness_;
  std::vector<std::unique_ptr<Origin>> origins_;
  ClientHandler client_handler_;
};

TEST_F(RelayAuthTest, PublishNamespaceNeedsATokenForThatNamespace) {
  Origin* none = ConnectOrigin({});
  EXPECT_EQ(none->announce.code(), absl::StatusCode::kPermissionDenied) << none->announce;
  EXPECT_NE(std::string(none->announce.message()).find("peer error 0x1:"), std::string::npos);
  Origin* read_only = ConnectOrigin(Token(kNs, kAuthRead));
  EXPECT_EQ(read_only->announce.code(), absl::StatusCode::kPermissionDenied);
  Origin* ok = ConnectOrigin(Token(kNs, kAuthPublishNamespace));
  EXPECT_TRUE(ok->announce.ok()) << ok->announce;
  EXPECT_EQ(authority_->stats().unauthorized, 2u);
}

TEST_F(RelayAuthTest, SubscribeAndFetchNeedATokenScopedToTheirNamespace) {
  ASSERT_TRUE(ConnectOrigin(Token(kNs, kAuthPublishNamespace))->announce.ok());
  for (bool fetch : {false, true}) {
    SCOPED_TRACE(fetch ? "FETCH" : "SUBSCRIBE");
    EXPECT_EQ(Request(fetch, kTrack, {}).code(), absl::StatusCode::kPermissionDenied);
    // A token for another prompt does not open this one.
    absl::Status wrong = Request(fetch, kTrack, Token(kOtherTrack.ns, kAuthRead));
    EXPECT_NE(std::string(wrong.message()).find("token is for"), std::string::npos) << wrong;
    // Forged: minted under another key.
    Parameters forged = {NewAuthority('x')->MintParameter(kNs, kAuthRead,
                                                          absl::Now() + absl::Minutes(1))};
    EXPECT_EQ(Request(fetch, kTrack, forged).code(), absl::StatusCode::kPermissionDenied);
    absl::Status expired = Request(fetch, kTrack, Token(kNs, kAuthRead, -absl::Seconds(1)));
    EXPECT_NE(std::string(expired.message()).find("peer error 0x12:"), std::string::npos)
        << expired;
    size_t objects = 0;
    absl::Status ok = Request(fetch, kTrack, Token(kNs, kAuthRead), &objects);
    EXPECT_TRUE(ok.ok()) << ok;
    EXPECT_EQ(objects, 4u);
  }
  HmacTokenAuthority::Stats st = authority_->stats();
  EXPECT_EQ(st.unauthorized, 6u);
  EXPECT_EQ(st.expired, 2u);
  EXPECT_EQ(st.allowed, 3u);  // the announce, one subscribe, one fetch
}

// A refusal naming a 4 KB namespace still fits the 1024-byte reason phrase:
// the session stays up.
TEST_F(RelayAuthTest, RefusalOfAHugeNamespaceKeepsTheSession) {
  ClientHandler handler;
  MoqtClient* client = harness_->Connect(&handler);
  TrackNamespace huge = {std::string(2000, 'a'), std::string(2000, 'b')};
  bool answered = false;
  absl::Status answer;
  harness_->thread()->RunSync([&] {
    Parameters wrong = Token(kNs, kAuthPublishNamespace);
    EXPECT_TRUE(client->session()
                    ->PublishNamespace(huge, [&](absl::Status s) {
                      answered = true;
                      answer = s;
                    }, wrong)
                    .ok());
  });
  ASSERT_TRUE(WaitOnLoop(harness_->thread(), [&] { return answered; }));
  EXPECT_EQ(answer.code(), absl::StatusCode::kPermissionDenied) << answer;
  harness_->thread()->RunSync([&] { EXPECT_FALSE(client->session()->closed()); });
  EXPECT_FALSE(handler.closed);
  harness_->Disconnect(client);  // before `handler` goes away
}

TEST_F(RelayAuthTest, TokenAliasesCloseTheSessionAsTheDraftSays) {
  ClientHandler handler;
  MoqtClient* client = harness_->Connect(&handler);
  harness_->thread()->RunSync([&] {
    Subscribe s;
    s.track = kTrack;
    AuthToken reg{AuthAliasType::kRegister, 1, 0, "abc"};
    s.parameters = {AuthTokenParameter(reg)};
    EXPECT_TRUE(client->session()->Subscribe(s, std::make_shared<CollectingConsumer>(),
                                             [](auto) {}).ok());
  });
  ASSERT_TRUE(WaitOnLoop(harness_->thread(), [&] { return handler.closed; }));
  EXPECT_NE(handler.close_reason.ToString().find("0x13"), std::string::npos)
      << handler.close_reason;
  harness_->Disconnect(client);  // before `handler` goes away
}

}  // namespace
}  // namespace kvcast::moqt
