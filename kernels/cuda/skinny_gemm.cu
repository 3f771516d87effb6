#include "kernels/cuda/skinny_gemm.h"

#include <cuda_fp16.h>

namespace kvcast {
namespace cuda {
namespace {

constexpr int kWarps = 8;   // output columns per block
constexpr int kUnroll = 4;  // 16-byte weight loads in flight per lane

template <bool BF16>
__device__ __forceinline__ float Widen(uint32_t bits16) {
  if constexpr (BF16) {
    return __uint_as_float(bits16 << 16);
  } else {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(bits16)));
  }
}

// Eight weights (one uint4) times eight x values of each row.
template <int M, bool BF16>
__device__ __forceinline__ void Dot8(const uint4& wv, const float* x, int k, int col,
                                     float (&acc)[M]) {
  float wf[8];
  const uint32_t words[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    wf[2 * i] = Widen<BF16>(words[i] & 0xffffu);
    wf[2 * i + 1] = Widen<BF16>(words[i] >> 16);
  }
#pragma unroll
  for (int r = 0; r < M; ++r) {
    const float4* xr = reinterpret_cast<const float4*>(x + size_t(r) * k + col);
    const float4 a = __ldg(xr), b = __ldg(xr + 1);
    acc[r] += wf[0] * a.x + wf[1] * a.y + wf[2] * a.z + wf[3] * a.w + wf[4] * b.x +
              wf[5] * b.y + wf[6] * b.z + wf[7] * b.w;
  }
}

template <int M, bool BF16>
__global__ void __launch_bounds__(kWarps * 32)
    SkinnyGemmKernel(const float* __restrict__ x, int k, const uint16_t* __restrict__ w, int n,
                     float* __restrict__ y) {
  const int lane = threadIdx.x & 31;
  const int j = blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (j >= n) return;
  const uint4* wrow = reinterpret_cast<const uint4*>(w + size_t(j) * k);
  const int vecs = k / 8;  // uint4s in the row
  float acc[M];
#pragma unroll
  for (int r = 0; r < M; ++r) acc[r] = 0.f;
  int v = lane;
  // kUnroll loads issued before their first use.
  for (; v + 32 * (kUnroll - 1) < vecs; v += 32 * kUnroll) {
    uint4 wv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) wv[u] = __ldg(wrow + v + 32 * u);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) Dot8<M, BF16>(wv[u], x, k, 8 * (v + 32 * u), acc);
  }
  for (; v < vecs; v += 32) Dot8<M, BF16>(__ldg(wrow + v), x, k, 8 * v, acc);
#pragma unroll
  for (int r = 0; r < M; ++r) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], off);
  }
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < M; ++r) y[size_t(r) * n + j] = acc[r];
  }
}

template <int M>
cudaError_t Launch(const float* x, int k, const uint16_t* w, bool bf16, int n, float* y,
                   cudaStream_t stream) {
  const dim3 grid((n + kWarps - 1) / kWarps), block(kWarps * 32);
  if (bf16) {
    SkinnyGemmKernel<M, true><<<grid, block, 0, stream>>>(x, k, w, n, y);
  } else {
    SkinnyGemmKernel<M, false><<<grid, block, 0, stream>>>(x, k, w, n, y);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchSkinnyGemm(const float* x, int m, int k, const uint16_t* w, bool bf16, int n,
                             float* y, cudaStream_t stream) {
  if (!SkinnyGemmSupports(m, k) || n <= 0) return cudaErrorInvalidValue;
  switch (m) {
    case 1: return Launch<1>(x, k, w, bf16, n, y, stream);
    case 2: return Launch<2>(x, k, w, bf16, n, y, stream);
    case 3: return Launch<3>(x, k, w, bf16, n, y, stream);
    case 4: return Launch<4>(x, k, w, bf16, n, y, stream);
    case 5: return Launch<5>(x, k, w, bf16, n, y, stream);
    case 6: return Launch<6>(x, k, w, bf16, n, y, stream);
    case 7: return Launch<7>(x, k, w, bf16, n, y, stream);
    default: return Launch<8>(x, k, w, bf16, n, y, stream);
  }
}

}  // namespace cuda
}  // namespace kvcast
