// The compute interface every backend (CPU now, CUDA later) implements.
//
// Contract:
//  - Activations are dense, row-major float32 arrays in memory obtained from
//    the same backend's Allocate(); weights come from LoadWeight() in the
//    backend's own compute format (the CPU backend widens to float32, the
//    CUDA backend keeps matrices in fp16/bf16). Ops never fail on valid
//    shapes: the engine checks shapes once, at load time.
//  - The paged KV cache of one layer is two arrays, K and V, each laid out
//    [num_pages][page_tokens][num_kv_heads][head_dim]; a token's slot is
//    page * page_tokens + offset. Page tables index pages in those arrays.
//  - Compute ops on one Backend are issued from one thread at a time (the
//    engine's compute thread); a backend may run them asynchronously and
//    Synchronize() waits for completion. The CPU backend completes each op
//    before returning. The KV transfer ops (EncodeKv, DecodeKv,
//    AllocateStaging) may be called from one other thread at the same time
//    (the transport's loop) on pages the compute ops are not using; they
//    return when done.
#ifndef KVCAST_KERNELS_BACKEND_H_
#define KVCAST_KERNELS_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/kv_codec.h"
#include "kernels/token_picker.h"

namespace kvcast {

// Memory owned by a backend; freed when destroyed.
class DeviceBuffer {
 public:
  virtual ~DeviceBuffer() = default;
  virtual void* data() const = 0;
  virtual size_t size() const = 0;
  float* f32() { return static_cast<float*>(data()); }
};

// Element type of a weight, in a checkpoint or on a backend. kQ4_0Blocks,
// kQ4_1Blocks, kQ4_KBlocks, kQ5_KBlocks, kQ5_0Blocks, kQ5_1Blocks,
// kQ6_KBlocks (kernels/q4_matmul.h: Q4Source) and kQ8_0Blocks
// (q8_matmul.h: PackQ8_0Matrix) are a GGUF file's blocks, which
// only a backend whose TakesWeightType says so is given; kQ8 and kQ4 are the
// CPU backend's compact matrix formats (kernels/q8_matmul.h, q4_matmul.h),
// never a checkpoint's. The CPU backend also keeps kBF16 matrices
// (kernels/bf16_matmul.h).
enum class WeightType {
  kF32, kF16, kBF16, kQ4_0Blocks, kQ4_1Blocks, kQ4_KBlocks, kQ5_KBlocks, kQ5_0Blocks,
  kQ5_1Blocks, kQ6_KBlocks, kQ8_0Blocks, kQ8, kQ4
};

// Matrices (projections, embeddings, LM head) may be kept in 16 bits by a
// backend; vectors (norm weights, biases) are always float32 on every backend.
enum class WeightKind { kMatrix, kVector };

// A weight in a backend's memory and compute format, from LoadWeight.
class Weight {
 public:
  Weight() = default;
  Weight(std::unique_ptr<DeviceBuffer> buffer, WeightType type, size_t rows = 0, size_t cols = 0)
      : buffer_(std::move(buffer)), type_(type), rows_(rows), cols_(cols) {}
  const void* data() const { return buffer_ ? buffer_->data() : nullptr; }
  WeightType type() const { return type_; }
  // The shape LoadWeight was given (0 x 0 where a backend does not keep it).
  size_t rows() const { return rows_; }
  size_t cols() const { return cols_; }
  // Bytes the backend holds for it.
  size_t bytes() const { return buffer_ ? buffer_->size() : 0; }
  // The values of a vector (always float32).
  const float* f32() const { return static_cast<const float*>(data()); }
  explicit operator bool() const { return buffer_ != nullptr; }

