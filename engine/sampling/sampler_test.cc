#include "engine/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvcast {
namespace {

using ::testing::HasSubstr;

constexpr float kInf = std::numeric_limits<float>::infinity();

// Deterministic test logits (an LCG, not the sampler's PRNG) in
// [-scale, scale).
std::vector<float> MakeLogits(size_t n, uint64_t seed, float scale) {
  std::vector<float> logits(n);
  uint64_t state = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (float& v : logits) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const double u = static_cast<double>(state >> 11) * 0x1.0p-53;
    v = static_cast<float>((2.0 * u - 1.0) * scale);
  }
  return logits;
}

std::vector<double> Softmax(const std::vector<float>& logits, double t) {
  const double max = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  double sum = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    p[i] = std::exp((logits[i] - max) / t);
    sum += p[i];
  }
  for (double& v : p) v /= sum;
  return p;
}

// Tokens ranked by (probability desc, index asc).
std::vector<int32_t> Ranked(const std::vector<float>& logits) {
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b];
  });
  return order;
}

// The brute-force nucleus: smallest prefix by rank whose mass >= top_p.
std::set<int32_t> Nucleus(const std::vector<float>& logits, double t,
                          double top_p) {
  const std::vector<double> p = Softmax(logits, t);
  std::set<int32_t> kept;
  double cumulative = 0;
  for (int32_t token : Ranked(logits)) {
    kept.insert(token);
    cumulative += p[token];
    if (cumulative >= top_p) break;
  }
  return kept;
}

std::vector<int> Histogram(Sampler& sampler, const std::vector<float>& logits,
                           int draws) {
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < draws; ++i) {
    const int32_t token = sampler.Sample(logits, {});
    EXPECT_GE(token, 0);
    EXPECT_LT(token, static_cast<int32_t>(logits.size()));
    if (token >= 0 && token < static_cast<int32_t>(logits.size())) {
      ++counts[token];
    }
  }
  return counts;
}

// Asserts observed counts match `expected` probabilities: every frequency
// within `abs_tol`, and Pearson's chi-square below `chi2_limit` (over the
// tokens with nonzero expectation; zero-expectation tokens must not occur).
void ExpectMatchesDistribution(const std::vector<int>& counts,
                               const std::vector<double>& expected,
                               double abs_tol, double chi2_limit) {
  int draws = std::accumulate(counts.begin(), counts.end(), 0);
  double chi2 = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double freq = static_cast<double>(counts[i]) / draws;
    EXPECT_NEAR(freq, expected[i], abs_tol) << "token " << i;
    if (expected[i] == 0) {
      EXPECT_EQ(counts[i], 0) << "token " << i;
      continue;
    }
    const double e = expected[i] * draws;
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
  }
  EXPECT_LT(chi2, chi2_limit);
}

SamplingParams Params(float temperature, int top_k = 0, float top_p = 1.f,
                      uint64_t seed = 1) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.seed = seed;
  return p;
}

TEST(SamplingParamsTest, DefaultsAreValid) {
  EXPECT_TRUE(SamplingParams().Validate().ok());
  EXPECT_TRUE(Params(0.7f, 40, 0.9f).Validate().ok());
}

