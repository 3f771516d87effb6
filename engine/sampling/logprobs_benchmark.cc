// Cost of one ComputeLogprobs call (a generated token's, or one prompt
// position's with echo) at SmolLM2's vocabulary of 49,152 and at 128K.
//   bazel run -c opt //engine/sampling:logprobs_benchmark
#include <cstdint>
#include <vector>

#include "benchmark/benchmark.h"
#include "engine/sampling/benchmark_logits.h"
#include "engine/sampling/logprobs.h"

namespace kvcast {
namespace {

void BM_ComputeLogprobs(benchmark::State& state) {
  const std::vector<float> logits = BenchmarkLogits(size_t(state.range(0)));
  for (auto _ : state) {
    benchmark::DoNotOptimize(ComputeLogprobs(logits, 7, int(state.range(1))));
  }
}
BENCHMARK(BM_ComputeLogprobs)->ArgsProduct({{49152, 128256}, {0, 1, 5, 20}});

}  // namespace
}  // namespace kvcast

BENCHMARK_MAIN();
