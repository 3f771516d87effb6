// ForwardingBackend: a Backend that passes every call to another one, the
// base of decorators that change or observe a few ops (ProfilingBackend
// times them; the KV quality harness, tools/kvquality, codes the K/V rows
// WriteKv stores). A decorator overrides what it changes and calls the
// inner backend for the rest.
//
// The inner backend is borrowed and must outlive this one; same threading
// rules as the inner backend.
#ifndef KVCAST_KERNELS_FORWARDING_BACKEND_H_
#define KVCAST_KERNELS_FORWARDING_BACKEND_H_

#include <memory>

#include "kernels/backend.h"

namespace kvcast {

class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(Backend* inner) : inner_(inner) {}

  Backend* inner() const { return inner_; }

  std::string_view name() const override { return inner_->name(); }
  absl::StatusOr<std::unique_ptr<DeviceBuffer>> Allocate(size_t bytes) override {
    return inner_->Allocate(bytes);
  }
  size_t AvailableMemory() const override { return inner_->AvailableMemory(); }
  void CopyToDevice(void* dst, const void* src, size_t bytes) override {
    inner_->CopyToDevice(dst, src, bytes);
  }
  void CopyToHost(void* dst, const void* src, size_t bytes) override {
    inner_->CopyToHost(dst, src, bytes);
  }
  absl::Status Synchronize() override { return inner_->Synchronize(); }
  absl::StatusOr<Weight> LoadWeight(WeightType type, WeightKind kind, const void* src,
                                    size_t rows, size_t cols) override {
    return inner_->LoadWeight(type, kind, src, rows, cols);
  }
  bool TakesWeightType(WeightType type) const override { return inner_->TakesWeightType(type); }
  void Embedding(const int32_t* ids, int num_tokens, const Weight& table, int dim,
                 float* out) override {
    inner_->Embedding(ids, num_tokens, table, dim, out);
  }
  void GatherRows(const float* x, const int32_t* rows, int num_rows, int dim,
                  float* out) override {
    inner_->GatherRows(x, rows, num_rows, dim, out);
  }
  void RmsNorm(const float* x, const float* weight, int rows, int dim, float eps,
               float* out) override {
    inner_->RmsNorm(x, weight, rows, dim, eps, out);
  }
  void AddRmsNorm(float* x, const float* y, const float* weight, int rows, int dim, float eps,
                  float* out) override {
    inner_->AddRmsNorm(x, y, weight, rows, dim, eps, out);
  }
  void Linear(const float* x, int m, int k, const Weight& w, int n, const float* bias,
              float* y) override {
    inner_->Linear(x, m, k, w, n, bias, y);
  }
  void Rope(float* x, int num_tokens, int x_stride, int num_heads, int head_dim,
            const int32_t* positions, const float* inv_freq) override {
    inner_->Rope(x, num_tokens, x_stride, num_heads, head_dim, positions, inv_freq);
  }
  void SwiGlu(const float* gate_up, int rows, int dim, float* out) override {
    inner_->SwiGlu(gate_up, rows, dim, out);
  }
  void WriteKv(const float* k, const float* v, int num_tokens, int stride, const int32_t* slots,
               int num_kv_heads, int head_dim, KvStorage storage, void* k_cache,
               void* v_cache) override {
    inner_->WriteKv(k, v, num_tokens, stride, slots, num_kv_heads, head_dim, storage, k_cache,
                    v_cache);
  }
  bool SupportsHalfKvPages() const override { return inner_->SupportsHalfKvPages(); }
  bool SamplesWithTokenMasks() const override { return inner_->SamplesWithTokenMasks(); }
  absl::Status SupportsAttention(int num_heads, int num_kv_heads, int head_dim) const override {
    return inner_->SupportsAttention(num_heads, num_kv_heads, head_dim);
  }
  void PagedAttention(const float* q, int q_stride, const AttentionSeq* seqs, int num_seqs,
                      const AttentionShape& shape, const void* k_cache, const void* v_cache,
                      float* out) override {
    inner_->PagedAttention(q, q_stride, seqs, num_seqs, shape, k_cache, v_cache, out);
  }
  absl::Status SampleTokens(const float* logits, int vocab, const TokenSampling* params, int num,
                            int32_t* tokens) override {
    return inner_->SampleTokens(logits, vocab, params, num, tokens);
  }
  absl::Status EncodeKv(KvFormat format, int block, const KvArrays& src, const int32_t* slots,
                        int num_tokens, uint8_t* out, size_t out_stride) override {
    return inner_->EncodeKv(format, block, src, slots, num_tokens, out, out_stride);
  }
  absl::Status DecodeKv(KvFormat format, int block, const uint8_t* in, size_t in_stride,
                        const int32_t* slots, int num_tokens, const KvArrays& dst) override {
    return inner_->DecodeKv(format, block, in, in_stride, slots, num_tokens, dst);
  }
  absl::StatusOr<std::unique_ptr<DeviceBuffer>> AllocateStaging(size_t bytes) override {
    return inner_->AllocateStaging(bytes);
  }
  bool KvPagesInHostMemory() const override { return inner_->KvPagesInHostMemory(); }

 private:
  Backend* const inner_;
};

}  // namespace kvcast

#endif  // KVCAST_KERNELS_FORWARDING_BACKEND_H_
