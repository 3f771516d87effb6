// LandKv over real loopback QUIC through a relay, from a KvPublisher, as a
// gRPC handler thread calls it: it lands a prompt published after it asked,
// calling `tick` while it waits; a pool short of pages waits for others to
// give theirs back (and gives up after its bound); a cancelled landing
// aborts; a publisher it cannot reach fails. Whatever the outcome, every
// page it took is back in the pool.
#include "services/worker/land_kv.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/time/clock.h"
#include "kernels/backend.h"
#include "transport/kvcache/naming.h"
#include "transport/kvcache/publisher.h"
#include "services/worker/testing/kv_test_util.h"
#include "transport/moqt/testing/moqt_test_util.h"

namespace kvcast::worker {
namespace {

using moqt::testing::ClientHandler;
using moqt::testing::RelayHarness;
using testing::FillRandom;
using testing::HoldsFp16Copy;
using testing::TestMemory;
using testing::UpstreamPublisher;

const Hash128 kModel{0x1234, 0x5678};
constexpr int kChunk = 32, kTokens = 96, kPageTokens = 16;  // 3 groups of 2 pages
constexpr int kPoolPages = 16;
const KvLayout kLayout{2, 2, 32, kPageTokens};

std::string Digest(char c) { return std::string(32, c); }

class LandKvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    h_.thread()->RunSync([&] {
      publisher_ = std::make_unique<UpstreamPublisher>(pub_.pool.get(), pub_.backend.get(), kModel,
                                                       kChunk);
      prompt_ = *pub_.pool->Allocate(kTokens / kPageTokens);
    });
    FillRandom(pub_.pool.get(), 11);
    publisher_client_ = h_.Connect(publisher_.get());
    client_ = h_.Connect(&client_handler_);
  }
  void TearDown() override {
    h_.Disconnect(client_);
    h_.Disconnect(publisher_client_);
    h_.thread()->RunSync([&] {
      publisher_.reset();
      prompt_.Reset();
    });
  }

  // The decode side of a worker: this test's loop, pool and client session.
  KvLandingTarget Target() {
    KvLandingTarget t;
    t.run_on_loop = [this](std::function<void()> fn) { h_.thread()->RunSync(std::move(fn)); };
    t.session_for = [this](const std::string& address) -> absl::StatusOr<moqt::MoqtSession*> {
      if (address != "relay") return absl::UnavailableError("no session to " + address);
      return client_->session();
    };
    t.pool = dec_.pool.get();
    t.backend = dec_.backend.get();
    t.fingerprint = kModel;
    return t;
  }
  KvRequest Request(const std::string& digest) {
    KvRequest r;
    r.address = "relay";
    r.track = kvcache::FullTrackNameOf(
        {kvcache::ModelId(kModel), digest, kvcache::KvCompression(KvFormat::kFp16)});
    r.chunk_tokens = kChunk;
    r.num_tokens = kTokens;
    r.end_group = kTokens / kChunk;
    return r;
  }
  void Publish(const std::string& digest) {
    h_.thread()->RunSync([&] {
      ASSERT_TRUE(publisher_->BeginPrompt(digest, kTokens).ok());
      for (int g = 0; g < kTokens / kChunk; ++g) {
        ASSERT_TRUE(publisher_->ChunkReady(digest, g, *prompt_.Share(2 * g, 2)).ok());
      }
      ASSERT_TRUE(publisher_->EndPrompt(digest, absl::OkStatus()).ok());
    });
  }
  // Whether the landed pages hold the prompt's K and V (through fp16).
  ::testing::AssertionResult HoldsPrompt(const KvPages& pages) {
    return HoldsFp16Copy(*pub_.pool, prompt_, 0, *dec_.pool, pages, kTokens);
  }
  // Gives back what a landing returned, on the loop (as a worker's engine would).
  void Release(absl::StatusOr<KvLanded>* landed) {
    h_.thread()->RunSync([&] {
      if (landed->ok()) (*landed)->pages.Reset();
    });
  }

  RelayHarness h_{[] {
    moqt::RelayOptions o;
    o.subscribe_wait = absl::Seconds(5);  // a subscription may come before its prompt
    return o;
  }()};
  TestMemory pub_{kLayout, 64}, dec_{kLayout, kPoolPages};
  std::unique_ptr<UpstreamPublisher> publisher_;
  KvPages prompt_;
  ClientHandler client_handler_;
  moqt::MoqtClient* client_ = nullptr;
  moqt::MoqtClient* publisher_client_ = nullptr;
};

