#include "services/scheduler/stall_watchdog.h"

#include <thread>

#include "gtest/gtest.h"

namespace kvcast::scheduler {
namespace {

TEST(StallWatchdog, FiresOnlyWhenTheBoundPassesWithoutProgress) {
  StallWatchdog dog(absl::Milliseconds(5));
  grpc::ClientContext stalled, progressing, finished;
  auto a = dog.Start(&stalled, absl::Milliseconds(60));
  auto b = dog.Start(&progressing, absl::Milliseconds(60));
  {
    auto c = dog.Start(&finished, absl::Milliseconds(30));
  }  // destroyed before its bound: never fires
  for (int i = 0; i < 10; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    b->Extend(absl::Milliseconds(60));
  }
  EXPECT_TRUE(a->fired());
  EXPECT_FALSE(b->fired());
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  EXPECT_TRUE(b->fired());  // no Extend for 150 ms > 60 ms
}

}  // namespace
}  // namespace kvcast::scheduler
