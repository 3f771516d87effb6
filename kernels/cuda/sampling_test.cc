// The GPU sampler against the CPU Sampler's semantics. SKIPPED without a GPU.
//  - greedy (temperature 0, top_k 1, an infinite max) is the CPU Sampler's
//    argmax exactly, ties to the lower index, NaN as -inf;
//  - stochastic rows: sweeping the uniform draw over [0, 1) in 4000 steps,
//    every token comes from the kept set (top-k, then top-p) and each one's
//    share of the sweep is its renormalized probability within 1/1000;
//  - small top-k rows pick what the CPU TokenPicker picks for the same draw.
#include "kernels/cuda/sampling.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <vector>

#include "engine/sampling/sampler.h"
#include "kernels/token_picker.h"
#include "gtest/gtest.h"

namespace kvcast {
namespace {

class CudaSamplingTest : public testing::Test {
 protected:
  void SetUp() override {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) GTEST_SKIP() << "no CUDA device";
  }
  // Runs LaunchSample over one row of `logits`, one request per params entry
  // (their `row` is set to 0 here).
  std::vector<int32_t> Sample(const std::vector<float>& logits,
                              std::vector<cuda::SampleParams> params) {
    const int vocab = int(logits.size()), num = int(params.size());
    for (auto& p : params) p.row = 0;
    float* d_logits;
    cuda::SampleParams* d_params;
    int32_t* d_tokens;
    void* ws;
    EXPECT_EQ(cudaMalloc(&d_logits, logits.size() * 4), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&d_params, num * sizeof(cuda::SampleParams)), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&d_tokens, num * 4), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&ws, std::max<size_t>(1, cuda::SampleWorkspaceBytes(num, vocab))),
              cudaSuccess);
    cudaMemcpy(d_logits, logits.data(), logits.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(d_params, params.data(), num * sizeof(cuda::SampleParams), cudaMemcpyHostToDevice);
    EXPECT_EQ(cuda::LaunchSample(d_logits, vocab, d_params, num, ws, d_tokens, nullptr),
              cudaSuccess);
    std::vector<int32_t> tokens(num);
    EXPECT_EQ(cudaMemcpy(tokens.data(), d_tokens, num * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    cudaFree(d_logits);
    cudaFree(d_params);
    cudaFree(d_tokens);
    cudaFree(ws);
    return tokens;
  }
};

TEST_F(CudaSamplingTest, GreedyIsTheCpuArgmax) {
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0.f, 3.f);
  for (int vocab : {1, 7, 1000, 151936}) {
    std::vector<float> logits(vocab);
    for (float& x : logits) x = d(rng);
    if (vocab > 10) {
      logits[vocab / 2] = logits[vocab / 3] = 50.f;  // a tie: the lower index wins
      logits[1] = NAN;
    }
    Sampler cpu(SamplingParams{});
    const int32_t want = cpu.Sample(logits, {});
    const auto got = Sample(logits, {{0, 0.f, 0, 1.f, 0.5}, {0, 0.7f, 1, 1.f, 0.9}});
    EXPECT_EQ(got[0], want) << vocab;
    EXPECT_EQ(got[1], want) << vocab;
  }
}

TEST_F(CudaSamplingTest, StochasticDrawsFollowTheKeptDistribution) {
  std::mt19937 rng(2);
  std::normal_distribution<float> d(0.f, 2.f);
  const int vocab = 5000;
  std::vector<float> logits(vocab);
  for (float& x : logits) x = d(rng);
  struct Case {
    float temperature;
    int top_k;
    float top_p;
  };
  for (const Case& c : {Case{1.f, 40, 1.f}, Case{0.7f, 0, 0.9f}, Case{1.3f, 2000, 0.5f},
                        Case{1.f, 0, 1.f}}) {
    SCOPED_TRACE(testing::Message() << "T " << c.temperature << " k " << c.top_k << " p "
                                    << c.top_p);
    // The kept set and its probabilities, as sampler.h defines them.
    std::vector<int> order(vocab);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
    const int k = c.top_k > 0 ? std::min(c.top_k, vocab) : vocab;
    std::vector<double> w(k);
    double total = 0;
    for (int i = 0; i < k; ++i) total += w[i] = std::exp((logits[order[i]] - logits[order[0]]) / c.temperature);
    int kept = 0;
    double mass = 0;
    while (kept < k && (kept == 0 || mass < c.top_p * total)) mass += w[kept++];
    std::map<int, double> want;
    for (int i = 0; i < kept; ++i) want[order[i]] = w[i] / mass;

    const int draws = 4000;
    std::vector<cuda::SampleParams> params(draws);
    for (int i = 0; i < draws; ++i) params[i] = {0, c.temperature, c.top_k, c.top_p, (i + 0.5) / draws};
    std::map<int, int> seen;
    for (int32_t t : Sample(logits, params)) {
      ASSERT_TRUE(want.count(t)) << "token " << t << " is outside the kept set of " << kept;
      ++seen[t];
    }
    for (const auto& [t, p] : want) {
      EXPECT_NEAR(seen[t] / double(draws), p, 1e-3 + 1.0 / draws) << "token " << t;
    }
  }
}

// With top_k in [2, kSampleTopKCap] the candidates, their order and sums are
// the CPU picker's; only a one-ulp exp difference may flip a rare draw.
TEST_F(CudaSamplingTest, SmallTopKMatchesTheCpuPicker) {
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0.f, 2.f);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<float> logits(32000);
  for (float& x : logits) x = d(rng);
  std::vector<cuda::SampleParams> params(2000);
  for (auto& p : params) p = {0, 0.8f, 50, 0.9f, u(rng)};
  const auto got = Sample(logits, params);
  TokenPicker cpu;
  int differ = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const TokenSampling s{0, params[i].temperature, params[i].top_k, params[i].top_p,
                          params[i].uniform};
    differ += got[i] != cpu.Pick(logits, s);
  }
  EXPECT_LE(differ, 10) << "of " << params.size();
}

}  // namespace
}  // namespace kvcast
