// Synthetic KV with what real KV has, for the ac codec's tests, vectors
// and benchmark: outlier channels, channels that drift slowly over tokens
// (RoPE's low frequencies) and channels that do not, noise, and (with
// `sink`) an attention-sink first token whose V is tiny and K huge.
#ifndef KVCAST_TRANSPORT_KVCACHE_AC_TESTING_SYNTHETIC_KV_H_
#define KVCAST_TRANSPORT_KVCACHE_AC_TESTING_SYNTHETIC_KV_H_

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "transport/kvcache/ac/ac_codec.h"

namespace kvcast::kvcache::ac {

// tokens x shape.token_floats() values in payload order.
inline std::vector<float> SyntheticKv(const AcShape& s, int tokens, uint32_t seed, bool sink) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise(0, 1);
  const int n = s.token_floats(), d = s.head_dim, h = s.num_kv_heads;
  std::vector<float> base(n), scale(n), freq(n);
  for (int i = 0; i < n; ++i) {
    base[i] = noise(rng);
    scale[i] = i % 37 == 3 ? 15.f : 0.5f + (i % 5) * 0.3f;
    freq[i] = (i % d) < d / 4 ? 0.01f * (i % 7 + 1) : 1.3f;
  }
  std::vector<float> kv(size_t(tokens) * n);
  for (int t = 0; t < tokens; ++t) {
    for (int i = 0; i < n; ++i) {
      const bool is_v = (i / (h * d)) % 2 == 1;
      float x = scale[i] * (base[i] + std::sin(freq[i] * t + i) + 0.2f * noise(rng));
      if (t == 0 && sink) x = is_v ? 0.002f * x : 6.f * x;
      kv[size_t(t) * n + i] = x;
    }
  }
  return kv;
}

}  // namespace kvcast::kvcache::ac

#endif  // KVCAST_TRANSPORT_KVCACHE_AC_TESTING_SYNTHETIC_KV_H_
