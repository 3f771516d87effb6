// The compute interface every backend (CPU now, CUDA later) implements.
//
// Contract:
//  - Activations are dense, row-major float32 arrays in memory obtained from
//    the same backend's Allocate(); weights come from LoadWeight() in the
//    backend's own compute format. Ops never allocate and never fail on valid
//    shapes: the engine checks shapes once, at load time.
//  - The paged KV cache of one layer is two arrays, K and V, each laid out
//    [num_pages][page_tokens][num_kv_heads][head_dim]; a token's slot is
//    page * page_tokens + offset. Page tables index pages in those arrays.
//  - Ops on one Backend are issued from one thread at a time (the engine's
//    compute thread); a backend may run them asynchronously and Synchronize()
//    waits for completion. The CPU backend completes each op before returning.
#ifndef KVCAST_KERNELS_BACKEND_H_
#define KVCAST_KERNELS_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/kv_codec.h"

namespace kvcast {

// Memory owned by a backend; freed when destroyed.
class DeviceBuffer {
 public:
  virtual ~DeviceBuffer() = default;
  virtual void* data() = 0;
  virtual size_t size() const = 0;
  float* f32() { return static_cast<float*>(data()); }
};

// Element type of a weight as stored in a checkpoint.
enum class WeightType { kF32, kF16, kBF16 };

// One sequence's slice of an attention call. Its `num_queries` query rows
// start at row `query_offset` of the batch's q; they are the last
// `num_queries` tokens of a context of `context_len` tokens whose K/V are all
// already written to the pages listed in `page_table` (context_len tokens,
// ceil(context_len / page_tokens) pages). Causal: query j (0-based within the
// slice) sees context tokens [0, context_len - num_queries + j].
struct AttentionSeq {
  int query_offset = 0;
  int num_queries = 0;
  int context_len = 0;
  const int32_t* page_table = nullptr;  // borrowed for the call
};

struct AttentionShape {
  int num_heads = 0;     // query heads
  int num_kv_heads = 0;  // num_heads % num_kv_heads == 0 (GQA)
  int head_dim = 0;
  int page_tokens = 0;
  float scale = 0.f;     // usually 1/sqrt(head_dim)
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;

  // Memory. Allocate returns ResourceExhausted when memory is short.
  virtual absl::StatusOr<std::unique_ptr<DeviceBuffer>> Allocate(size_t bytes) = 0;
  virtual void CopyToDevice(void* dst, const void* src, size_t bytes) = 0;
  virtual void CopyToHost(void* dst, const void* src, size_t bytes) = 0;
  virtual void Synchronize() = 0;

  // Converts `count` checkpoint elements at `src` (host memory, e.g. an
  // mmapped file) into a new buffer in this backend's compute format.
  virtual absl::StatusOr<std::unique_ptr<DeviceBuffer>> LoadWeight(
      WeightType type, const void* src, size_t count) = 0;

  // out[i, :] = table[ids[i], :]; table [vocab, dim].
  virtual void Embedding(const int32_t* ids, int num_tokens, const float* table,
                         int dim, float* out) = 0;
  // out[r] = x[r] / rms(x[r]) * weight, rows of `dim`. out may alias x.
  virtual void RmsNorm(const float* x, const float* weight, int rows, int dim,
                       float eps, float* out) = 0;
  // x += y, n elements.
  virtual void Add(float* x, const float* y, size_t n) = 0;
  // y[m, n] = x[m, k] * w[n, k]^T (+ bias[n] when bias != nullptr).
  virtual void Linear(const float* x, int m, int k, const float* w, int n,
                      const float* bias, float* y) = 0;
  // Rotates x [num_tokens, num_heads, head_dim] in place (token rows
  // `x_stride` floats apart), HF "rotate half" convention:
  // angle = positions[t] * inv_freq[i], inv_freq [head_dim / 2].
  virtual void Rope(float* x, int num_tokens, int x_stride, int num_heads,
                    int head_dim, const int32_t* positions,
                    const float* inv_freq) = 0;
  // out[i] = silu(gate_up[r, i]) * gate_up[r, dim + i] for rows of 2 * dim.
  virtual void SwiGlu(const float* gate_up, int rows, int dim, float* out) = 0;
  // Writes k, v [num_tokens, num_kv_heads, head_dim] (token rows `stride`
  // floats apart) into slots[t] of the layer's caches (layout above).
  virtual void WriteKv(const float* k, const float* v, int num_tokens,
                       int stride, const int32_t* slots, int num_kv_heads,
                       int head_dim, float* k_cache, float* v_cache) = 0;
  // out [total_queries, num_heads, head_dim] = causal softmax(q k^T * scale) v
  // for every sequence in `seqs`, reading K/V through the page tables; q rows
  // are `q_stride` floats apart.
  virtual void PagedAttention(const float* q, int q_stride,
                              const AttentionSeq* seqs,
                              int num_seqs, const AttentionShape& shape,
                              const float* k_cache, const float* v_cache,
                              float* out) = 0;

  // KV wire codecs (kv_codec.h, rows of num_heads * head_dim values, scale
  // blocks of `block` values). EncodeKv reads rows slots[t] of `cache` (one
  // layer's K or V array) and writes encoded row t at out + t * out_stride;
  // DecodeKv writes encoded row t at in + t * in_stride into row slots[t].
  // `out` / `in` are backend memory, like the caches.
  virtual void EncodeKv(KvFormat format, int block, const float* cache,
                        const int32_t* slots, int num_tokens, int num_heads,
                        int head_dim, uint8_t* out, size_t out_stride) = 0;
  virtual void DecodeKv(KvFormat format, int block, const uint8_t* in,
                        size_t in_stride, int num_tokens, int num_heads,
                        int head_dim, const int32_t* slots, float* cache) = 0;
};

// The CPU backend (OpenBLAS GEMM); always available.
std::unique_ptr<Backend> NewCpuBackend();

}  // namespace kvcast

#endif  // KVCAST_KERNELS_BACKEND_H_
