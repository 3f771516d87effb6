// ProfilingBackend (profiling_backend.h): forwards each op and adds its wall time.
#include "kernels/profiling_backend.h"

#include <chrono>

namespace kvcast {

template <typename F>
void ProfilingBackend::Time(const char* op, F&& f) {
  auto start = std::chrono::steady_clock::now();
  f();
  (void)inner()->Synchronize();  // errors surface at the caller's own Synchronize
  seconds_[op] += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double ProfilingBackend::total_seconds() const {
  double total = 0;
  for (const auto& [op, s] : seconds_) total += s;
  return total;
}

void ProfilingBackend::CopyToDevice(void* dst, const void* src, size_t bytes) {
  Time("CopyToDevice", [&] { inner()->CopyToDevice(dst, src, bytes); });
}
void ProfilingBackend::CopyToHost(void* dst, const void* src, size_t bytes) {
  Time("CopyToHost", [&] { inner()->CopyToHost(dst, src, bytes); });
}
void ProfilingBackend::Embedding(const int32_t* ids, int num_tokens, const Weight& table, int dim,
                                 float* out) {
  Time("Embedding", [&] { inner()->Embedding(ids, num_tokens, table, dim, out); });
}
void ProfilingBackend::GatherRows(const float* x, const int32_t* rows, int num_rows, int dim,
                                  float* out) {
  Time("GatherRows", [&] { inner()->GatherRows(x, rows, num_rows, dim, out); });
}
void ProfilingBackend::RmsNorm(const float* x, const float* weight, int rows, int dim, float eps,
                               float* out) {
  Time("RmsNorm", [&] { inner()->RmsNorm(x, weight, rows, dim, eps, out); });
}
void ProfilingBackend::AddRmsNorm(float* x, const float* y, const float* weight, int rows,
                                  int dim, float eps, float* out) {
  Time("AddRmsNorm", [&] { inner()->AddRmsNorm(x, y, weight, rows, dim, eps, out); });
}
void ProfilingBackend::Linear(const float* x, int m, int k, const Weight& w, int n,
                              const float* bias, float* y) {
  Time("Linear", [&] { inner()->Linear(x, m, k, w, n, bias, y); });
}
void ProfilingBackend::Rope(float* x, int num_tokens, int x_stride, int num_heads, int head_dim,
                            const int32_t* positions, const float* inv_freq) {
  Time("Rope",
       [&] { inner()->Rope(x, num_tokens, x_stride, num_heads, head_dim, positions, inv_freq); });
}
void ProfilingBackend::SwiGlu(const float* gate_up, int rows, int dim, float* out) {
  Time("SwiGlu", [&] { inner()->SwiGlu(gate_up, rows, dim, out); });
}
void ProfilingBackend::WriteKv(const float* k, const float* v, int num_tokens, int stride,
                               const int32_t* slots, int num_kv_heads, int head_dim,
                               KvStorage storage, void* k_cache, void* v_cache) {
  Time("WriteKv", [&] {
    inner()->WriteKv(k, v, num_tokens, stride, slots, num_kv_heads, head_dim, storage, k_cache,
                    v_cache);
  });
}
void ProfilingBackend::PagedAttention(const float* q, int q_stride, const AttentionSeq* seqs,
                                      int num_seqs, const AttentionShape& shape,
                                      const void* k_cache, const void* v_cache, float* out) {
  Time("PagedAttention", [&] {
    inner()->PagedAttention(q, q_stride, seqs, num_seqs, shape, k_cache, v_cache, out);
  });
}
absl::Status ProfilingBackend::SampleTokens(const float* logits, int vocab,
                                          const TokenSampling* params, int num, int32_t* tokens) {
  absl::Status status;
  Time("SampleTokens", [&] { status = inner()->SampleTokens(logits, vocab, params, num, tokens); });
  return status;
}
absl::Status ProfilingBackend::EncodeKv(KvFormat format, int block, const KvArrays& src,
                                        const int32_t* slots, int num_tokens, uint8_t* out,
                                        size_t out_stride) {
  absl::Status status;
  Time("EncodeKv", [&] {
    status = inner()->EncodeKv(format, block, src, slots, num_tokens, out, out_stride);
  });
  return status;
}
absl::Status ProfilingBackend::DecodeKv(KvFormat format, int block, const uint8_t* in,
                                        size_t in_stride, const int32_t* slots, int num_tokens,
                                        const KvArrays& dst) {
  absl::Status status;
  Time("DecodeKv", [&] {
    status = inner()->DecodeKv(format, block, in, in_stride, slots, num_tokens, dst);
  });
  return status;
}

}  // namespace kvcast