TEST(SamplingParamsTest, RejectsEachOutOfRangeField) {
  struct Case {
    SamplingParams params;
    std::string field;
    std::string value;
  };
  std::vector<Case> cases;
  SamplingParams p;
  p.temperature = -0.5f;
  cases.push_back({p, "temperature", "-0.5"});
  p = SamplingParams();
  p.temperature = std::numeric_limits<float>::quiet_NaN();
  cases.push_back({p, "temperature", "nan"});
  p = SamplingParams();
  p.top_k = -3;
  cases.push_back({p, "top_k", "-3"});
  p = SamplingParams();
  p.top_p = 0.f;
  cases.push_back({p, "top_p", "0"});
  p = SamplingParams();
  p.top_p = 1.5f;
  cases.push_back({p, "top_p", "1.5"});
  p = SamplingParams();
  p.top_p = -0.25f;
  cases.push_back({p, "top_p", "-0.25"});
  p = SamplingParams();
  p.repetition_penalty = 0.f;
  cases.push_back({p, "repetition_penalty", "0"});
  p = SamplingParams();
  p.repetition_penalty = -2.f;
  cases.push_back({p, "repetition_penalty", "-2"});
  p = SamplingParams();
  p.frequency_penalty = 2.5f;
  cases.push_back({p, "frequency_penalty", "2.5"});
  p = SamplingParams();
  p.presence_penalty = -3.f;
  cases.push_back({p, "presence_penalty", "-3"});
  p = SamplingParams();
  p.logit_bias = {{7, 101.f}};
  cases.push_back({p, "logit_bias", "101"});

  for (const Case& c : cases) {
    const absl::Status status = c.params.Validate();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.field));
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.value));
    EXPECT_FALSE(Sampler::Create(c.params).ok()) << c.field;
  }
}

TEST(SamplerTest, CreateAcceptsValidParams) {
  absl::StatusOr<Sampler> sampler = Sampler::Create(Params(0.f));
  ASSERT_TRUE(sampler.ok());
  EXPECT_EQ(sampler->Sample(std::vector<float>{0.f, 2.f, 1.f}, {}), 1);
}

TEST(SamplerTest, GreedyPicksArgmaxLowestIndexOnTies) {
  Sampler sampler(Params(0.f));
  EXPECT_EQ(sampler.Sample(std::vector<float>{0.1f, 3.f, -2.f, 2.9f}, {}), 1);
  EXPECT_EQ(sampler.Sample(std::vector<float>{1.f, 5.f, 5.f, 5.f}, {}), 1);
  EXPECT_EQ(sampler.Sample(std::vector<float>{-1.f, -3.f}, {}), 0);
  const std::vector<float> big = MakeLogits(128 * 1024, 7, 10.f);
  const int32_t expected = static_cast<int32_t>(
      std::max_element(big.begin(), big.end()) - big.begin());
  EXPECT_EQ(sampler.Sample(big, {}), expected);
}

TEST(SamplerTest, TopK1EqualsGreedyForAnyTemperature) {
  const std::vector<float> logits = MakeLogits(5000, 3, 2.f);
  Sampler greedy(Params(0.f));
  const int32_t best = greedy.Sample(logits, {});
  for (float t : {0.01f, 0.5f, 1.f, 10.f, 1000.f}) {
    Sampler sampler(Params(t, /*top_k=*/1));
    for (int i = 0; i < 200; ++i) {
      ASSERT_EQ(sampler.Sample(logits, {}), best) << "temperature " << t;
    }
  }
}

TEST(SamplerTest, TinyTopPKeepsOnlyTheMax) {
  const std::vector<float> logits = MakeLogits(50000, 11, 1.f);
  const int32_t best = static_cast<int32_t>(
      std::max_element(logits.begin(), logits.end()) - logits.begin());
  Sampler sampler(Params(5.f, 0, 1e-6f));
  for (int i = 0; i < 300; ++i) ASSERT_EQ(sampler.Sample(logits, {}), best);
}

TEST(SamplerTest, TinyTemperatureKeepsOnlyTheMax) {
  Sampler sampler(Params(1e-30f));
  const std::vector<float> logits = {0.5f, 0.9f, 0.89f, -1.f};
  for (int i = 0; i < 300; ++i) ASSERT_EQ(sampler.Sample(logits, {}), 1);
}

TEST(SamplerTest, RepetitionPenaltyDividesPositiveLogits) {
  SamplingParams p = Params(0.f);
  p.repetition_penalty = 2.f;
  Sampler sampler(p);
  const std::vector<float> logits = {2.f, 1.5f, -0.5f};
  EXPECT_EQ(sampler.Sample(logits, {}), 0);
  // 2 / 2 = 1 < 1.5.
  EXPECT_EQ(sampler.Sample(logits, std::vector<int32_t>{0}), 1);
}

