#include "kernels/cuda/rms_norm.h"

namespace kvcast {
namespace cuda {
namespace {

constexpr int kThreads = 256;

// One block per row: a block-wide sum of squares, then the scaled write.
__global__ void RmsNormKernel(const float* __restrict__ x, const float* __restrict__ weight,
                              int dim, float eps, float* out) {
  const float* xr = x + size_t(blockIdx.x) * dim;
  float* yr = out + size_t(blockIdx.x) * dim;
  float ss = 0.f;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) ss += xr[i] * xr[i];
  for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
  __shared__ float warp_sums[kThreads / 32];
  __shared__ float inv_rms;
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = ss;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.f;
    for (int w = 0; w < kThreads / 32; ++w) total += warp_sums[w];
    inv_rms = rsqrtf(total / dim + eps);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < dim; i += blockDim.x) yr[i] = xr[i] * inv_rms * weight[i];
}

}  // namespace

cudaError_t LaunchRmsNorm(const float* x, const float* weight, int rows, int dim, float eps,
                          float* out, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  RmsNormKernel<<<rows, kThreads, 0, stream>>>(x, weight, dim, eps, out);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace kvcast
