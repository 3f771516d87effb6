#include "kernels/cuda/elementwise.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace kvcast {
namespace cuda {
namespace {

constexpr int kThreads = 256;

// Grid-stride launches for flat element loops: enough blocks to fill the
// GPU, capped so the grid stays legal for any n.
int BlocksFor(size_t n) {
  const size_t blocks = (n + kThreads - 1) / kThreads;
  return int(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
}

__device__ float HalfToFloat(uint16_t v, bool bf16) {
  if (bf16) return __uint_as_float(uint32_t(v) << 16);
  return __half2float(__ushort_as_half(v));
}

// One block per token row.
__global__ void EmbeddingHalfKernel(const int32_t* ids, const uint16_t* table, bool bf16,
                                    int dim, float* out) {
  const uint16_t* row = table + size_t(ids[blockIdx.x]) * dim;
  float* o = out + size_t(blockIdx.x) * dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) o[i] = HalfToFloat(row[i], bf16);
}

__global__ void GatherRowsKernel(const float* x, const int32_t* rows, int dim, float* out) {
  const float* row = x + size_t(rows[blockIdx.x]) * dim;
  float* o = out + size_t(blockIdx.x) * dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) o[i] = row[i];
}

// One block per token; threads over (head, pair). The angle is a float
// product, as HF computes it, and sincosf is the accurate version so long
// positions round like the CPU's std::cos / std::sin.
__global__ void RopeKernel(float* x, int x_stride, int num_heads, int head_dim,
                           const int32_t* positions, const float* inv_freq) {
  const int half = head_dim / 2;
  const float pos = float(positions[blockIdx.x]);
  float* row = x + size_t(blockIdx.x) * x_stride;
  for (int j = threadIdx.x; j < num_heads * half; j += blockDim.x) {
    const int h = j / half, i = j % half;
    float s, c;
    sincosf(pos * inv_freq[i], &s, &c);
    float* v = row + size_t(h) * head_dim;
    const float a = v[i], b = v[i + half];
    v[i] = a * c - b * s;
    v[i + half] = b * c + a * s;
  }
}

__global__ void SwiGluKernel(const float* gate_up, int rows, int dim, float* out) {
  const size_t n = size_t(rows) * dim;
  for (size_t e = blockIdx.x * size_t(blockDim.x) + threadIdx.x; e < n;
       e += size_t(gridDim.x) * blockDim.x) {
    const size_t r = e / dim, i = e % dim;
    const float g = gate_up[r * 2 * dim + i], u = gate_up[r * 2 * dim + dim + i];
    out[e] = g / (1.f + expf(-g)) * u;
  }
}

// One block per token: its K row and V row into the token's slot.
__global__ void WriteKvKernel(const float* k, const float* v, int stride, const int32_t* slots,
                              int row, bool fp16_values, float* k_cache, float* v_cache) {
  const float* ks = k + size_t(blockIdx.x) * stride;
  const float* vs = v + size_t(blockIdx.x) * stride;
  const size_t at = size_t(slots[blockIdx.x]) * row;
  for (int i = threadIdx.x; i < row; i += blockDim.x) {
    k_cache[at + i] = fp16_values ? __half2float(__float2half_rn(ks[i])) : ks[i];
    v_cache[at + i] = fp16_values ? __half2float(__float2half_rn(vs[i])) : vs[i];
  }
}

__global__ void CastToHalfKernel(const float* x, size_t n, bool bf16, uint16_t* out) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    out[i] = bf16 ? __bfloat16_as_ushort(__float2bfloat16_rn(x[i]))
                  : __half_as_ushort(__float2half_rn(x[i]));
  }
}

__global__ void AddBiasKernel(float* y, const float* bias, int rows, int n) {
  const size_t total = size_t(rows) * n;
  for (size_t e = blockIdx.x * size_t(blockDim.x) + threadIdx.x; e < total;
       e += size_t(gridDim.x) * blockDim.x) {
    y[e] += bias[e % n];
  }
}

}  // namespace

cudaError_t LaunchEmbeddingHalf(const int32_t* ids, int num_tokens, const uint16_t* table,
                                bool bf16, int dim, float* out, cudaStream_t stream) {
  if (num_tokens == 0) return cudaSuccess;
  EmbeddingHalfKernel<<<num_tokens, kThreads, 0, stream>>>(ids, table, bf16, dim, out);
  return cudaGetLastError();
}

cudaError_t LaunchGatherRows(const float* x, const int32_t* rows, int num_rows, int dim,
                             float* out, cudaStream_t stream) {
  if (num_rows == 0) return cudaSuccess;
  GatherRowsKernel<<<num_rows, kThreads, 0, stream>>>(x, rows, dim, out);
  return cudaGetLastError();
}

cudaError_t LaunchRope(float* x, int num_tokens, int x_stride, int num_heads, int head_dim,
                       const int32_t* positions, const float* inv_freq, cudaStream_t stream) {
  if (num_tokens == 0) return cudaSuccess;
  RopeKernel<<<num_tokens, kThreads, 0, stream>>>(x, x_stride, num_heads, head_dim, positions,
                                                  inv_freq);
  return cudaGetLastError();
}

cudaError_t LaunchSwiGlu(const float* gate_up, int rows, int dim, float* out,
                         cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  SwiGluKernel<<<BlocksFor(size_t(rows) * dim), kThreads, 0, stream>>>(gate_up, rows, dim, out);
  return cudaGetLastError();
}

cudaError_t LaunchWriteKv(const float* k, const float* v, int num_tokens, int stride,
                          const int32_t* slots, int num_kv_heads, int head_dim, bool fp16_values,
                          float* k_cache, float* v_cache, cudaStream_t stream) {
  if (num_tokens == 0) return cudaSuccess;
  WriteKvKernel<<<num_tokens, kThreads, 0, stream>>>(
      k, v, stride, slots, num_kv_heads * head_dim, fp16_values, k_cache, v_cache);
  return cudaGetLastError();
}

cudaError_t LaunchCastToHalf(const float* x, size_t n, bool bf16, uint16_t* out,
                             cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  CastToHalfKernel<<<BlocksFor(n), kThreads, 0, stream>>>(x, n, bf16, out);
  return cudaGetLastError();
}

cudaError_t LaunchAddBias(float* y, const float* bias, int rows, int n, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  AddBiasKernel<<<BlocksFor(size_t(rows) * n), kThreads, 0, stream>>>(y, bias, rows, n);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace kvcast
