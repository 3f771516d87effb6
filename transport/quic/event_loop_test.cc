#include "transport/quic/event_loop.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace kvcast::quic {
namespace {

std::unique_ptr<LoopThread> StartLoop() {
  absl::StatusOr<std::unique_ptr<LoopThread>> lt = LoopThread::Start();
  EXPECT_TRUE(lt.ok()) << lt.status();
  return std::move(*lt);
}

TEST(EventLoopTest, PostRunsTasksInOrderOnLoopThread) {
  auto lt = StartLoop();
  std::vector<int> order;
  absl::Notification done;
  for (int i = 0; i < 100; ++i) {
    lt->loop()->Post([&, i] {
      EXPECT_TRUE(lt->loop()->InLoopThread());
      order.push_back(i);
      if (i == 99) done.Notify();
    });
  }
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(5)));
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
  EXPECT_FALSE(lt->loop()->InLoopThread());
}

TEST(EventLoopTest, PostFromManyThreads) {
  auto lt = StartLoop();
  std::atomic<int> count{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) lt->loop()->Post([&] { ++count; });
    });
  }
  for (auto& t : threads) t.join();
  lt->RunSync([] {});
  EXPECT_EQ(count.load(), 4000);
}

TEST(EventLoopTest, TimersFireInDeadlineOrderAndCancelWorks) {
  auto lt = StartLoop();
  std::vector<int> fired;
  absl::Notification done;
  absl::Time start = absl::Now();
  lt->RunSync([&] {
    EventLoop* loop = lt->loop();
    loop->RunAfter(absl::Milliseconds(30), [&] { fired.push_back(3); });
    loop->RunAfter(absl::Milliseconds(10), [&] { fired.push_back(1); });
    EventLoop::TimerId cancelled =
        loop->RunAfter(absl::Milliseconds(20), [&] { fired.push_back(2); });
    loop->Cancel(cancelled);
    loop->RunAfter(absl::Milliseconds(40), [&] { done.Notify(); });
  });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(40));
  EXPECT_EQ(fired, (std::vector<int>{1, 3}));
}

TEST(EventLoopTest, SubMillisecondTimerIsNotRoundedToMilliseconds) {
  auto lt = StartLoop();
  absl::Notification done;
  absl::Time start, end;
  lt->RunSync([&] {
    start = absl::Now();
    lt->loop()->RunAfter(absl::Microseconds(200), [&] {
      end = absl::Now();
      done.Notify();
    });
  });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_GE(end - start, absl::Microseconds(200));
}

TEST(EventLoopTest, FdReadableAndWritableCallbacks) {
  auto lt = StartLoop();
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_NONBLOCK), 0);
  std::atomic<int> reads{0};
  absl::Notification readable, writable;
  lt->RunSync([&] {
    ASSERT_TRUE(lt->loop()
                    ->AddFd(fds[0],
                            [&] {
                              char buf[16];
                              while (read(fds[0], buf, sizeof(buf)) > 0) {
                              }
                              ++reads;
                              readable.Notify();
                            })
                    .ok());
    ASSERT_TRUE(lt->loop()->AddFd(fds[1], [] {}).ok());
    EXPECT_FALSE(lt->loop()->AddFd(fds[0], [] {}).ok());  // Twice.
    ASSERT_TRUE(
        lt->loop()->WatchWritableOnce(fds[1], [&] { writable.Notify(); }).ok());
  });
  ASSERT_TRUE(writable.WaitForNotificationWithTimeout(absl::Seconds(5)));
  ASSERT_EQ(write(fds[1], "x", 1), 1);
  ASSERT_TRUE(readable.WaitForNotificationWithTimeout(absl::Seconds(5)));
  lt->RunSync([&] {
    lt->loop()->RemoveFd(fds[0]);
    lt->loop()->RemoveFd(fds[1]);
    EXPECT_FALSE(lt->loop()->WatchWritableOnce(fds[1], [] {}).ok());
  });
  int before = reads.load();
  ASSERT_EQ(write(fds[1], "y", 1), 1);
  lt->RunSync([] {});
  EXPECT_EQ(reads.load(), before);
  close(fds[0]);
  close(fds[1]);
}

TEST(EventLoopTest, StopFromTaskEndsRun) {
  absl::StatusOr<std::unique_ptr<EventLoop>> loop = EventLoop::Create();
  ASSERT_TRUE(loop.ok());
  int ran = 0;
  (*loop)->Post([&] { ++ran; });
  (*loop)->Post([&] {
    ++ran;
    (*loop)->Stop();
  });
  (*loop)->Post([&] { ++ran; });  // After Stop: not run by this Run().
  std::thread t([&] { (*loop)->Run(); });
  t.join();
  EXPECT_EQ(ran, 2);
}

}  // namespace
}  // namespace kvcast::quic
