// KvLanding over real loopback QUIC through a relay, from a KvPublisher:
// a subscribed prompt lands exactly, a fetch lands the groups asked for, a
// track cut short hands over its leading whole groups only when asked, and
// Abort or a refused request release the pages and report why.
#include "services/worker/kv_landing.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "transport/kvcache/naming.h"
#include "transport/kvcache/publisher.h"
#include "services/worker/testing/kv_test_util.h"
#include "transport/moqt/testing/moqt_test_util.h"

namespace kvcast::worker {
namespace {

using moqt::testing::ClientHandler;
using moqt::testing::RelayHarness;
using moqt::testing::WaitOnLoop;
using testing::FillRandom;
using testing::HoldsFp16Copy;
using testing::TestMemory;
using testing::UpstreamPublisher;

const Hash128 kModel{0x1234, 0x5678};
constexpr int kChunk = 32, kTokens = 96, kPageTokens = 16;  // 3 groups of 2 pages
const KvLayout kLayout{2, 2, 32, kPageTokens};

// What a landing's done callback saw.
struct Outcome {
  bool done = false;
  absl::StatusOr<KvPages> pages = absl::UnknownError("pending");
};

class KvLandingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    h_.thread()->RunSync([&] {
      publisher_ = std::make_unique<UpstreamPublisher>(pub_.pool.get(), pub_.backend.get(), kModel,
                                                       kChunk);
      prompt_ = *pub_.pool->Allocate(kTokens / kPageTokens);
    });
    FillRandom(pub_.pool.get(), 7);
    publisher_client_ = h_.Connect(publisher_.get());
    client_ = h_.Connect(&client_handler_);
    free_before_ = dec_.pool->free_pages();
  }
  void TearDown() override {
    h_.thread()->RunSync([&] { landing_.reset(); });
    h_.Disconnect(client_);
    h_.Disconnect(publisher_client_);  // the publisher is its handler
    h_.thread()->RunSync([&] {
      publisher_.reset();
      prompt_.Reset();
    });
  }

  // Publishes groups [0, groups) of prompt `digest` (kTokens tokens), then
  // ends it with `end` (unless `open`).
  void Publish(const std::string& digest, int groups, const absl::Status& end, bool open = false) {
    h_.thread()->RunSync([&] {
      ASSERT_TRUE(publisher_->BeginPrompt(digest, kTokens).ok());
      for (int g = 0; g < groups; ++g) {
        ASSERT_TRUE(publisher_->ChunkReady(digest, g, *prompt_.Share(2 * g, 2)).ok());
      }
      if (!open) (void)publisher_->EndPrompt(digest, end);
    });
  }

  moqt::FullTrackName Track(const std::string& digest) {
    return kvcache::FullTrackNameOf(
        {kvcache::ModelId(track_model_), digest, kvcache::KvCompression(KvFormat::kFp16)});
  }

  // Starts landing groups [first, end) of `digest`'s fp16 track; false if
  // Start itself failed (then `outcome` holds why).
  bool Start(const std::string& digest, int first, int end, KvLanding::Mode mode, bool keep) {
    bool started = false;
    h_.thread()->RunSync([&] {
      kvcache::LandingSpec spec;
      spec.chunk_tokens = kChunk;
      spec.num_tokens = kTokens;
      spec.first_group = first;
      spec.end_group = end;
      spec.pages = *dec_.pool->Allocate((end - first) * kChunk / kPageTokens);
      spec.keep_whole_groups = keep;
      auto landing = KvLanding::Start(client_->session(), dec_.pool.get(), dec_.backend.get(),
                                      kModel, Track(digest), std::move(spec), mode, "",
                                      [this](absl::StatusOr<KvPages> r) {
                                        outcome_.done = true;
                                        outcome_.pages = std::move(r);
                                      });
      started = landing.ok();
      if (started) {
        landing_ = *std::move(landing);
      } else {
        outcome_.done = true;
        outcome_.pages = landing.status();
      }
    });
    return started;
  }
  bool WaitDone() {
    return WaitOnLoop(h_.thread(), [&] { return outcome_.done; }, absl::Seconds(20));
  }

  // Whether the landed pages hold tokens [first, first + n) of the prompt,
  // through fp16 as the track carries them.
  ::testing::AssertionResult HoldsPrompt(const KvPages& pages, int first, int n) {
    return HoldsFp16Copy(*pub_.pool, prompt_, first, *dec_.pool, pages, n);
  }
  int PagesHeld() { return free_before_ - dec_.pool->free_pages(); }
  void Release() {
    h_.thread()->RunSync([&] {
      if (outcome_.pages.ok()) outcome_.pages->Reset();
      landing_.reset();
    });
  }

  // As a cluster's relay: a subscription may come before the prompt's
  // publisher announces it.
  static moqt::RelayOptions Waiting() {
    moqt::RelayOptions o;
    o.subscribe_wait = absl::Seconds(2);
    return o;
  }
  RelayHarness h_{Waiting()};
  TestMemory pub_{kLayout, 64}, dec_{kLayout, 64};
  std::unique_ptr<UpstreamPublisher> publisher_;
  KvPages prompt_;
  ClientHandler client_handler_;
  moqt::MoqtClient* client_ = nullptr;
  moqt::MoqtClient* publisher_client_ = nullptr;
  std::shared_ptr<KvLanding> landing_;
  Hash128 track_model_ = kModel;  // whose KV Track() names
  Outcome outcome_;
  int free_before_ = 0;
};

std::string Digest(char c) { return std::string(32, c); }

