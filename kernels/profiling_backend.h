// ProfilingBackend: a Backend decorator that times every op by name.
//
// Wraps another backend (borrowed; must outlive this one), forwards every
// call, and adds the wall time of each op to a per-op total. For an
// asynchronous backend it synchronizes after each op, so totals are exact
// but the run is slower than without profiling. Same threading rules as the
// wrapped backend.
#ifndef KVCAST_KERNELS_PROFILING_BACKEND_H_
#define KVCAST_KERNELS_PROFILING_BACKEND_H_

#include <map>
#include <memory>
#include <string>

#include "kernels/forwarding_backend.h"

namespace kvcast {

class ProfilingBackend : public ForwardingBackend {
 public:
  explicit ProfilingBackend(Backend* inner) : ForwardingBackend(inner) {}

  // Seconds spent per op name ("Linear", "PagedAttention", ...).
  const std::map<std::string, double>& seconds() const { return seconds_; }
  double total_seconds() const;
  void Reset() { seconds_.clear(); }

  // The timed ops; the rest pass through ForwardingBackend untimed.
  void CopyToDevice(void* dst, const void* src, size_t bytes) override;
  void CopyToHost(void* dst, const void* src, size_t bytes) override;
  void Embedding(const int32_t* ids, int num_tokens, const Weight& table, int dim,
                 float* out) override;
  void GatherRows(const float* x, const int32_t* rows, int num_rows, int dim,
                  float* out) override;
  void RmsNorm(const float* x, const float* weight, int rows, int dim, float eps,
               float* out) override;
  void AddRmsNorm(float* x, const float* y, const float* weight, int rows, int dim, float eps,
                  float* out) override;
  void Linear(const float* x, int m, int k, const Weight& w, int n, const float* bias,
              float* y) override;
  void Rope(float* x, int num_tokens, int x_stride, int num_heads, int head_dim,
            const int32_t* positions, const float* inv_freq) override;
  void SwiGlu(const float* gate_up, int rows, int dim, float* out) override;
  void WriteKv(const float* k, const float* v, int num_tokens, int stride, const int32_t* slots,
               int num_kv_heads, int head_dim, KvStorage storage, void* k_cache,
               void* v_cache) override;
  void PagedAttention(const float* q, int q_stride, const AttentionSeq* seqs, int num_seqs,
                      const AttentionShape& shape, const void* k_cache, const void* v_cache,
                      float* out) override;
  absl::Status SampleTokens(const float* logits, int vocab, const TokenSampling* params, int num,
                            int32_t* tokens) override;
  absl::Status EncodeKv(KvFormat format, int block, const KvArrays& src, const int32_t* slots,
                        int num_tokens, uint8_t* out, size_t out_stride) override;
  absl::Status DecodeKv(KvFormat format, int block, const uint8_t* in, size_t in_stride,
                        const int32_t* slots, int num_tokens, const KvArrays& dst) override;

 private:
  template <typename F>
  void Time(const char* op, F&& f);

  std::map<std::string, double> seconds_;
};

}  // namespace kvcast

#endif  // KVCAST_KERNELS_PROFILING_BACKEND_H_
