#include "services/common/call_wait.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace kvcast::services {
namespace {

TEST(CallWaitTest, ANotificationBeforeTheWaitIsNotLost) {
  CallWait wait([] { return false; });
  wait.Notify();
  EXPECT_EQ(wait.Wait(absl::Now() + absl::Seconds(10)), CallWait::kNotified);
  // Consumed: the next wait times out.
  const absl::Time t0 = absl::Now();
  EXPECT_EQ(wait.Wait(absl::Now() + absl::Milliseconds(30)), CallWait::kTimeout);
  EXPECT_GE(absl::Now() - t0, absl::Milliseconds(30));
}

TEST(CallWaitTest, ANotifyFromAnotherThreadWakesTheWaiter) {
  CallWait wait([] { return false; });
  std::thread t([&] {
    absl::SleepFor(absl::Milliseconds(30));
    wait.Notify();
  });
  const absl::Time t0 = absl::Now();
  EXPECT_EQ(wait.Wait(absl::Now() + absl::Seconds(10)), CallWait::kNotified);
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
  t.join();
}

TEST(CallWaitTest, ACancelledCallWakesItsWaiterOnce) {
  std::atomic<bool> cancelled{false};
  CallWait wait([&] { return cancelled.load(); });
  std::thread t([&] {
    absl::SleepFor(absl::Milliseconds(30));
    cancelled = true;
  });
  const absl::Time t0 = absl::Now();
  EXPECT_EQ(wait.Wait(absl::Now() + absl::Seconds(10)), CallWait::kCancelled);
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
  t.join();
  EXPECT_TRUE(wait.cancelled());
  // Reported once: then the waiter sleeps until its work winds down (a
  // notification) or its deadline, instead of spinning.
  EXPECT_EQ(wait.Wait(absl::Now() + absl::Milliseconds(30)), CallWait::kTimeout);
  std::thread winding_down([&] {
    absl::SleepFor(absl::Milliseconds(30));
    wait.Notify();
  });
  EXPECT_EQ(wait.Wait(absl::Now() + absl::Seconds(10)), CallWait::kNotified);
  winding_down.join();
}

TEST(CallWaitTest, TheCallIsAskedOnlyWhileSomeoneWaits) {
  // A wait kept alive past its call (by a callback's shared state) must not
  // read the call's context any more: it may be gone.
  std::atomic<int> asked{0};
  CallWait wait([&] {
    ++asked;
    return false;
  });
  EXPECT_EQ(wait.Wait(absl::Now() + absl::Milliseconds(100)), CallWait::kTimeout);
  EXPECT_GE(asked.load(), 1);
  const int after = asked.load();
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(asked.load(), after);
}

TEST(CallWaitTest, AWaitWithNoCallIsWokenByItsWorkOnly) {
  CallWait wait(nullptr);
  EXPECT_EQ(wait.Wait(absl::Now() + absl::Milliseconds(30)), CallWait::kTimeout);
  wait.Notify();
  EXPECT_EQ(wait.Wait(absl::Now() + absl::Seconds(10)), CallWait::kNotified);
  EXPECT_FALSE(wait.cancelled());
}

TEST(CallWaitTest, OnlyTheCancelledCallOfManyWakes) {
  std::vector<std::unique_ptr<std::atomic<bool>>> flags;
  std::vector<std::unique_ptr<CallWait>> waits;
  for (int i = 0; i < 50; ++i) {
    flags.push_back(std::make_unique<std::atomic<bool>>(false));
    std::atomic<bool>* f = flags.back().get();
    waits.push_back(std::make_unique<CallWait>([f] { return f->load(); }));
  }
  std::vector<CallWait::Woke> woke(50);
  std::vector<std::thread> threads;
  for (int i = 0; i < 50; ++i) {
    threads.emplace_back([&, i] { woke[i] = waits[i]->Wait(absl::Now() + absl::Milliseconds(400)); });
  }
  absl::SleepFor(absl::Milliseconds(50));
  *flags[7] = true;
  for (auto& t : threads) t.join();
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(woke[i], i == 7 ? CallWait::kCancelled : CallWait::kTimeout) << i;
  }
  waits.clear();  // destroyed while registered: the watcher lets go of them
}

}  // namespace
}  // namespace kvcast::services
