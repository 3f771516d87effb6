#include "engine/sampling/logprobs.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace kvcast {
namespace {

TEST(Logprobs, AreTheLogSoftmaxOfTheLogits) {
  const std::vector<float> logits = {1.f, 2.f, 3.f, -INFINITY};
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  const TokenLogprob lp = ComputeLogprobs(logits, 1, 0);
  EXPECT_NEAR(lp.logprob, 2.0 - lse, 1e-6);
  EXPECT_TRUE(lp.top.empty());
  EXPECT_EQ(ComputeLogprobs(logits, 3, 0).logprob, -INFINITY);
}

TEST(Logprobs, TopAreTheMostLikelyInOrderWithTiesToTheLowerId) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> d(-5, 5);
  std::vector<float> logits(1000);
  for (float& x : logits) x = d(rng);
  logits[700] = logits[12] = 9.f;  // a tie at the top
  const TokenLogprob lp = ComputeLogprobs(logits, 5, 20);
  ASSERT_EQ(lp.top.size(), 20u);
  EXPECT_EQ(lp.top[0].first, 12);
  EXPECT_EQ(lp.top[1].first, 700);
  std::vector<float> sorted = logits;
  std::sort(sorted.begin(), sorted.end(), std::greater<float>());
  double sum = 0;
  for (float x : logits) sum += std::exp(double(x) - 9.0);
  for (int k = 0; k < 20; ++k) {
    EXPECT_EQ(logits[size_t(lp.top[k].first)], sorted[size_t(k)]) << k;
    EXPECT_NEAR(lp.top[k].second, sorted[size_t(k)] - (9.0 + std::log(sum)), 1e-5) << k;
  }
  // More than the limit, or than the vocabulary, is clamped.
  EXPECT_EQ(ComputeLogprobs(logits, 5, 50).top.size(), size_t(kMaxTopLogprobs));
  EXPECT_EQ(ComputeLogprobs(std::vector<float>{0.f, 1.f}, 0, 5).top.size(), 2u);
}

}  // namespace
}  // namespace kvcast
