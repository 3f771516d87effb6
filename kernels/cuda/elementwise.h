// The CUDA backend's small kernels: gathers, RoPE, SwiGLU, KV writes into
// pages, casts for the GEMM inputs, bias adds.
//
// Every pointer is device memory; activations are row-major float32. Half
// types are fp16 (`bf16 == false`) or bf16 (`bf16 == true`) stored as
// uint16_t. Launchers enqueue on `stream`, neither allocate nor synchronize,
// and return the launch error.
#ifndef KVCAST_KERNELS_CUDA_ELEMENTWISE_H_
#define KVCAST_KERNELS_CUDA_ELEMENTWISE_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace kvcast {
namespace cuda {

// out[t, :] = table[ids[t], :] widened to float32; table [vocab, dim] half.
cudaError_t LaunchEmbeddingHalf(const int32_t* ids, int num_tokens, const uint16_t* table,
                                bool bf16, int dim, float* out, cudaStream_t stream);

// out[t, :] = x[rows[t], :]; x rows of `dim` float32.
cudaError_t LaunchGatherRows(const float* x, const int32_t* rows, int num_rows, int dim,
                             float* out, cudaStream_t stream);

// HF "rotate half" RoPE in place on x [num_tokens][num_heads][head_dim]
// (token rows x_stride floats apart): angle = positions[t] * inv_freq[i],
// inv_freq [head_dim / 2].
cudaError_t LaunchRope(float* x, int num_tokens, int x_stride, int num_heads, int head_dim,
                       const int32_t* positions, const float* inv_freq, cudaStream_t stream);

// out[r, i] = silu(gate_up[r, i]) * gate_up[r, dim + i]; gate_up rows of 2 * dim.
cudaError_t LaunchSwiGlu(const float* gate_up, int rows, int dim, float* out,
                         cudaStream_t stream);

// k_cache[slots[t]] = k[t], v_cache[slots[t]] = v[t]: rows of
// num_kv_heads * head_dim floats, source rows `stride` floats apart, caches
// [slot][num_kv_heads][head_dim]; with fp16_values each value rounded to
// the nearest fp16 first (ties to even).
cudaError_t LaunchWriteKv(const float* k, const float* v, int num_tokens, int stride,
                          const int32_t* slots, int num_kv_heads, int head_dim, bool fp16_values,
                          float* k_cache, float* v_cache, cudaStream_t stream);

// out[i] = half(x[i]) (round to nearest even), n values.
cudaError_t LaunchCastToHalf(const float* x, size_t n, bool bf16, uint16_t* out,
                             cudaStream_t stream);

// y[r, j] += bias[j], y [rows, n].
cudaError_t LaunchAddBias(float* y, const float* bias, int rows, int n, cudaStream_t stream);

}  // namespace cuda
}  // namespace kvcast

#endif  // KVCAST_KERNELS_CUDA_ELEMENTWISE_H_
