#include "tools/kvquality/query_energy.h"

namespace kvcast::kvquality {

void QueryEnergyBackend::Measure(const KvPagePool* pool) { pool_ = pool; }

std::vector<double> QueryEnergyBackend::MeanEnergy() const {
  std::vector<double> out = sum_;
  const size_t per_layer = size_t(heads_) * dim_;
  for (size_t i = 0; i < out.size(); ++i) {
    const long n = queries_[i / per_layer];
    out[i] = n > 0 ? out[i] / double(n) : 0;
  }
  return out;
}

void QueryEnergyBackend::PagedAttention(const float* q, int q_stride, const AttentionSeq* seqs,
                                        int num_seqs, const AttentionShape& shape,
                                        const void* k_cache, const void* v_cache, float* out) {
  int layer = -1;
  if (pool_ != nullptr) {
    for (int l = 0; l < pool_->layout().num_layers && layer < 0; ++l) {
      if (pool_->k_pages(l) == k_cache) layer = l;
    }
  }
  if (layer >= 0) {
    const int layers = pool_->layout().num_layers;
    heads_ = shape.num_kv_heads;
    dim_ = shape.head_dim;
    sum_.resize(size_t(layers) * heads_ * dim_, 0.0);
    queries_.resize(size_t(layers), 0);
    const int group = shape.num_heads / shape.num_kv_heads;  // query heads per KV head
    double* sum = &sum_[size_t(layer) * heads_ * dim_];
    for (int s = 0; s < num_seqs; ++s) {
      for (int i = 0; i < seqs[s].num_queries; ++i) {
        const float* row = q + size_t(seqs[s].query_offset + i) * q_stride;
        for (int h = 0; h < shape.num_heads; ++h) {
          double* into = sum + size_t(h / group) * dim_;
          for (int c = 0; c < dim_; ++c) into[c] += double(row[h * dim_ + c]) * row[h * dim_ + c];
        }
      }
      queries_[size_t(layer)] += seqs[s].num_queries;
    }
  }
  inner()->PagedAttention(q, q_stride, seqs, num_seqs, shape, k_cache, v_cache, out);
}

}  // namespace kvcast::kvquality
