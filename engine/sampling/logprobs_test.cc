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

// A vocabulary-sized row of many exact ties (logits on a coarse grid): the
// top tokens are a stable sort's (ties to the lower id) and the
// log-probabilities those of a double-precision log-softmax, on whichever
// path the CPU takes (this test also runs as _scalar and _avx2).
TEST(Logprobs, AVocabularyOfTiesMatchesASortAndADoubleSum) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> d(-40, 40);
  std::vector<float> logits(49152 + 5);
  for (float& x : logits) x = 0.25f * float(d(rng));
  logits[49153] = 10.f;  // the largest, in the tail past the last block of 64
  double ref_sum = 0;
  for (float x : logits) ref_sum += std::exp(double(x) - 10.0);
  const double lse = 10.0 + std::log(ref_sum);
  std::vector<int32_t> order(logits.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = int32_t(i);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  for (int top : {1, 5, 20}) {
    const TokenLogprob lp = ComputeLogprobs(logits, 3, top);
    EXPECT_NEAR(lp.logprob, logits[3] - lse, 1e-5);
    ASSERT_EQ(lp.top.size(), size_t(top));
    for (int k = 0; k < top; ++k) {
      EXPECT_EQ(lp.top[size_t(k)].first, order[size_t(k)]) << top << " " << k;
      EXPECT_NEAR(lp.top[size_t(k)].second, logits[order[size_t(k)]] - lse, 1e-5) << k;
    }
  }
  // One finite logit among -inf: probability 1; an inf: the scalar sums.
  std::vector<float> one(4096, -INFINITY);
  one[4000] = 3.f;
  EXPECT_EQ(ComputeLogprobs(one, 4000, 1).logprob, 0.f);
  EXPECT_EQ(ComputeLogprobs(one, 4000, 1).top[0].first, 4000);
  EXPECT_EQ(ComputeLogprobs(one, 7, 0).logprob, -INFINITY);
}

}  // namespace
}  // namespace kvcast