TEST(SamplerTest, RepetitionPenaltyMultipliesNegativeLogits) {
  SamplingParams p = Params(0.f);
  p.repetition_penalty = 2.f;
  Sampler sampler(p);
  const std::vector<float> logits = {-1.f, -1.5f};
  // -1 * 2 = -2 < -1.5.
  EXPECT_EQ(sampler.Sample(logits, std::vector<int32_t>{0}), 1);
}

TEST(SamplerTest, RepetitionPenaltyCountsEachTokenOnceAndIgnoresBadIds) {
  SamplingParams p = Params(0.f);
  p.repetition_penalty = 2.f;
  Sampler sampler(p);
  const std::vector<float> logits = {4.f, 1.5f};
  // Applied twice, 4 would become 1 < 1.5; HF applies it once: 2 > 1.5.
  EXPECT_EQ(sampler.Sample(logits, std::vector<int32_t>{0, 0, 0, -1, 99}), 0);
  // Consecutive calls must not leak penalty state.
  EXPECT_EQ(sampler.Sample(logits, {}), 0);
  EXPECT_EQ(sampler.Sample(logits, std::vector<int32_t>{0, 0}), 0);
}

// OpenAI's penalties count the output only (the last `output` tokens of the
// history): frequency per occurrence, presence once; then the pick. The
// logit bias adds to its tokens; none of them picks without the history.
TEST(SamplerTest, FrequencyAndPresencePenaltiesCountTheOutput) {
  SamplingParams p = Params(0.f);
  p.frequency_penalty = 0.5f;
  Sampler frequency(p);
  EXPECT_FALSE(frequency.PicksWithoutHistory());
  const std::vector<float> logits = {3.f, 2.1f, 1.f};
  // Token 0 twice in the output: 3 - 2 x 0.5 = 2 < 2.1.
  EXPECT_EQ(frequency.Sample(logits, std::vector<int32_t>{0, 0}, 2), 1);
  // Once: 2.5 > 2.1; in the prompt part of the history: not counted.
  EXPECT_EQ(frequency.Sample(logits, std::vector<int32_t>{0, 0}, 1), 0);
  EXPECT_EQ(frequency.Sample(logits, std::vector<int32_t>{0, 0, 0, 1}, 1), 0);
  p = Params(0.f);
  p.presence_penalty = 1.f;
  Sampler presence(p);
  // Presence counts once however often: 3 - 1 = 2 < 2.1, and 2.1 - 1 for 1.
  EXPECT_EQ(presence.Sample(logits, std::vector<int32_t>{0, 0, 0, 7, -1}, 5), 1);
  EXPECT_EQ(presence.Sample(logits, std::vector<int32_t>{0, 1}, 2), 0);  // 2 > 1.1
  p = Params(0.f);
  p.presence_penalty = -1.f;  // negative: favours the output
  EXPECT_EQ(Sampler(p).Sample(logits, std::vector<int32_t>{2}, 1), 0);
  p = Params(0.f);
  p.logit_bias = {{2, 2.5f}, {99, 100.f}, {-1, 100.f}};
  Sampler bias(p);
  EXPECT_FALSE(bias.PicksWithoutHistory());
  EXPECT_EQ(bias.Sample(logits, {}), 2);  // 1 + 2.5 > 3; ids outside ignored
}

TEST(SamplerTest, RepetitionPenaltyBelowOneFavoursHistory) {
  SamplingParams p = Params(0.f);
  p.repetition_penalty = 0.5f;
  Sampler sampler(p);
  // 1.5 / 0.5 = 3 > 2.
  EXPECT_EQ(sampler.Sample(std::vector<float>{2.f, 1.5f},
                           std::vector<int32_t>{1}),
            1);
}