 private:
  std::unique_ptr<DeviceBuffer> buffer_;
  WeightType type_ = WeightType::kF32;
  size_t rows_ = 0, cols_ = 0;
};

// How KV values are kept in the page caches: float32; float32 holding
// values rounded to fp16 (FloatToHalf: ties to even, overflow to infinity);
// or the fp16 bits themselves, 2 bytes a value (where
// Backend::SupportsHalfKvPages()). The last two hold the same values.
enum class KvStorage { kF32, kF32Fp16Values, kF16 };
inline size_t KvValueBytes(KvStorage s) { return s == KvStorage::kF16 ? 2 : 4; }

// KV caches as the transfer ops address them: `num_arrays` arrays, array a
// `array_values` values after array a - 1, each laid out like one layer's K
// (or V) cache [slot][num_heads][head_dim], values as `storage` keeps them.
// A pool's every layer, K then V per layer (the wire order), is
// {pages of layer 0's K, 2 * num_layers, layer_values, ...}.
struct KvArrays {
  void* base = nullptr;
  int num_arrays = 1;
  size_t array_values = 0;
  int num_heads = 0;
  int head_dim = 0;
  KvStorage storage = KvStorage::kF32;
};

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
  KvStorage storage = KvStorage::kF32;  // how the caches keep K/V
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;

  // Memory. Allocate returns ResourceExhausted when memory is short.
  virtual absl::StatusOr<std::unique_ptr<DeviceBuffer>> Allocate(size_t bytes) = 0;
  // Bytes that Allocate could still hand out (free device memory on a GPU,
  // available host memory on the CPU), for sizing the KV page pool.
  virtual size_t AvailableMemory() const = 0;
  virtual void CopyToDevice(void* dst, const void* src, size_t bytes) = 0;
  virtual void CopyToHost(void* dst, const void* src, size_t bytes) = 0;
  // Waits for every op issued so far; the first error of an asynchronous op
  // (a GPU fault) is reported here.
  virtual absl::Status Synchronize() = 0;

  // Converts `rows` x `cols` checkpoint elements of `type` at `src` (host
  // memory, e.g. an mmapped file; row-major, a matrix's rows are its output
  // features; a vector is 1 x n) into a new weight in this backend's compute
  // format.
  virtual absl::StatusOr<Weight> LoadWeight(WeightType type, WeightKind kind,
                                            const void* src, size_t rows, size_t cols) = 0;
  // Whether LoadWeight takes a matrix of `type` as stored in a checkpoint:
  // every backend takes kF32, kF16 and kBF16; a GGUF block type only a
  // backend that keeps it as it is (the caller widens it for the others).
  virtual bool TakesWeightType(WeightType type) const {
    return type == WeightType::kF32 || type == WeightType::kF16 || type == WeightType::kBF16;
  }

