// The benchmarks' row of logits: n values in [-8, 8) from a fixed xorshift
// stream, the same every run.
#ifndef KVCAST_ENGINE_SAMPLING_BENCHMARK_LOGITS_H_
#define KVCAST_ENGINE_SAMPLING_BENCHMARK_LOGITS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvcast {

inline std::vector<float> BenchmarkLogits(size_t n) {
  std::vector<float> logits(n);
  uint64_t state = 88172645463325252ull;
  for (float& v : logits) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    v = static_cast<float>(static_cast<double>(state >> 11) * 0x1.0p-53 * 16.0 - 8.0);
  }
  return logits;
}

}  // namespace kvcast

#endif  // KVCAST_ENGINE_SAMPLING_BENCHMARK_LOGITS_H_
