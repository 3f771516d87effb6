// y = x W^T for a few rows of x (decode: one row per sequence), read
// straight from float32 activations: one warp per output column streams
// that column's weight row in 16-byte loads and keeps every x row's partial
// sum in registers, so the weights are read once per step at close to the
// memory's bandwidth, and no cast kernel runs first. cuBLAS keeps the
// larger batches and prompts.
//
// Every pointer is device memory: x [m, k] float32 row-major, w [n, k] fp16
// (`bf16 == false`) or bf16 stored as uint16_t, y [m, n] float32. Enqueues
// on `stream`, neither allocates nor synchronizes, returns the launch error.
#ifndef KVCAST_KERNELS_CUDA_SKINNY_GEMM_H_
#define KVCAST_KERNELS_CUDA_SKINNY_GEMM_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace kvcast {
namespace cuda {

inline constexpr int kSkinnyGemmMaxRows = 8;

// m in [1, kSkinnyGemmMaxRows] and k a multiple of 8 (16-byte weight loads).
inline bool SkinnyGemmSupports(int m, int k) {
  return m >= 1 && m <= kSkinnyGemmMaxRows && k % 8 == 0;
}

cudaError_t LaunchSkinnyGemm(const float* x, int m, int k, const uint16_t* w, bool bf16, int n,
                             float* y, cudaStream_t stream);

}  // namespace cuda
}  // namespace kvcast

#endif  // KVCAST_KERNELS_CUDA_SKINNY_GEMM_H_