  // out[i, :] = table[ids[i], :]; table [vocab, dim], a matrix weight.
  virtual void Embedding(const int32_t* ids, int num_tokens, const Weight& table,
                         int dim, float* out) = 0;
  // out[i, :] = x[rows[i], :]; x rows of `dim`.
  virtual void GatherRows(const float* x, const int32_t* rows, int num_rows, int dim,
                          float* out) = 0;
  // out[r] = x[r] / rms(x[r]) * weight, rows of `dim`. out may alias x.
  virtual void RmsNorm(const float* x, const float* weight, int rows, int dim,
                       float eps, float* out) = 0;
  // The residual add fused with the next norm: x += y, then out = RmsNorm(x).
  // out may alias y (not x).
  virtual void AddRmsNorm(float* x, const float* y, const float* weight, int rows,
                          int dim, float eps, float* out) = 0;
  // y[m, n] = x[m, k] * w[n, k]^T (+ bias[n] when bias != nullptr); w a
  // matrix weight, accumulated in float32.
  virtual void Linear(const float* x, int m, int k, const Weight& w, int n,
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
  // floats apart) into slots[t] of the layer's caches (layout above), kept
  // as `storage` says: with fp16 values (kF32Fp16Values, kF16) the caches
  // hold exactly what the fp16 KV track and the fp16 host tier carry.
  virtual void WriteKv(const float* k, const float* v, int num_tokens,
                       int stride, const int32_t* slots, int num_kv_heads,
                       int head_dim, KvStorage storage, void* k_cache, void* v_cache) = 0;
  // Whether the caches may keep fp16 bits (KvStorage::kF16) in WriteKv,
  // PagedAttention, EncodeKv and DecodeKv.
  virtual bool SupportsHalfKvPages() const { return false; }
  // How this backend keeps fp16 KV values: fp16 pages where it can.
  KvStorage Fp16KvStorage() const {
    return SupportsHalfKvPages() ? KvStorage::kF16 : KvStorage::kF32Fp16Values;
  }
  // OK when PagedAttention takes heads of this shape, else InvalidArgument
  // saying what it takes; Transformer::Load asks, so a model a backend
  // cannot run fails at load rather than in a pass.
  virtual absl::Status SupportsAttention(int num_heads, int num_kv_heads, int head_dim) const = 0;
  // out [total_queries, num_heads, head_dim] = causal softmax(q k^T * scale) v
  // for every sequence in `seqs` (host memory; their page tables, backend
  // memory, lie in one array), reading K/V through the page tables (kept as
  // shape.storage says); q rows are `q_stride` floats apart.
  virtual void PagedAttention(const float* q, int q_stride,
                              const AttentionSeq* seqs,
                              int num_seqs, const AttentionShape& shape,
                              const void* k_cache, const void* v_cache,
                              float* out) = 0;

  // tokens[j] (host memory) = the token TokenPicker picks from row
  // params[j].row of `logits` [rows][vocab] with params[j] (host memory),
  // for j < num; returns once `tokens` holds them, with the first error of
  // any op issued so far (as Synchronize). Only the tokens cross to the host.
  virtual absl::Status SampleTokens(const float* logits, int vocab, const TokenSampling* params,
                                    int num, int32_t* tokens) = 0;
  // SampleTokens honours TokenSampling::allowed (constrained decoding picks
  // on the backend, not from a host copy of the row): the CPU and CUDA
  // backends do.
  virtual bool SamplesWithTokenMasks() const { return false; }

  // KV transfer (kv_codec.h formats; rows of num_heads * head_dim values,
  // scale blocks of `block` values, row_bytes = KvRowBytes(...)). EncodeKv
  // writes, for token t and array a, row slots[t] of array a encoded at
  // out + t * out_stride + a * row_bytes; DecodeKv is its inverse. `slots`
  // and `out` / `in` are host memory; buffers from AllocateStaging move
  // without a bounce through a driver buffer. They return when done: `out`
  // holds the bytes / the caches hold the rows; or with the transfer's
  // error (a device copy or kernel failed), which fails only this call: the
  // bytes / rows it touched are then undefined, and compute ops go on.
  virtual absl::Status EncodeKv(KvFormat format, int block, const KvArrays& src,
                                const int32_t* slots, int num_tokens, uint8_t* out,
                                size_t out_stride) = 0;
  virtual absl::Status DecodeKv(KvFormat format, int block, const uint8_t* in, size_t in_stride,
                                const int32_t* slots, int num_tokens, const KvArrays& dst) = 0;
  // Host memory for EncodeKv / DecodeKv buffers (page-locked on a GPU).
  virtual absl::StatusOr<std::unique_ptr<DeviceBuffer>> AllocateStaging(size_t bytes) = 0;
  // True when the pages are host memory (the CPU backend): an EncodeKv /
  // DecodeKv call of one token costs what its share of a larger call does,
  // so callers code a few tokens at a time while their bytes are in cache.
  // A device backend wants many tokens per call (one DMA).
  virtual bool KvPagesInHostMemory() const { return false; }
};

// How the CPU backend keeps matrices: float32 (OpenBLAS GEMMs; exact, the
// reference the golden tests compare), Q8 (kernels/q8_matmul.h: int8
// blocks of 32 with a float scale, 3.6x less memory per token, activations
// quantized alike, as llama.cpp's Q8_0; matrices whose rows are not a
// multiple of 32 stay float32), or BF16 (kernels/bf16_matmul.h: half the
// memory of float32, exact for bf16 checkpoints, float32 activations; rows
// a multiple of 16).
enum class CpuWeights { kF32, kQ8, kBF16 };

// The CPU backend; always available.
std::unique_ptr<Backend> NewCpuBackend(CpuWeights weights = CpuWeights::kF32);

// A backend by name: "cpu" (Q8 weights), "cpu-bf16", "cpu-f32", or
// "cuda" (GPU `device`) when the build has it
// (NotFound names the backends built in); errors from the device otherwise.
absl::StatusOr<std::unique_ptr<Backend>> NewBackend(std::string_view name, int device = 0);

// Called by a backend library at static-initialization time (alwayslink).
using BackendFactory = absl::StatusOr<std::unique_ptr<Backend>> (*)(int device);
bool RegisterBackend(std::string_view name, BackendFactory factory);

}  // namespace kvcast

#endif  // KVCAST_KERNELS_BACKEND_H_