TEST(SamplerTest, RepetitionPenaltyShiftsSampledDistribution) {
  SamplingParams p = Params(1.f, 0, 1.f, 5);
  p.repetition_penalty = 3.f;
  Sampler sampler(p);
  const std::vector<float> logits = {3.f, 0.f, -3.f};
  const std::vector<int32_t> history = {0, 2};
  std::vector<int> counts(3, 0);
  const int draws = 20000;
  for (int i = 0; i < draws; ++i) ++counts[sampler.Sample(logits, history)];
  const std::vector<double> expected = Softmax({1.f, 0.f, -9.f}, 1.0);
  ExpectMatchesDistribution(counts, expected, 0.01, 13.8 /* df=2 */);
}

TEST(SamplerTest, SameSeedReproducesSequence) {
  const std::vector<float> logits = MakeLogits(1000, 5, 1.f);
  Sampler a(Params(1.f, 0, 0.95f, 1234));
  Sampler b(Params(1.f, 0, 0.95f, 1234));
  for (int i = 0; i < 2000; ++i) {
    ASSERT_EQ(a.Sample(logits, {}), b.Sample(logits, {})) << "draw " << i;
  }
}

TEST(SamplerTest, DifferentSeedsGiveDifferentSequences) {
  const std::vector<float> logits = MakeLogits(100, 5, 0.5f);
  Sampler a(Params(1.f, 0, 1.f, 1));
  Sampler b(Params(1.f, 0, 1.f, 2));
  int differing = 0;
  const int draws = 2000;
  for (int i = 0; i < draws; ++i) {
    differing += a.Sample(logits, {}) != b.Sample(logits, {});
  }
  // Independent draws over ~100 near-uniform tokens agree ~1% of the time.
  EXPECT_GT(differing, draws * 9 / 10);
}

// What the engine does for a backend pick: the draw from NextDraw, picked by
// a TokenPicker, is the token Sample gives, draw for draw.
TEST(SamplerTest, NextDrawPickedElsewhereEqualsSample) {
  const std::vector<float> logits = MakeLogits(5000, 9, 4.f);
  for (const SamplingParams& p :
       {Params(0.f, 0, 1.f, 1), Params(0.8f, 0, 1.f, 2), Params(0.8f, 40, 1.f, 3),
        Params(1.2f, 0, 0.9f, 4), Params(0.7f, 900, 0.8f, 5)}) {
    Sampler a(p), b(p);
    ASSERT_TRUE(b.PicksWithoutHistory());
    TokenPicker picker;
    for (int i = 0; i < 200; ++i) {
      const TokenSampling draw = b.NextDraw(7);
      EXPECT_EQ(draw.row, 7);
      ASSERT_EQ(a.Sample(logits, {}), picker.Pick(logits, draw))
          << "T " << p.temperature << " k " << p.top_k << " p " << p.top_p << " draw " << i;
    }
  }
  SamplingParams penalized = Params(1.f, 0, 1.f, 1);
  penalized.repetition_penalty = 1.2f;
  EXPECT_FALSE(Sampler(penalized).PicksWithoutHistory());
}

// A stochastic Sampler draws on every call, even when the logits make the
// pick greedy, so a pick elsewhere (which cannot see the logits) stays in step.
TEST(SamplerTest, StochasticSamplerDrawsEvenOnDegenerateLogits) {
  const std::vector<float> logits = MakeLogits(1000, 5, 1.f);
  const std::vector<float> infinite = {0.f, kInf, 1.f};
  Sampler a(Params(1.f, 0, 1.f, 77)), b(Params(1.f, 0, 1.f, 77));
  EXPECT_EQ(a.Sample(infinite, {}), 1);
  b.NextDraw(0);
  for (int i = 0; i < 50; ++i) ASSERT_EQ(a.Sample(logits, {}), b.Sample(logits, {}));
}

