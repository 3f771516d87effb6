// RMSNorm on the GPU, alone and fused with the residual add before it.
//
// x, y, weight, out: device pointers. x, y and out are [rows, dim] row-major
// float32; weight is [dim] float32. Launchers enqueue on `stream`, neither
// allocate nor synchronize, and return the launch error.
#ifndef KVCAST_KERNELS_CUDA_NORM_H_
#define KVCAST_KERNELS_CUDA_NORM_H_

#include <cuda_runtime.h>

namespace kvcast {
namespace cuda {

// out[r] = x[r] / rms(x[r]) * weight. out may alias x.
cudaError_t LaunchRmsNorm(const float* x, const float* weight, int rows, int dim, float eps,
                          float* out, cudaStream_t stream);

// x += y, then out = RmsNorm(x). out may alias y, not x.
cudaError_t LaunchAddRmsNorm(float* x, const float* y, const float* weight, int rows, int dim,
                             float eps, float* out, cudaStream_t stream);

}  // namespace cuda
}  // namespace kvcast

#endif  // KVCAST_KERNELS_CUDA_NORM_H_
