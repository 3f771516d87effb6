// SharedLandings: one turn per key, handed to the waiters in order, with
// keepalive ticks while waiting and a cancelled waiter leaving the line.
#include "services/decode/shared_landings.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace kvcast::decode {
namespace {

const Hash128 kPrompt{1, 2};
const Hash128 kOther{3, 4};
constexpr absl::Duration kTick = absl::Milliseconds(20);

// Waits (at most 5 s) for `pred`.
template <typename Pred>
bool Eventually(Pred pred) {
  const absl::Time until = absl::Now() + absl::Seconds(5);
  while (!pred()) {
    if (absl::Now() > until) return false;
    absl::SleepFor(absl::Milliseconds(2));
  }
  return true;
}

TEST(SharedLandingsTest, AWaiterGetsTheTurnWhenTheHolderGivesItBackTickingMeanwhile) {
  SharedLandings landings;
  services::CallWait first_wait(nullptr), second_wait(nullptr), other_wait(nullptr);
  auto first = landings.Take(kPrompt, &first_wait, kTick, nullptr);
  ASSERT_TRUE(first.ok());
  EXPECT_FALSE(first->waited());
  // Another key is not held up.
  {
    auto other = landings.Take(kOther, &other_wait, kTick, nullptr);
    ASSERT_TRUE(other.ok());
    EXPECT_FALSE(other->waited());
    EXPECT_EQ(landings.held(), 2);
  }
  std::atomic<int> ticks{0};
  std::atomic<bool> got{false}, waited{false};
  std::thread second([&] {
    auto turn = landings.Take(kPrompt, &second_wait, kTick, [&] { ++ticks; });
    waited = turn.ok() && turn->waited();
    got = turn.ok();
  });
  absl::SleepFor(absl::Milliseconds(150));
  EXPECT_FALSE(got.load());
  EXPECT_GE(ticks.load(), 3);  // about every 20 ms while it waits
  { auto gone = std::move(*first); }  // the holder gives the turn back
  second.join();
  EXPECT_TRUE(got.load());
  EXPECT_TRUE(waited.load());
  EXPECT_EQ(landings.held(), 0);  // the second's turn ended with its thread
}

TEST(SharedLandingsTest, TurnsGoInOrderAndACancelledWaiterLeavesTheLine) {
  SharedLandings landings;
  services::CallWait holder_wait(nullptr);
  std::optional<SharedLandings::Turn> holder;
  holder.emplace(*landings.Take(kPrompt, &holder_wait, kTick, nullptr));
  std::atomic<bool> cancel{false};
  services::CallWait quitter_wait([&] { return cancel.load(); });
  services::CallWait a_wait(nullptr), b_wait(nullptr);
  std::vector<int> order;
  absl::Mutex mu;
  absl::Status quitter_status;
  std::thread quitter([&] { quitter_status = landings.Take(kPrompt, &quitter_wait, kTick, nullptr).status(); });
  absl::SleepFor(absl::Milliseconds(30));
  std::thread a([&] {
    auto turn = landings.Take(kPrompt, &a_wait, kTick, nullptr);
    absl::MutexLock lock(&mu);
    order.push_back(1);
  });
  absl::SleepFor(absl::Milliseconds(30));
  std::thread b([&] {
    auto turn = landings.Take(kPrompt, &b_wait, kTick, nullptr);
    absl::MutexLock lock(&mu);
    order.push_back(2);
  });
  absl::SleepFor(absl::Milliseconds(30));
  cancel = true;  // first in line, it gives up before its turn
  quitter.join();
  EXPECT_EQ(quitter_status.code(), absl::StatusCode::kCancelled) << quitter_status;
  holder.reset();
  a.join();
  b.join();
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  EXPECT_TRUE(Eventually([&] { return landings.held() == 0; }));
}

}  // namespace
}  // namespace kvcast::decode