TEST(SamplerTest, PrngMatchesReferenceXoshiro256StarStar) {
  // With 2^20 equal logits the draw is floor(u * 2^20), the top 20 of the 53
  // bits of each xoshiro256** output; expected values come from an
  // independent implementation of splitmix64 seeding + xoshiro256**.
  const std::vector<float> logits(1 << 20, 0.f);
  const std::vector<int32_t> seed0 = {630469, 784097, 108024, 436825,
                                      768602, 1048312, 442720, 561674};
  const std::vector<int32_t> seed42 = {87936,  397389, 713077, 969610,
                                       1039981, 807130, 754197, 891298};
  Sampler a(Params(1.f, 0, 1.f, 0));
  Sampler b(Params(1.f, 0, 1.f, 42));
  for (size_t i = 0; i < seed0.size(); ++i) {
    EXPECT_EQ(a.Sample(logits, {}), seed0[i]) << "draw " << i;
    EXPECT_EQ(b.Sample(logits, {}), seed42[i]) << "draw " << i;
  }
}

TEST(SamplerTest, FrequenciesMatchSoftmaxWithTemperature) {
  const std::vector<float> logits = {1.f, 2.f, 0.5f, 3.f, -1.f, 0.f};
  const float t = 0.7f;
  Sampler sampler(Params(t, 0, 1.f, 99));
  const std::vector<int> counts = Histogram(sampler, logits, 20000);
  // chi-square, df=5, p=0.001: 20.5.
  ExpectMatchesDistribution(counts, Softmax(logits, t), 0.01, 20.5);
}

TEST(SamplerTest, HighTemperatureFlattensDistribution) {
  const std::vector<float> logits = {1.f, 2.f, 0.5f, 3.f};
  const float t = 4.f;
  Sampler sampler(Params(t, 0, 1.f, 17));
  const std::vector<int> counts = Histogram(sampler, logits, 20000);
  ExpectMatchesDistribution(counts, Softmax(logits, t), 0.01, 16.3 /* df=3 */);
}

TEST(SamplerTest, TopKNeverSamplesOutsideTheKLargest) {
  const std::vector<float> logits = MakeLogits(32 * 1024, 21, 3.f);
  const int k = 8;
  const std::vector<int32_t> ranked = Ranked(logits);
  std::vector<float> top(logits.size(), -kInf);
  for (int i = 0; i < k; ++i) top[ranked[i]] = logits[ranked[i]];
  const float t = 3.f;  // flat enough that every top-k token gets drawn
  std::vector<double> expected(logits.size(), 0.0);
  {
    std::vector<float> top_logits;
    for (int i = 0; i < k; ++i) top_logits.push_back(logits[ranked[i]]);
    const std::vector<double> p = Softmax(top_logits, t);
    for (int i = 0; i < k; ++i) expected[ranked[i]] = p[i];
  }
  Sampler sampler(Params(t, k, 1.f, 3));
  std::vector<int> counts = Histogram(sampler, logits, 20000);
  ExpectMatchesDistribution(counts, expected, 0.01, 24.3 /* df=7 */);
}

TEST(SamplerTest, TopPKeepsSmallestNucleusAndRenormalizes) {
  // Probabilities 0.5, 0.3, 0.15, 0.05: top_p=0.75 keeps {0.5, 0.3}.
  const std::vector<float> logits = {std::log(0.15f), std::log(0.5f),
                                     std::log(0.05f), std::log(0.3f)};
  Sampler sampler(Params(1.f, 0, 0.75f, 8));
  const std::vector<int> counts = Histogram(sampler, logits, 20000);
  ExpectMatchesDistribution(counts, {0.0, 0.625, 0.0, 0.375}, 0.01,
                            10.8 /* df=1 */);
}

TEST(SamplerTest, TopPAppliesAfterTopK) {
  // Top-2 renormalizes {0.5, 0.3} to {0.625, 0.375}; top_p=0.6 then keeps
  // only the first (0.625 >= 0.6), though over the full vocabulary 0.5 < 0.6
  // would have kept two.
  const std::vector<float> logits = {std::log(0.15f), std::log(0.5f),
                                     std::log(0.05f), std::log(0.3f)};
  Sampler sampler(Params(1.f, 2, 0.6f, 8));
  for (int i = 0; i < 500; ++i) ASSERT_EQ(sampler.Sample(logits, {}), 1);
}

