// ProfilingBackend (profiling_backend.h): forwards each op and adds its wall time.
#include "kernels/profiling_backend.h"

#include <chrono>

namespace kvcast {

template <typename F>
void ProfilingBackend::Time(const char* op, F&& f) {
  auto start = std::chrono::steady_clock::now();
  f();
  inner_->Synchronize();
  seconds_[op] += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double ProfilingBackend::total_seconds() const {
  double total = 0;
  for (const auto& [op, s] : seconds_) total += s;
  return total;
}

void ProfilingBackend::CopyToDevice(void* dst, const void* src, size_t bytes) {
  Time("CopyToDevice", [&] { inner_->CopyToDevice(dst, src, bytes); });
}
void ProfilingBackend::CopyToHost(void* dst, const void* src, size_t bytes) {
  Time("CopyToHost", [&] { inner_->CopyToHost(dst, src, bytes); });
}
void ProfilingBackend::Embedding(const int32_t* ids, int num_tokens, const float* table, int dim,
                                 float* out) {
  Time("Embedding", [&] { inner_->Embedding(ids, num_tokens, table, dim, out); });
}
void ProfilingBackend::RmsNorm(const float* x, const float* weight, int rows, int dim, float eps,
                               float* out) {
  Time("RmsNorm", [&] { inner_->RmsNorm(x, weight, rows, dim, eps, out); });
}
void ProfilingBackend::Add(float* x, const float* y, size_t n) {
  Time("Add", [&] { inner_->Add(x, y, n); });
}
void ProfilingBackend::Linear(const float* x, int m, int k, const float* w, int n,
                              const float* bias, float* y) {
  Time("Linear", [&] { inner_->Linear(x, m, k, w, n, bias, y); });
}
void ProfilingBackend::Rope(float* x, int num_tokens, int x_stride, int num_heads, int head_dim,
                            const int32_t* positions, const float* inv_freq) {
  Time("Rope",
       [&] { inner_->Rope(x, num_tokens, x_stride, num_heads, head_dim, positions, inv_freq); });
}
void ProfilingBackend::SwiGlu(const float* gate_up, int rows, int dim, float* out) {
  Time("SwiGlu", [&] { inner_->SwiGlu(gate_up, rows, dim, out); });
}
void ProfilingBackend::WriteKv(const float* k, const float* v, int num_tokens, int stride,
                               const int32_t* slots, int num_kv_heads, int head_dim,
                               float* k_cache, float* v_cache) {
  Time("WriteKv", [&] {
    inner_->WriteKv(k, v, num_tokens, stride, slots, num_kv_heads, head_dim, k_cache, v_cache);
  });
}
void ProfilingBackend::PagedAttention(const float* q, int q_stride, const AttentionSeq* seqs,
                                      int num_seqs, const AttentionShape& shape,
                                      const float* k_cache, const float* v_cache, float* out) {
  Time("PagedAttention", [&] {
    inner_->PagedAttention(q, q_stride, seqs, num_seqs, shape, k_cache, v_cache, out);
  });
}
void ProfilingBackend::EncodeKv(KvFormat format, int block, const float* cache,
                                const int32_t* slots, int num_tokens, int num_heads, int head_dim,
                                uint8_t* out, size_t out_stride) {
  Time("EncodeKv", [&] {
    inner_->EncodeKv(format, block, cache, slots, num_tokens, num_heads, head_dim, out,
                     out_stride);
  });
}
void ProfilingBackend::DecodeKv(KvFormat format, int block, const uint8_t* in, size_t in_stride,
                                int num_tokens, int num_heads, int head_dim,
                                const int32_t* slots, float* cache) {
  Time("DecodeKv", [&] {
    inner_->DecodeKv(format, block, in, in_stride, num_tokens, num_heads, head_dim, slots,
                     cache);
  });
}

}  // namespace kvcast
