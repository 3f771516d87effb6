#include "services/decode/kv_abr.h"

#include <cstdio>
#include <string>

#include "gtest/gtest.h"

namespace kvcast::decode {
namespace {

constexpr double kFp16Token = 131072;  // Llama-3-8B
constexpr int kChunk = 128;

std::vector<AbrTrack> Ladder() {
  auto l = ParseAbrLadder("fp16,ac,ac-lo", kFp16Token);
  EXPECT_TRUE(l.ok()) << l.status();
  return *l;
}

TEST(AbrLadder, ParsesNamesAndRefusesDisorder) {
  const auto l = Ladder();
  ASSERT_EQ(l.size(), 3u);
  EXPECT_EQ(l[0].bytes_per_token, kFp16Token);
  EXPECT_EQ(kvcache::TrackNameOf(l[2].compression), "ac-lo");
  auto four = ParseAbrLadder("fp16,int8,ac,ac-lo", kFp16Token);
  ASSERT_TRUE(four.ok());
  EXPECT_EQ((*four)[1].bytes_per_token, kFp16Token / 2);
  EXPECT_EQ(ParseAbrLadder("int8,fp16", kFp16Token).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseAbrLadder("fp16,zstd", kFp16Token).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseAbrLadder("", kFp16Token).status().code(), absl::StatusCode::kInvalidArgument);
  // The xl tracks (workers with a KV basis): xl between ac and ac-lo, xl-lo last.
  auto xl = ParseAbrLadder("fp16,ac,xl,ac-lo,xl-lo", kFp16Token);
  ASSERT_TRUE(xl.ok()) << xl.status();
  EXPECT_LT((*xl)[2].bytes_per_token, (*xl)[1].bytes_per_token);
  EXPECT_LT((*xl)[4].bytes_per_token, (*xl)[3].bytes_per_token);
  EXPECT_FALSE(ParseAbrLadder("fp16,xl-lo,xl", kFp16Token).ok());
}

// A 4K-token Llama-3-8B prompt's KV (32 groups, 512 MiB in fp16) in a 4 s
// budget over a link that steps 1 Gbit/s -> 100 Mbit/s (from 1 s to 2 s)
// -> 1 Gbit/s. fp16 alone would take 5.2 s; the planner's tracks follow
// the steps and the KV lands in time.
TEST(AbrPlanner, FollowsBandwidthStepsAndMeetsTheBudget) {
  auto link = [](double t) { return t >= 1 && t < 2 ? 12.5e6 : 125e6; };  // bytes/s
  // Seconds to move `bytes` starting at `t` over the stepped link.
  auto transfer = [&](double t, double bytes) {
    double start = t;
    while (bytes > 0) {
      const double edge = t < 1 ? 1 : t < 2 ? 2 : 1e9;
      const double can = (edge - t) * link(t);
      if (can >= bytes) return t + bytes / link(t) - start;
      bytes -= can;
      t = edge;
    }
    return t - start;
  };
  const int groups = 32;
  double fp16_time = 0;
  for (int g = 0; g < groups; ++g) fp16_time += transfer(fp16_time, kChunk * kFp16Token);
  EXPECT_GT(fp16_time, 4.0) << "fp16 alone misses the budget";

  AbrPlanner p(Ladder(), /*budget_s=*/4.0, /*initial_goodput=*/125e6);
  double elapsed = 0;
  std::vector<int> chosen, phase;
  for (int g = 0; g < groups; ++g) {
    const int t = p.Choose(kChunk, (groups - g) * kChunk, elapsed);
    ASSERT_NE(t, AbrPlanner::kStop) << "group " << g;
    const double bytes = kChunk * p.ladder()[t].bytes_per_token;
    const double seconds = transfer(elapsed, bytes);
    phase.push_back(elapsed < 1 ? 0 : elapsed < 2 ? 1 : 2);
    chosen.push_back(t);
    elapsed += seconds;
    p.Observe(t, bytes, kChunk, seconds);
  }
  EXPECT_LE(elapsed, 4.0);
  std::string log;
  for (int g = 0; g < groups; ++g) {
    log += kvcache::TrackNameOf(p.ladder()[chosen[g]].compression) + (g + 1 < groups ? " " : "");
  }
  std::printf("tracks per group (1G, 100M from 1 s, 1G from 2 s): %s; landed in %.2f s, fp16 %.2f s\n",
              log.c_str(), elapsed, fp16_time);
  auto track_in = [&](int ph, bool last) {
    int v = -1;
    for (int g = 0; g < groups; ++g) {
      if (phase[g] == ph && (v < 0 || last)) v = chosen[g];
    }
    return v;
  };
  // The groups after the slow step get smaller tracks than the last one
  // before it (the very first is chosen before any measurement), and bigger
  // ones again once the link is back.
  EXPECT_GT(track_in(1, true), track_in(0, true));
  EXPECT_LT(track_in(2, true), track_in(1, true));
}

TEST(AbrPlanner, BestTrackWhenEverythingFits) {
  AbrPlanner p(Ladder(), 10.0, 1e9);
  EXPECT_EQ(p.Choose(kChunk, 32 * kChunk, 0), 0);
}

TEST(AbrPlanner, StopsWhenNotEvenTheSmallestGroupFits) {
  AbrPlanner p(Ladder(), 0.5, 1e6);  // 1 MB/s
  // The smallest track for one group: 128 x 0.13 x 128 KiB = 2.2 MB, 2.2 s.
  EXPECT_EQ(p.Choose(kChunk, 32 * kChunk, 0), AbrPlanner::kStop);
  // With time to spare for one group but not for all: the smallest track.
  AbrPlanner q(Ladder(), 10.0, 1e6);
  EXPECT_EQ(q.Choose(kChunk, 32 * kChunk, 0), 2);
}

TEST(AbrPlanner, LearnsBytesPerTokenAndGoodput) {
  AbrPlanner p(Ladder(), 1.0, 100e6);
  p.Observe(2, 128 * 30000.0, 128, 0.01);  // ac came out at 30 KB/token, at 384 MB/s
  EXPECT_EQ(p.ladder()[2].bytes_per_token, 30000.0);
  EXPECT_DOUBLE_EQ(p.goodput(), 0.5 * 100e6 + 0.5 * 128 * 30000.0 / 0.01);
}

}  // namespace
}  // namespace kvcast::decode
