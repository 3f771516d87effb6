// Synthetic low-rank KV: see low_rank_kv.h.
#include "transport/kvcache/xl/testing/low_rank_kv.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace kvcast::kvcache::xl::testing {

LowRankKv MakeLowRankKv(const AcShape& shape, int group_layers, int count, uint32_t seed,
                        uint32_t structure_seed, const LowRankOptions& o) {
  std::mt19937 rng(structure_seed);
  std::normal_distribution<float> n01;
  const int row = shape.num_kv_heads * shape.head_dim, n = shape.token_floats();
  LowRankKv kv;
  for (int first = 0; first < shape.num_layers; first += group_layers) {
    for (int kind = 0; kind < 2; ++kind) {
      LowRankKv::Block b;
      b.first_layer = first;
      b.layers = std::min(group_layers, shape.num_layers - first);
      b.kind = kind;
      b.dim = b.layers * row;
      const size_t index = kv.blocks.size();
      b.scale = index < o.block_scales.size() ? o.block_scales[index] : 1.f;
      b.dirs.resize(size_t(kLowRank) * b.dim);
      b.mean.resize(b.dim);
      for (float& v : b.dirs) v = n01(rng);
      for (float& v : b.mean) v = o.mean_scale * n01(rng);
      for (int i = 0; i < kLowRank; ++i) {  // Gram-Schmidt
        float* di = b.dirs.data() + size_t(i) * b.dim;
        for (int j = 0; j < i; ++j) {
          const float* dj = b.dirs.data() + size_t(j) * b.dim;
          double dot = 0;
          for (int c = 0; c < b.dim; ++c) dot += double(di[c]) * dj[c];
          for (int c = 0; c < b.dim; ++c) di[c] -= float(dot) * dj[c];
        }
        double norm = 0;
        for (int c = 0; c < b.dim; ++c) norm += double(di[c]) * di[c];
        for (int c = 0; c < b.dim; ++c) di[c] /= float(std::sqrt(norm));
      }
      kv.blocks.push_back(std::move(b));
    }
  }
  kv.tokens.resize(size_t(count) * n);
  rng.seed(seed);
  std::vector<float> x;
  for (int t = 0; t < count; ++t) {
    for (const LowRankKv::Block& b : kv.blocks) {
      x = b.mean;
      for (int i = 0; i < kLowRank; ++i) {
        const float z = n01(rng) * b.scale * LowRankKv::Sigma(i);
        for (int c = 0; c < b.dim; ++c) x[c] += z * b.dirs[size_t(i) * b.dim + c];
      }
      if (o.noise > 0) {
        for (int c = 0; c < b.dim; ++c) x[c] += o.noise * n01(rng);
      }
      if (t == 0 && o.sink) {
        for (float& v : x) v *= b.kind == 0 ? 6.f : 0.002f;
      }
      for (int l = 0; l < b.layers; ++l) {
        float* dst = kv.tokens.data() + size_t(t) * n + size_t(b.first_layer + l) * 2 * row +
                     b.kind * row;
        std::copy_n(x.data() + size_t(l) * row, row, dst);
      }
    }
  }
  return kv;
}

}  // namespace kvcast::kvcache::xl::testing
