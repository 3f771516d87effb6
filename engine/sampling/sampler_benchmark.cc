// Per-token cost of Sampler::Sample at a 128K vocabulary.
//   bazel run -c opt //engine/sampling:sampler_benchmark
#include <cstdint>
#include <vector>

#include "benchmark/benchmark.h"
#include "engine/sampling/benchmark_logits.h"
#include "engine/sampling/sampler.h"

namespace kvcast {
namespace {

void BM_Sample(benchmark::State& state, SamplingParams params) {
  const std::vector<float> logits = BenchmarkLogits(128 * 1024);
  std::vector<int32_t> history(512);
  for (size_t i = 0; i < history.size(); ++i) history[i] = i * 211 % 131072;
  Sampler sampler(params);
  for (auto _ : state) {
    benchmark::DoNotOptimize(sampler.Sample(logits, history));
  }
}

SamplingParams P(float t, int k, float p, float penalty) {
  SamplingParams s;
  s.temperature = t;
  s.top_k = k;
  s.top_p = p;
  s.repetition_penalty = penalty;
  return s;
}

BENCHMARK_CAPTURE(BM_Sample, greedy, P(0.f, 0, 1.f, 1.f));
BENCHMARK_CAPTURE(BM_Sample, greedy_penalty, P(0.f, 0, 1.f, 1.1f));
BENCHMARK_CAPTURE(BM_Sample, temperature, P(0.8f, 0, 1.f, 1.f));
BENCHMARK_CAPTURE(BM_Sample, top_k50, P(0.8f, 50, 1.f, 1.f));
BENCHMARK_CAPTURE(BM_Sample, top_k50_top_p09, P(0.8f, 50, 0.9f, 1.1f));
BENCHMARK_CAPTURE(BM_Sample, top_p09, P(0.8f, 0, 0.9f, 1.f));
BENCHMARK_CAPTURE(BM_Sample, top_p05, P(0.8f, 0, 0.5f, 1.f));

}  // namespace
}  // namespace kvcast

BENCHMARK_MAIN();