TEST_F(KvLandingTest, ASubscribedPromptLandsExactly) {
  ASSERT_TRUE(Start(Digest('a'), 0, 3, KvLanding::Mode::kSubscribe, false));
  Publish(Digest('a'), 3, absl::OkStatus());  // computed after the subscription
  ASSERT_TRUE(WaitDone());
  ASSERT_TRUE(outcome_.pages.ok()) << outcome_.pages.status();
  EXPECT_EQ(outcome_.pages->size(), kTokens / kPageTokens);
  EXPECT_TRUE(HoldsPrompt(*outcome_.pages, 0, kTokens));
  h_.thread()->RunSync([&] {
    EXPECT_EQ(landing_->tokens_landed(), kTokens);
    EXPECT_TRUE(landing_->shortfall().ok());
    EXPECT_EQ(landing_->bytes_landed(), uint64_t(kTokens) * 2 * kLayout.num_layers * 64 * 2);
    EXPECT_NE(landing_->first_object_at(), absl::InfiniteFuture());
  });
  Release();
  EXPECT_EQ(PagesHeld(), 0);
}

TEST_F(KvLandingTest, AFetchLandsTheGroupsAskedFor) {
  Publish(Digest('b'), 3, absl::OkStatus());
  ASSERT_TRUE(Start(Digest('b'), 1, 3, KvLanding::Mode::kFetch, false));
  ASSERT_TRUE(WaitDone());
  ASSERT_TRUE(outcome_.pages.ok()) << outcome_.pages.status();
  EXPECT_EQ(outcome_.pages->size(), 2 * kChunk / kPageTokens);
  EXPECT_TRUE(HoldsPrompt(*outcome_.pages, kChunk, 2 * kChunk));
  Release();
  EXPECT_EQ(PagesHeld(), 0);
}

TEST_F(KvLandingTest, ATrackCutShortKeepsItsWholeGroupsOnlyWhenAsked) {
  // The publisher computes two of three chunks, then fails.
  ASSERT_TRUE(Start(Digest('c'), 0, 3, KvLanding::Mode::kSubscribe, /*keep=*/true));
  Publish(Digest('c'), 2, absl::UnavailableError("prefill worker lost"));
  ASSERT_TRUE(WaitDone());
  ASSERT_TRUE(outcome_.pages.ok()) << outcome_.pages.status();
  EXPECT_EQ(outcome_.pages->size(), 2 * kChunk / kPageTokens) << "the two whole groups";
  EXPECT_TRUE(HoldsPrompt(*outcome_.pages, 0, 2 * kChunk));
  h_.thread()->RunSync([&] {
    EXPECT_EQ(landing_->shortfall().code(), absl::StatusCode::kUnavailable) << landing_->shortfall();
  });
  EXPECT_EQ(PagesHeld(), 2 * kChunk / kPageTokens) << "the third group's pages went back";
  Release();
  EXPECT_EQ(PagesHeld(), 0);

  outcome_ = Outcome();
  ASSERT_TRUE(Start(Digest('f'), 0, 3, KvLanding::Mode::kSubscribe, /*keep=*/false));
  Publish(Digest('f'), 2, absl::UnavailableError("prefill worker lost"));
  ASSERT_TRUE(WaitDone());
  EXPECT_FALSE(outcome_.pages.ok()) << "without keep_whole_groups a cut track is an error";
  Release();
  EXPECT_EQ(PagesHeld(), 0);
}

TEST_F(KvLandingTest, AbortReleasesThePagesAndReportsItsReason) {
  Publish(Digest('d'), 1, absl::OkStatus(), /*open=*/true);  // the rest never comes
  ASSERT_TRUE(Start(Digest('d'), 0, 3, KvLanding::Mode::kSubscribe, true));
  EXPECT_TRUE(WaitOnLoop(h_.thread(), [&] { return landing_->tokens_landed() == kChunk; }));
  EXPECT_EQ(PagesHeld(), kTokens / kPageTokens);
  h_.thread()->RunSync([&] { landing_->Abort(absl::CancelledError("the client went away")); });
  ASSERT_TRUE(outcome_.done);
  EXPECT_EQ(outcome_.pages.status().code(), absl::StatusCode::kCancelled);
  EXPECT_NE(outcome_.pages.status().message().find("the client went away"), std::string::npos);
  EXPECT_EQ(PagesHeld(), 0);
  Release();
}

// A track the lander refuses (another model's KV) fails Start itself, with
// nothing asked of the relay, the pages released, the worker still up.
TEST_F(KvLandingTest, ATrackTheLanderRefusesFailsAtStartAndReleasesThePages) {
  track_model_ = Hash128{0x9999, 0x5678};
  EXPECT_FALSE(Start(Digest('9'), 0, 3, KvLanding::Mode::kSubscribe, true));
  EXPECT_EQ(outcome_.pages.status().code(), absl::StatusCode::kInvalidArgument)
      << outcome_.pages.status();
  EXPECT_EQ(PagesHeld(), 0);
  // The session goes on: a landing of this model's track still works.
  track_model_ = kModel;
  outcome_ = Outcome();
  Publish(Digest('8'), 3, absl::OkStatus());
  ASSERT_TRUE(Start(Digest('8'), 0, 3, KvLanding::Mode::kFetch, false));
  ASSERT_TRUE(WaitDone());
  EXPECT_TRUE(outcome_.pages.ok()) << outcome_.pages.status();
  Release();
  EXPECT_EQ(PagesHeld(), 0);
}

TEST_F(KvLandingTest, AnUnknownPromptFailsAndReleasesThePages) {
  const bool started = Start(Digest('e'), 0, 3, KvLanding::Mode::kFetch, true);
  if (started) ASSERT_TRUE(WaitDone());
  EXPECT_FALSE(outcome_.pages.ok());
  Release();
  EXPECT_EQ(PagesHeld(), 0);
}

}  // namespace
}  // namespace kvcast::worker
