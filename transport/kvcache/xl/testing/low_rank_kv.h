// Synthetic KV of low rank per basis block, for the xl codec's tests and
// test vectors: each block (a group of layers, K or V, in basis order) is
// a mean plus kLowRank orthonormal directions spread across its layers,
// times N(0, (scale_b x Sigma(i))^2) coefficients, plus optional noise.
// The structure (directions, means) comes from structure_seed, the tokens
// from seed.
//
// Thread safety: a pure function.
#ifndef KVCAST_TRANSPORT_KVCACHE_XL_TESTING_LOW_RANK_KV_H_
#define KVCAST_TRANSPORT_KVCACHE_XL_TESTING_LOW_RANK_KV_H_

#include <cstdint>
#include <vector>

#include "transport/kvcache/xl/kv_basis.h"

namespace kvcast::kvcache::xl::testing {

inline constexpr int kLowRank = 6;

struct LowRankOptions {
  float mean_scale = 1;             // the means are N(0, mean_scale^2)
  std::vector<float> block_scales;  // per block; blocks past its end: 1
  float noise = 0;                  // N(0, noise^2) added to every value
  bool sink = false;                // token 0 an outlier: K x6, V x0.002
};

struct LowRankKv {
  struct Block {
    int first_layer = 0, layers = 0, kind = 0, dim = 0;
    float scale = 1;
    std::vector<float> dirs;  // kLowRank x dim, orthonormal
    std::vector<float> mean;  // dim
  };
  // The spread of coefficient i in a block of scale 1.
  static constexpr float Sigma(int i) { return 8.f / float(1 << i); }

  std::vector<Block> blocks;
  std::vector<float> tokens;  // count x shape.token_floats(), ac token layout
};

LowRankKv MakeLowRankKv(const AcShape& shape, int group_layers, int count, uint32_t seed,
                        uint32_t structure_seed, const LowRankOptions& options = {});

}  // namespace kvcast::kvcache::xl::testing

#endif  // KVCAST_TRANSPORT_KVCACHE_XL_TESTING_LOW_RANK_KV_H_