TEST(SamplerTest, LargeVocabNucleusMatchesBruteForce) {
  const std::vector<float> logits = MakeLogits(128 * 1024, 31, 8.f);
  for (float top_p : {0.3f, 0.9f, 0.999f}) {
    const float t = 1.f;
    const std::set<int32_t> nucleus = Nucleus(logits, t, top_p);
    Sampler sampler(Params(t, 0, top_p, 77));
    std::set<int32_t> drawn;
    for (int i = 0; i < 1500; ++i) {
      const int32_t token = sampler.Sample(logits, {});
      ASSERT_TRUE(nucleus.count(token)) << "top_p " << top_p << " token "
                                        << token;
      drawn.insert(token);
    }
    // The nucleus must not be cut short: a spread of it is drawn.
    EXPECT_GT(drawn.size(), std::min<size_t>(nucleus.size() / 4, 500))
        << "top_p " << top_p << " nucleus " << nucleus.size();
  }
}

TEST(SamplerTest, LargeVocabTopKThenTopP) {
  const std::vector<float> logits = MakeLogits(128 * 1024, 41, 4.f);
  const int k = 50;
  const std::vector<int32_t> ranked = Ranked(logits);
  std::vector<float> top_logits;
  for (int i = 0; i < k; ++i) top_logits.push_back(logits[ranked[i]]);
  const std::set<int32_t> top_nucleus_ranks = Nucleus(top_logits, 2.0, 0.8);
  std::set<int32_t> allowed;
  for (int32_t r : top_nucleus_ranks) allowed.insert(ranked[r]);
  Sampler sampler(Params(2.f, k, 0.8f, 5));
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(allowed.count(sampler.Sample(logits, {})));
  }
}

TEST(SamplerTest, EdgeCases) {
  Sampler sampler(Params(1.f, 0, 0.9f));
  EXPECT_EQ(sampler.Sample({}, {}), -1);
  EXPECT_EQ(sampler.Sample(std::vector<float>{-kInf, -kInf, -kInf}, {}), 0);
  EXPECT_EQ(sampler.Sample(std::vector<float>{0.f, kInf, 1.f, kInf}, {}), 1);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int i = 0; i < 200; ++i) {
    const int32_t token =
        sampler.Sample(std::vector<float>{nan, 0.f, nan, -kInf, 0.5f}, {});
    ASSERT_TRUE(token == 1 || token == 4) << token;
  }
  // Tokens at -inf are never drawn, even at a high temperature.
  Sampler hot(Params(100.f));
  for (int i = 0; i < 500; ++i) {
    ASSERT_NE(hot.Sample(std::vector<float>{-kInf, 0.f, -kInf, 0.f}, {}) % 2,
              0);
  }
  // top_k larger than the vocabulary is the same as off.
  Sampler wide(Params(1.f, 1000, 1.f));
  EXPECT_GE(wide.Sample(std::vector<float>{0.f, 0.f}, {}), 0);
}

TEST(SamplerTest, InvalidParamsAreCoercedByConstructor) {
  SamplingParams p;
  p.temperature = -1.f;
  p.top_k = -5;
  p.top_p = 7.f;
  p.repetition_penalty = -1.f;
  Sampler sampler(p);
  EXPECT_EQ(sampler.params().temperature, 0.f);
  EXPECT_EQ(sampler.params().top_k, 0);
  EXPECT_EQ(sampler.params().top_p, 1.f);
  EXPECT_EQ(sampler.params().repetition_penalty, 1.f);
  EXPECT_EQ(sampler.Sample(std::vector<float>{0.f, 2.f}, {}), 1);
}

}  // namespace
}  // namespace kvcast
