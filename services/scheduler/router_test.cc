#include "services/scheduler/router.h"

#include "gtest/gtest.h"

namespace kvcast::scheduler {
namespace {

Candidate Worker(WorkerSlot slot, int64_t backlog = 0, int active = 0, int free_pages = 1000) {
  Candidate c;
  c.slot = slot;
  c.backlog_tokens = backlog;
  c.active = active;
  c.free_pages = free_pages;
  return c;
}

TEST(RouterTest, PrefillPrefersTheHolderOfTheLongestPrefix) {
  RouterOptions o;
  auto plan = ChoosePrefill({Worker(1), Worker(2), Worker(3)}, 1000, {{2, 4}, {3, 6}}, 0, o);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->slot, 3u);
  EXPECT_EQ(plan->cached_chunks, 6);
  EXPECT_EQ(plan->fetched_chunks, 0);
}

TEST(RouterTest, NeverReusesTheLastToken) {
  RouterOptions o;
  // 256 tokens = exactly 2 chunks: only chunk 0 may be reused.
  auto plan = ChoosePrefill({Worker(1)}, 256, {{1, 2}}, 2, o);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->cached_chunks, 1);
  EXPECT_EQ(plan->fetched_chunks, 0);
}

TEST(RouterTest, AHotPrefixSpillsWhenItsHolderIsBusy) {
  RouterOptions o;
  // Worker 1 holds 4 of 5 chunks (128 tokens to compute) but has 3000
  // tokens queued; worker 2 is idle: recomputing 640 tokens there, charged
  // 512 x (1 + miss_weight 4) more, still ends sooner.
  auto plan = ChoosePrefill({Worker(1, 3000, 4), Worker(2)}, 640, {{1, 4}}, 0, o);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->slot, 2u);
  // 2000 queued would end sooner than 640 computed on an idle worker, but
  // not by the 2048 tokens of cluster work a spill adds: the holder keeps it.
  plan = ChoosePrefill({Worker(1, 2000, 4), Worker(2)}, 640, {{1, 4}}, 0, o);
  EXPECT_EQ(plan->slot, 1u);
  o.miss_weight = 0;  // a greedy router spills it
  plan = ChoosePrefill({Worker(1, 2000, 4), Worker(2)}, 640, {{1, 4}}, 0, o);
  EXPECT_EQ(plan->slot, 2u);
}

TEST(RouterTest, ChunksInThePoolBeatTheSameChunksOnDisk) {
  RouterOptions o;
  // Both hold 4 of 5 chunks; worker 1's are on disk.
  absl::flat_hash_map<WorkerSlot, PrefixIndex::BelowPool> below;
  below[1] = {0, 4};
  auto plan = ChoosePrefill({Worker(1), Worker(2)}, 640, {{1, 4}, {2, 4}}, 0, o, below);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->slot, 2u);
  EXPECT_DOUBLE_EQ(plan->work, 128);
  // Alone, the disk holder still beats recomputing: 128 + 512 x 0.0026.
  plan = ChoosePrefill({Worker(1), Worker(3)}, 640, {{1, 4}}, 0, o, below);
  EXPECT_EQ(plan->slot, 1u);
  EXPECT_NEAR(plan->work, 128 + 512 * o.disk_weight, 1e-9);
  // Where promoting costs more than computing (a weight above 1), recompute.
  o.disk_weight = 2;
  plan = ChoosePrefill({Worker(1), Worker(3)}, 640, {{1, 4}}, 0, o, below);
  EXPECT_EQ(plan->slot, 3u);
}

TEST(RouterTest, FetchingFromARelayBeatsRecomputing) {
  RouterOptions o;
  auto plan = ChoosePrefill({Worker(1), Worker(2, 0, 2)}, 1000, {{2, 1}}, 7, o);
  ASSERT_TRUE(plan);
  // Both can reach 7 chunks (worker 2 holds 1 and fetches 6, worker 1 fetches
  // 7); fetching one more chunk costs 0.1 x 128 x (1 + 4) tokens, less than
  // worker 2's two requests in flight (2 x 64).
  EXPECT_EQ(plan->slot, 1u);
  EXPECT_EQ(plan->fetched_chunks, 7);
  EXPECT_EQ(plan->cached_chunks, 0);
  EXPECT_FALSE(ChoosePrefill({}, 10, {}, 0, o));
}

TEST(RouterTest, DecodeByRoomThenLoadThenHeldPrefixThenFreePages) {
  RouterOptions o;
  // 200 + 60 tokens need 17 pages of 16.
  auto plan = ChooseDecode({Worker(1, 0, 0, 16), Worker(2, 0, 3, 90), Worker(3, 0, 3, 80)}, 200,
                           60, {{3, 1}}, o);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->slot, 3u);
  EXPECT_EQ(plan->cached_chunks, 1);
  EXPECT_FALSE(plan->fused);  // 200 - 128 = 72 tokens to compute > 32
  plan = ChooseDecode({Worker(2, 0, 3, 90), Worker(3, 0, 3, 80)}, 200, 60, {}, o);
  EXPECT_EQ(plan->slot, 2u);
  plan = ChooseDecode({Worker(1, 0, 5, 500), Worker(2, 0, 2, 20)}, 200, 60, {}, o);
  EXPECT_EQ(plan->slot, 2u);
  // Nobody has room: the least loaded still takes it.
  plan = ChooseDecode({Worker(1, 0, 5, 1), Worker(2, 0, 2, 2)}, 200, 60, {}, o);
  EXPECT_EQ(plan->slot, 2u);
  EXPECT_FALSE(ChooseDecode({}, 1, 1, {}, o));
}

TEST(RouterTest, FusesWhenTheDecodeWorkerHasLittleToCompute) {
  RouterOptions o;
  o.fuse_tokens = 64;
  // 300 tokens: holding 2 chunks leaves 44 to compute, 1 chunk 172.
  auto plan = ChooseDecode({Worker(1)}, 300, 16, {{1, 2}}, o);
  ASSERT_TRUE(plan);
  EXPECT_TRUE(plan->fused);
  EXPECT_FALSE(ChooseDecode({Worker(1)}, 300, 16, {{1, 1}}, o)->fused);
  EXPECT_TRUE(ChooseDecode({Worker(1)}, 64, 16, {}, o)->fused);  // a short prompt
  EXPECT_FALSE(ChooseDecode({Worker(1)}, 65, 16, {}, o)->fused);
  // A held prefix never covers the last token: 256 tokens holding both
  // chunks still computes 128.
  EXPECT_FALSE(ChooseDecode({Worker(1)}, 256, 16, {{1, 2}}, o)->fused);
}

}  // namespace
}  // namespace kvcast::scheduler
