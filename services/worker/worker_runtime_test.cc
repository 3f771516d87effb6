// WorkerRuntime with the tiny model (cpu-f32) on loopback ports: a submitted
// request streams its tokens from the compute thread and ends once; a
// cancelled one ends cancelled; the start-up calibration is measured; a
// stopped runtime refuses new requests; and the drain check finds pages a
// request handler kept (the leak check every worker runs at exit) and
// passes once they are back.
#include "services/worker/worker_runtime.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "services/worker/testing/test_worker.h"

namespace kvcast::worker {
namespace {

class NoRequests : public moqt::RequestHandler {};

// What one request's callback saw (called on the compute thread).
class Events {
 public:
  WorkerRuntime::EventCallback Callback() {
    return [this](const SequenceEvent& ev) {
      absl::MutexLock lock(&mu_);
      if (ev.token >= 0) tokens_.push_back(ev.token);
      if (ev.finish != FinishReason::kNone) {
        ++finishes_;
        last_ = ev;
      }
    };
  }
  // Waits for the request's end; false after 30 s.
  bool WaitEnd() {
    absl::MutexLock lock(&mu_);
    auto ended = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return finishes_ > 0; };
    return mu_.AwaitWithTimeout(absl::Condition(&ended), absl::Seconds(30));
  }
  bool WaitTokens(size_t n) {
    absl::MutexLock lock(&mu_);
    auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return tokens_.size() >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(30));
  }
  std::vector<int32_t> tokens() {
    absl::MutexLock lock(&mu_);
    return tokens_;
  }
  SequenceEvent last() {
    absl::MutexLock lock(&mu_);
    return last_;
  }
  int finishes() {
    absl::MutexLock lock(&mu_);
    return finishes_;
  }

 private:
  absl::Mutex mu_;
  std::vector<int32_t> tokens_ ABSL_GUARDED_BY(mu_);
  int finishes_ ABSL_GUARDED_BY(mu_) = 0;
  SequenceEvent last_ ABSL_GUARDED_BY(mu_);
};

class WorkerRuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto rt = testing::StartTestWorker(v1::WORKER_ROLE_DECODE,
                                       ::testing::TempDir() + "/runtime_worker");
    ASSERT_TRUE(rt.ok()) << rt.status();
    rt_ = std::move(*rt);
    ASSERT_TRUE(rt_->Serve(&handler_, {}).ok());
  }
  void TearDown() override {
    if (rt_ != nullptr) rt_->Shutdown(absl::ZeroDuration());
  }
  static std::vector<int32_t> Prompt(int n) {
    std::vector<int32_t> p(n);
    for (int i = 0; i < n; ++i) p[i] = 3 + (i * 37) % 200;
    return p;
  }
  static GenerationParams Greedy(int max_tokens) {
    GenerationParams g;
    g.max_tokens = max_tokens;
    g.ignore_eos = true;
    return g;
  }

  NoRequests handler_;
  std::unique_ptr<WorkerRuntime> rt_;
};

TEST_F(WorkerRuntimeTest, ARequestStreamsItsTokensAndEndsOnce) {
  Events a, b;
  ASSERT_TRUE(rt_->Submit(Prompt(40), Greedy(12), PrefilledKv(), a.Callback()).ok());
  ASSERT_TRUE(a.WaitEnd());
  EXPECT_EQ(a.tokens().size(), 12u);
  EXPECT_EQ(a.finishes(), 1);
  EXPECT_EQ(a.last().finish, FinishReason::kLength);
  EXPECT_EQ(a.last().prompt_tokens, 40);
  EXPECT_EQ(a.last().generated_tokens, 12);
  // The same prompt again: the same greedy tokens (and its prompt's full
  // chunk from the prefix cache).
  ASSERT_TRUE(rt_->Submit(Prompt(40), Greedy(12), PrefilledKv(), b.Callback()).ok());
  ASSERT_TRUE(b.WaitEnd());
  EXPECT_EQ(b.tokens(), a.tokens());
  // The compute advanced, and the start-up calibration measured the model.
  EXPECT_GT(rt_->progress(), 0u);
  EXPECT_GT(rt_->calibration().chunk_ms, 0);
  EXPECT_GT(rt_->calibration().step_ms, 0);
  rt_->Shutdown(absl::ZeroDuration());
  EXPECT_TRUE(rt_->CheckPagesReleased().ok());
}

TEST_F(WorkerRuntimeTest, ACancelledRequestEndsCancelledAndGivesItsPagesBack) {
  Events e;
  auto id = rt_->Submit(Prompt(20), Greedy(1000), PrefilledKv(), e.Callback());
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_TRUE(e.WaitTokens(2));
  rt_->Cancel(*id);
  ASSERT_TRUE(e.WaitEnd());
  EXPECT_EQ(e.last().finish, FinishReason::kCancelled);
  EXPECT_EQ(e.finishes(), 1);
  EXPECT_LT(e.tokens().size(), 1000u);
  rt_->Shutdown(absl::ZeroDuration());
  EXPECT_TRUE(rt_->CheckPagesReleased().ok());
}

TEST_F(WorkerRuntimeTest, AStoppedRuntimeRefusesRequests) {
  rt_->Shutdown(absl::ZeroDuration());
  ASSERT_TRUE(rt_->CheckPagesReleased().ok());  // stops the compute thread
  Events e;
  auto id = rt_->Submit(Prompt(8), Greedy(4), PrefilledKv(), e.Callback());
  EXPECT_TRUE(absl::IsUnavailable(id.status())) << id.status();
}

TEST_F(WorkerRuntimeTest, TheDrainCheckFindsPagesAHandlerKept) {
  Events e;
  ASSERT_TRUE(rt_->Submit(Prompt(40), Greedy(4), PrefilledKv(), e.Callback()).ok());
  ASSERT_TRUE(e.WaitEnd());
  // A handler that took pages and never gave them back.
  absl::StatusOr<KvPages> kept = rt_->engine().pool().Allocate(3);
  ASSERT_TRUE(kept.ok()) << kept.status();
  rt_->Shutdown(absl::ZeroDuration());
  const absl::Status leak = rt_->CheckPagesReleased();
  EXPECT_TRUE(absl::IsInternal(leak)) << leak;
  EXPECT_NE(leak.message().find("3 of"), std::string::npos) << leak;
  kept->Reset();
  EXPECT_TRUE(rt_->CheckPagesReleased().ok());  // again, with the pages back
}

}  // namespace
}  // namespace kvcast::worker
