#include "services/scheduler/prefix_index.h"

#include <vector>

#include "gtest/gtest.h"

namespace kvcast::scheduler {
namespace {

std::vector<Hash128> Chain(uint64_t base, int n) {
  std::vector<Hash128> c;
  for (int i = 0; i < n; ++i) c.push_back(Hash128{base + uint64_t(i), base * 31});
  return c;
}

TEST(PrefixIndexTest, MatchCountsUnbrokenRunsPerWorker) {
  PrefixIndex index;
  auto chain = Chain(100, 5);
  index.Stored(1, absl::MakeConstSpan(chain).subspan(0, 3));
  index.Stored(2, chain);
  // Worker 3 holds chunks 0, 1 and 3 but not 2: its run stops at 2.
  index.Stored(3, {chain[0], chain[1], chain[3]});
  // Worker 4 holds chunk 1 only: a chain is useless without its start.
  index.Stored(4, {chain[1]});
  auto m = index.Match(chain);
  EXPECT_EQ(m.size(), 3u);
  EXPECT_EQ(m[1], 3);
  EXPECT_EQ(m[2], 5);
  EXPECT_EQ(m[3], 2);
  EXPECT_EQ(m.count(4), 0u);
  EXPECT_EQ(index.num_chunks(), 5u);
}

TEST(PrefixIndexTest, ChunksBelowThePoolAreCountedAndMoveBetweenTiers) {
  PrefixIndex index;
  auto chain = Chain(40, 4);
  index.Stored(1, chain);
  index.Stored(1, {chain[1]}, Tier::kHost);  // demoted: still held
  index.Stored(1, {chain[2]}, Tier::kDisk);
  EXPECT_EQ(index.Match(chain)[1], 4);
  auto b = index.Below(1, chain, 4);
  EXPECT_EQ(b.host, 1);
  EXPECT_EQ(b.disk, 1);
  EXPECT_EQ(index.Below(1, chain, 2).disk, 0) << "only the first n count";
  index.Stored(1, {chain[1], chain[2]});  // promoted back
  b = index.Below(1, chain, 4);
  EXPECT_EQ(b.host + b.disk, 0);
  index.Replace(2, chain, {Tier::kPool, Tier::kDisk});
  EXPECT_EQ(index.Below(2, chain, 4).disk, 1) << "missing tiers: the pool";
  EXPECT_EQ(index.chunks_of(1), 4u);
}

TEST(PrefixIndexTest, EvictionAndSnapshotsAndRemoval) {
  PrefixIndex index;
  auto chain = Chain(7, 4);
  index.Stored(1, chain);
  index.Stored(2, chain);
  index.Evicted(1, {chain[1]});
  EXPECT_EQ(index.Match(chain)[1], 1);
  EXPECT_EQ(index.chunks_of(1), 3u);
  // A snapshot replaces everything the worker held.
  index.Replace(2, {chain[0]});
  EXPECT_EQ(index.Match(chain)[2], 1);
  EXPECT_EQ(index.chunks_of(2), 1u);
  index.RemoveWorker(1);
  index.RemoveWorker(2);
  EXPECT_TRUE(index.Match(chain).empty());
  EXPECT_EQ(index.num_chunks(), 0u);
  // Duplicate events are harmless.
  index.Stored(5, {chain[0], chain[0]});
  index.Evicted(5, {chain[0]});
  index.Evicted(5, {chain[0]});
  EXPECT_EQ(index.num_chunks(), 0u);
}

TEST(PublishedPrefixesTest, LongestTrackAndBound) {
  PublishedPrefixes pub(/*max_chunks=*/6);
  auto a = Chain(1000, 3);
  pub.Add("aaaa", "p:1", a);
  auto b = a;
  b.push_back(Hash128{9, 9});
  b.push_back(Hash128{10, 10});
  EXPECT_EQ(pub.Longest(b).groups, 3);
  EXPECT_EQ(pub.Longest(b).prompt_digest, "aaaa");
  pub.Add("bbbb", "p:2", b);  // 5 chunks; the newest publisher wins
  EXPECT_EQ(pub.Longest(b).groups, 5);
  EXPECT_EQ(pub.Longest(a).prompt_digest, "bbbb");
  EXPECT_EQ(pub.Longest(a).publisher, "p:2");
  EXPECT_LE(pub.size(), 6u);
  // Another prefix pushes the oldest out.
  pub.Add("cccc", "p:3", Chain(5000, 4));
  EXPECT_LE(pub.size(), 6u);
  EXPECT_EQ(pub.Longest(Chain(5000, 4)).groups, 4);
  EXPECT_LT(pub.Longest(b).groups, 5);
  EXPECT_EQ(pub.Longest(Chain(77, 2)).groups, 0);
}

}  // namespace
}  // namespace kvcast::scheduler
