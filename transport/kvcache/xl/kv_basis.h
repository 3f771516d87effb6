// A model's cross-layer KV basis (issue 42): for each group of G
// consecutive layers and each kind (K before RoPE, V), the mean and the
// principal axes of the group's token vectors (G layers x KV heads x
// head_dim values), fitted once on calibration text. The "xl" tracks code a
// token's KV as its coefficients in these axes (xl_codec.h); encoder and
// decoder must hold the same basis, which its id names.
//
// File format (little-endian; docs/kvcache-wire-format.md, "The xl
// tracks"): magic "KVXLBAS1", u16 L, H, D, G; then per group g (layers
// [g G, min((g + 1) G, L))) and kind (K, then V), dim = layers x H x D:
// dim binary32 means, dim binary32 variances (the components' calibration
// variances, descending), dim x dim binary16 components (component i's dim
// values, i in order). The id is the FNV-1a 64 of the whole file.
//
// Thread safety: a KvBasis is immutable once built; a fitter is used by
// one thread at a time.
#ifndef KVCAST_TRANSPORT_KVCACHE_XL_KV_BASIS_H_
#define KVCAST_TRANSPORT_KVCACHE_XL_KV_BASIS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "transport/kvcache/ac/ac_codec.h"

namespace kvcast::kvcache::xl {

using ac::AcShape;  // a token's values: per layer, its K row then its V row

class KvBasis {
 public:
  struct Block {
    int first_layer = 0;
    int layers = 0;
    int dim = 0;                       // layers * num_kv_heads * head_dim
    std::vector<float> mean;           // dim
    std::vector<float> variance;       // dim, descending
    // dim x dim, component i at i * dim: the file's binary16 values,
    // widened once here for every coder of the basis to share.
    std::vector<float> axes;
  };

  const AcShape& shape() const { return shape_; }
  int group_layers() const { return group_layers_; }
  int num_groups() const { return int(blocks_.size() / 2); }
  // kind 0: K (before RoPE), 1: V.
  const Block& block(int group, int kind) const { return blocks_[2 * group + kind]; }
  uint64_t id() const { return id_; }

  std::string Serialize() const;
  // InvalidArgument for a file of another format or size, a shape
  // without an ac track (ac::ValidateShape), groups of 0 or more than L
  // layers, or variances that are not finite, >= 0 and descending.
  static absl::StatusOr<KvBasis> Parse(std::string_view bytes);
  static absl::StatusOr<KvBasis> Load(const std::string& path);
  absl::Status Save(const std::string& path) const;

 private:
  friend class KvBasisFitter;
  AcShape shape_;
  int group_layers_ = 0;
  std::vector<Block> blocks_;  // (group, kind)
  uint64_t id_ = 0;
};

// Accumulates token vectors (means and covariances in double) and fits
// the basis: each block's covariance eigendecomposed (LAPACK dsyevd).
class KvBasisFitter {
 public:
  // The shape must pass ac::ValidateShape and 1 <= group_layers <=
  // num_layers; otherwise Add does nothing and Fit says why.
  KvBasisFitter(const AcShape& shape, int group_layers);

  // Adds `count` tokens at `kv`, token t's shape.token_floats() values at
  // kv + t * token_floats(), K rows before RoPE.
  void Add(const float* kv, int count);
  int64_t samples() const { return samples_; }

  // InvalidArgument for a bad shape or group size; FailedPrecondition with
  // fewer than 2 samples; Internal if LAPACK fails.
  absl::StatusOr<KvBasis> Fit() const;

 private:
  const AcShape shape_;
  const int group_layers_;
  int64_t samples_ = 0;
  std::vector<std::vector<double>> sum_, cov_;  // per block: dim, dim x dim (upper)
  std::vector<double> rows_;                    // a batch of one block's rows
};

}  // namespace kvcast::kvcache::xl

#endif  // KVCAST_TRANSPORT_KVCACHE_XL_KV_BASIS_H_