TEST_F(LandKvTest, LandsAPromptPublishedLaterAndTicksWhileItWaits) {
  std::atomic<int> ticks{0};
  std::thread later([&] {
    absl::SleepFor(absl::Milliseconds(700));
    Publish(Digest('a'));
  });
  auto landed = LandKv(Target(), Request(Digest('a')), nullptr, [&] { ++ticks; });
  later.join();
  ASSERT_TRUE(landed.ok()) << landed.status();
  EXPECT_EQ(landed->tokens, kTokens);
  EXPECT_EQ(landed->pages.size(), kTokens / kPageTokens);
  EXPECT_TRUE(landed->shortfall.ok());
  EXPECT_EQ(landed->bytes, uint64_t(kTokens) * 2 * kLayout.num_layers * kLayout.token_floats() * 2);
  EXPECT_TRUE(HoldsPrompt(landed->pages));
  // Every 250 ms while it waited 700 ms or more.
  EXPECT_GE(ticks.load(), 2);
  Release(&landed);
  EXPECT_EQ(dec_.pool->free_pages(), kPoolPages);
}

TEST_F(LandKvTest, APoolShortOfPagesWaitsForOthersToGiveThemBack) {
  Publish(Digest('b'));
  KvPages held;
  h_.thread()->RunSync([&] { held = *dec_.pool->Allocate(kPoolPages - 2); });  // 2 left, 6 needed
  std::thread giver([&] {
    absl::SleepFor(absl::Milliseconds(600));
    h_.thread()->RunSync([&] { held.Reset(); });
  });
  std::atomic<int> ticks{0};
  auto landed = LandKv(Target(), Request(Digest('b')), nullptr, [&] { ++ticks; });
  giver.join();
  ASSERT_TRUE(landed.ok()) << landed.status();
  EXPECT_TRUE(HoldsPrompt(landed->pages));
  EXPECT_GE(ticks.load(), 1);  // it ticked while it waited for pages
  Release(&landed);
  EXPECT_EQ(dec_.pool->free_pages(), kPoolPages);
}

TEST_F(LandKvTest, APoolThatStaysShortGivesUpAfterItsBound) {
  Publish(Digest('c'));
  KvPages held;
  h_.thread()->RunSync([&] { held = *dec_.pool->Allocate(kPoolPages - 2); });
  const absl::Time start = absl::Now();
  auto landed = LandKv(Target(), Request(Digest('c')), nullptr, nullptr);
  const absl::Duration took = absl::Now() - start;
  EXPECT_TRUE(absl::IsResourceExhausted(landed.status())) << landed.status();
  EXPECT_GE(took, absl::Milliseconds(1900));  // the 2-s bound, not at once
  EXPECT_LT(took, absl::Seconds(10));
  h_.thread()->RunSync([&] { held.Reset(); });
  EXPECT_EQ(dec_.pool->free_pages(), kPoolPages);
}

TEST_F(LandKvTest, ACancelledLandingAbortsAndGivesItsPagesBack) {
  // Never published: the landing waits on its subscription until cancelled.
  const absl::Time cancel_at = absl::Now() + absl::Milliseconds(500);
  const absl::Time start = absl::Now();
  auto landed = LandKv(Target(), Request(Digest('d')), [&] { return absl::Now() >= cancel_at; },
                       nullptr);
  EXPECT_TRUE(absl::IsCancelled(landed.status())) << landed.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(4));  // well before the relay's 5-s wait
  // The loop thread drops the landing's pages as the abort completes.
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (dec_.pool->free_pages() != kPoolPages && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(dec_.pool->free_pages(), kPoolPages);
}

TEST_F(LandKvTest, APublisherItCannotReachFailsAndGivesItsPagesBack) {
  KvRequest r = Request(Digest('e'));
  r.address = "nowhere";
  auto landed = LandKv(Target(), r, nullptr, nullptr);
  EXPECT_TRUE(absl::IsUnavailable(landed.status())) << landed.status();
  EXPECT_NE(landed.status().message().find("nowhere"), std::string::npos);
  EXPECT_EQ(dec_.pool->free_pages(), kPoolPages);
}

}  // namespace
}  // namespace kvcast::worker
