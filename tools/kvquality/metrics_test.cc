#include "tools/kvquality/metrics.h"

#include <cmath>

#include "gtest/gtest.h"

namespace kvcast::kvquality {
namespace {

TEST(ScorePositions, NllKlAndTopOneOfTwoTokens) {
  // exact: p = (1/4, 3/4); track: (1/2, 1/2).
  const std::vector<float> exact = {0.f, std::log(3.f)}, track = {0.f, 0.f};
  const std::vector<int32_t> targets = {0};
  const auto s = ScorePositions(exact, track, 2, targets);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_NEAR(s[0].nll_exact, std::log(4.0), 1e-6);
  EXPECT_NEAR(s[0].nll_track, std::log(2.0), 1e-6);
  EXPECT_NEAR(s[0].kl, 0.25 * std::log(0.5) + 0.75 * std::log(1.5), 1e-6);
  EXPECT_FALSE(s[0].top1_agrees);  // exact picks token 1, the track (a tie) token 0
}

TEST(ScorePositions, RowsPredictTheirOwnTargets) {
  const std::vector<float> logits = {5.f, 0.f, 0.f, 5.f};  // row 0 likes 0, row 1 likes 1
  const auto s = ScorePositions(logits, logits, 2, std::vector<int32_t>{0, 0});
  ASSERT_EQ(s.size(), 2u);
  EXPECT_LT(s[0].nll_exact, 0.01);
  EXPECT_GT(s[1].nll_exact, 5.0);
  EXPECT_EQ(s[1].kl, 0.0);
  EXPECT_TRUE(s[1].top1_agrees);
}

TEST(Summarize, IdenticalRunsChangeNothing) {
  const std::vector<std::vector<PositionScore>> w = {{{2.0, 2.0, 0.0, true}, {1.0, 1.0, 0.0, true}},
                                                     {{3.0, 3.0, 0.0, true}}};
  const TrackQuality q = Summarize(w, 500);
  EXPECT_EQ(q.windows, 2);
  EXPECT_EQ(q.positions, 3);
  EXPECT_NEAR(q.ppl_exact, std::exp(2.0), 1e-9);
  EXPECT_EQ(q.ppl_change, 0.0);
  EXPECT_EQ(q.ppl_change_lo, 0.0);
  EXPECT_EQ(q.ppl_change_hi, 0.0);
  EXPECT_EQ(q.top1, 1.0);
}

TEST(Summarize, PairedIntervalHoldsThePointAndStaysInsideTheWindowsExtremes) {
  // Window 0: the track loses 0.5 nat a position; window 1: nothing.
  const std::vector<std::vector<PositionScore>> w = {
      {{1.0, 1.5, 0.2, false}, {1.0, 1.5, 0.4, true}}, {{2.0, 2.0, 0.0, true}, {2.0, 2.0, 0.0, true}}};
  const TrackQuality q = Summarize(w, 2000);
  EXPECT_NEAR(q.ppl_change, std::expm1(1.0 / 4), 1e-12);
  EXPECT_LE(q.ppl_change_lo, q.ppl_change);
  EXPECT_GE(q.ppl_change_hi, q.ppl_change);
  EXPECT_GE(q.ppl_change_lo, 0.0);                    // no resample is better than exact
  EXPECT_LE(q.ppl_change_hi, std::expm1(0.5) + 1e-12);  // nor worse than window 0 alone
  EXPECT_LT(q.ppl_change_lo, q.ppl_change_hi);
  EXPECT_NEAR(q.mean_kl, 0.15, 1e-12);
  EXPECT_NEAR(q.first_kl, 0.1, 1e-12);
  EXPECT_EQ(q.top1, 0.75);
  // The same scores give the same interval.
  const TrackQuality again = Summarize(w, 2000);
  EXPECT_EQ(again.ppl_change_lo, q.ppl_change_lo);
  EXPECT_EQ(again.ppl_change_hi, q.ppl_change_hi);
}

TEST(Summarize, Percentile999IsTheNearestRank) {
  std::vector<PositionScore> positions(2000);
  for (int i = 0; i < 2000; ++i) positions[i].kl = 1999 - i;  // unsorted on purpose
  const TrackQuality q = Summarize({positions}, 10);
  EXPECT_EQ(q.p999_kl, 1997.0);  // rank ceil(0.999 * 2000) = 1998 of 0..1999
  EXPECT_EQ(q.first_kl, 1999.0);
}

}  // namespace
}  // namespace kvcast::kvquality
