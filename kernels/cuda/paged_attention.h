// Batched causal attention over the paged KV cache on the GPU (the CUDA
// counterpart of Backend::PagedAttention, see kernels/backend.h).
//
// All pointers in PagedAttentionParams are device pointers. The launcher
// enqueues on `stream` and neither allocates nor synchronizes; scratch for
// split-KV partial results is the caller's `workspace`. It returns
// cudaErrorInvalidValue for unsupported shapes (head_dim not a multiple of 32
// in [32, 256], num_heads not a multiple of num_kv_heads, ...) and otherwise
// the launch error (cudaSuccess when the kernels were enqueued).
#ifndef KVCAST_KERNELS_CUDA_PAGED_ATTENTION_H_
#define KVCAST_KERNELS_CUDA_PAGED_ATTENTION_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/tiled_attention.h"  // AttentionSeqDesc

namespace kvcast {
namespace cuda {

struct PagedAttentionParams {
  const float* q = nullptr;  // [total_queries][q_stride floats]; head h at h * head_dim
  int q_stride = 0;
  // [num_pages][page_tokens][num_kv_heads][head_dim]; slot = page * page_tokens + offset.
  const float* k_cache = nullptr;
  const float* v_cache = nullptr;          // same layout
  const int32_t* page_tables = nullptr;    // device
  const AttentionSeqDesc* seqs = nullptr;  // device, num_seqs entries
  int num_seqs = 0;
  int total_queries = 0;    // sum of num_queries
  int max_context_len = 0;  // max context_len over seqs (host-known; sizes the grid)
  int max_num_queries = 0;  // max num_queries over seqs (host-known)
  int min_num_queries = 0;  // min num_queries over seqs (host-known; 0: unknown)
  // GQA: num_heads % num_kv_heads == 0.
  int num_heads = 0, num_kv_heads = 0, head_dim = 0, page_tokens = 0;
  float scale = 0.f;
  float* out = nullptr;  // [total_queries][num_heads][head_dim], dense
};

// The head shapes the kernels take: head_dim a multiple of 32 in [32, 256]
// (a warp's lanes each hold head_dim / 32 values), query heads a multiple of
// the KV heads.
inline bool PagedAttentionSupports(int num_heads, int num_kv_heads, int head_dim) {
  return head_dim >= 32 && head_dim <= 256 && head_dim % 32 == 0 && num_heads > 0 &&
         num_kv_heads > 0 && num_heads % num_kv_heads == 0;
}

// Bytes of scratch LaunchPagedAttention needs for these params (split-KV
// partial results); 0 allowed.
size_t PagedAttentionWorkspaceBytes(const PagedAttentionParams& p);

// Causal attention: query j (0-based within its sequence) sees context tokens
// [0, context_len - num_queries + j]. `workspace` has at least
// PagedAttentionWorkspaceBytes(p) bytes of device memory.
//
// Sequences of at least 32 queries (prefill) go to the tiled kernel
// (tiled_attention.h) where it takes the head_dim (64, 128), the others to
// the per-row kernel. KVCAST_CUDA_ATTENTION=warp (or =tiled) in the
// environment sends every sequence to one kernel, for A/B measurements and
// tests.
cudaError_t LaunchPagedAttention(const PagedAttentionParams& p, void* workspace,
                                 cudaStream_t stream);

}  // namespace cuda
}  // namespace kvcast

#endif  // KVCAST_KERNELS_CUDA_PAGED_ATTENTION_H_
