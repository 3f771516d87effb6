#include "services/common/shutdown.h"

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace kvcast::services {
namespace {

std::unique_ptr<ShutdownSignal> MustCreate() {
  auto s = ShutdownSignal::Create();
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

void (*HandlerOf(int sig))(int) {
  struct sigaction sa;
  sigaction(sig, nullptr, &sa);
  return sa.sa_handler;
}

TEST(ShutdownSignalTest, TriggerFromAnotherThreadWakesAllWaiters) {
  auto stop = MustCreate();
  ASSERT_NE(stop, nullptr);
  EXPECT_FALSE(stop->triggered());
  std::atomic<int> woke{0};
  std::thread a([&] { stop->Wait(); ++woke; });
  std::thread b([&] { if (stop->WaitFor(absl::Seconds(30))) ++woke; });
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(woke.load(), 0);
  std::thread([&] { stop->Trigger(); }).join();
  a.join();
  b.join();
  EXPECT_EQ(woke.load(), 2);
  EXPECT_TRUE(stop->triggered());
  EXPECT_TRUE(stop->WaitFor(absl::ZeroDuration()));  // Stays triggered.
  EXPECT_EQ(stop->signal_number(), 0);
}

TEST(ShutdownSignalTest, WaitForTimesOut) {
  auto stop = MustCreate();
  ASSERT_NE(stop, nullptr);
  absl::Time start = absl::Now();
  EXPECT_FALSE(stop->WaitFor(absl::Milliseconds(100)));
  absl::Duration took = absl::Now() - start;
  EXPECT_GE(took, absl::Milliseconds(100));
  EXPECT_LT(took, absl::Seconds(2));
  EXPECT_FALSE(stop->triggered());
}

TEST(ShutdownSignalTest, RaiseSigtermWakesWaitAndResetsHandler) {
  auto stop = MustCreate();
  ASSERT_NE(stop, nullptr);
  std::atomic<bool> woke{false};
  std::thread waiter([&] { stop->Wait(); woke = true; });
  absl::SleepFor(absl::Milliseconds(20));
  raise(SIGTERM);  // Handled on this thread, not the waiting one.
  waiter.join();
  EXPECT_TRUE(woke);
  EXPECT_EQ(stop->signal_number(), SIGTERM);
  // SA_RESETHAND: a second SIGTERM would now terminate; SIGINT still ours.
  EXPECT_EQ(HandlerOf(SIGTERM), SIG_DFL);
  EXPECT_NE(HandlerOf(SIGINT), SIG_DFL);
}

TEST(ShutdownSignalTest, SignalOnAnUnrelatedThreadWakesWait) {
  auto stop = MustCreate();
  ASSERT_NE(stop, nullptr);
  std::atomic<bool> quit{false};
  std::thread busy([&] { while (!quit) absl::SleepFor(absl::Milliseconds(1)); });
  pthread_kill(busy.native_handle(), SIGINT);
  EXPECT_TRUE(stop->WaitFor(absl::Seconds(10)));
  EXPECT_EQ(stop->signal_number(), SIGINT);
  quit = true;
  busy.join();
}

void Custom(int) {}

TEST(ShutdownSignalTest, OneInstanceAndRestoresPreviousHandlers) {
  struct sigaction sa = {}, saved_int, saved_term;
  sa.sa_handler = Custom;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &saved_int);
  sigaction(SIGTERM, &sa, &saved_term);
  {
    auto stop = MustCreate();
    ASSERT_NE(stop, nullptr);
    EXPECT_NE(HandlerOf(SIGTERM), Custom);
    auto second = ShutdownSignal::Create();
    ASSERT_FALSE(second.ok());
    EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  }
  EXPECT_EQ(HandlerOf(SIGINT), Custom);
  EXPECT_EQ(HandlerOf(SIGTERM), Custom);
  EXPECT_NE(MustCreate(), nullptr);  // Allowed again once the first is gone.
  sigaction(SIGINT, &saved_int, nullptr);
  sigaction(SIGTERM, &saved_term, nullptr);
}

}  // namespace
}  // namespace kvcast::services
