#include "tools/kvquality/query_energy.h"

namespace kvcast::kvquality {

void QueryEnergyBackend::Measure(const KvPagePool* pool) { pool_ = pool; }

std::vector<double> QueryEnergyBackend::Mean(const std::vector<double>& sum,
                                             const std::vector<long>& count, size_t per_layer) {
  std::vector<double> out = sum;
  for (size_t i = 0; i < out.size(); ++i) {
    const long n = count[i / per_layer];
    out[i] = n > 0 ? out[i] / double(n) : 0;
  }
  return out;
}

std::vector<double> QueryEnergyBackend::MeanEnergy() const {
  return Mean(sum_, queries_, size_t(heads_) * dim_);
}

std::vector<double> QueryEnergyBackend::MeanKeyEnergy() const {
  return Mean(key_sum_, keys_, size_t(heads_) * dim_);
}

int QueryEnergyBackend::LayerOf(const void* k_cache, int kv_heads, int head_dim) {
  if (pool_ == nullptr) return -1;
  const int layers = pool_->layout().num_layers;
  for (int l = 0; l < layers; ++l) {
    if (pool_->k_pages(l) != k_cache) continue;
    heads_ = kv_heads;
    dim_ = head_dim;
    for (auto* sum : {&sum_, &key_sum_}) sum->resize(size_t(layers) * heads_ * dim_, 0.0);
    queries_.resize(size_t(layers), 0);
    keys_.resize(size_t(layers), 0);
    return l;
  }
  return -1;
}

void QueryEnergyBackend::PagedAttention(const float* q, int q_stride, const AttentionSeq* seqs,
                                        int num_seqs, const AttentionShape& shape,
                                        const void* k_cache, const void* v_cache, float* out) {
  if (const int layer = LayerOf(k_cache, shape.num_kv_heads, shape.head_dim); layer >= 0) {
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

void QueryEnergyBackend::WriteKv(const float* k, const float* v, int num_tokens, int stride,
                                 const int32_t* slots, int num_kv_heads, int head_dim,
                                 KvStorage storage, void* k_cache, void* v_cache) {
  if (const int layer = LayerOf(k_cache, num_kv_heads, head_dim); layer >= 0) {
    double* sum = &key_sum_[size_t(layer) * heads_ * dim_];
    for (int t = 0; t < num_tokens; ++t) {
      const float* row = k + size_t(t) * stride;
      for (int i = 0; i < heads_ * dim_; ++i) sum[i] += double(row[i]) * row[i];
    }
    keys_[size_t(layer)] += num_tokens;
  }
  inner()->WriteKv(k, v, num_tokens, stride, slots, num_kv_heads, head_dim, storage, k_cache,
                   v_cache);
}

}  // namespace kvcast::kvquality
