#include "services/common/work_pool.h"

#include <atomic>
#include <thread>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace kvcast::services {
namespace {

TEST(WorkPoolTest, RunsEverythingPostedOffTheCallersThread) {
  std::atomic<int> ran{0};
  std::atomic<bool> on_caller{false};
  const auto caller = std::this_thread::get_id();
  {
    WorkPool pool(2, 1000);
    for (int i = 0; i < 100; ++i) {
      ASSERT_TRUE(pool.Post([&] {
        if (std::this_thread::get_id() == caller) on_caller = true;
        ++ran;
      }));
    }
  }  // the destructor runs what is queued
  EXPECT_EQ(ran.load(), 100);
  EXPECT_FALSE(on_caller.load());
}

TEST(WorkPoolTest, ABoundedQueueRefusesWhenFull) {
  absl::Notification release;
  WorkPool pool(1, 2);
  absl::Notification started;
  ASSERT_TRUE(pool.Post([&] {
    started.Notify();
    release.WaitForNotification();
  }));
  started.WaitForNotification();  // the thread is busy; the queue is empty
  EXPECT_TRUE(pool.Post([] {}));
  EXPECT_TRUE(pool.Post([] {}));
  EXPECT_FALSE(pool.Post([] {})) << "2 queued already";
  EXPECT_EQ(pool.queued(), 2u);
  release.Notify();
}

}  // namespace
}  // namespace kvcast::services
