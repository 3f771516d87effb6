// RMSNorm on the GPU (first kernel of the CUDA backend).
//
// x, weight, out: device pointers. x and out are [rows, dim] row-major
// float32 (out may alias x); weight is [dim]. The launcher enqueues on
// `stream` and neither allocates nor synchronizes; it returns the launch
// error (cudaSuccess when the kernel was enqueued).
#ifndef KVCAST_KERNELS_CUDA_RMS_NORM_H_
#define KVCAST_KERNELS_CUDA_RMS_NORM_H_

#include <cuda_runtime.h>

namespace kvcast {
namespace cuda {

cudaError_t LaunchRmsNorm(const float* x, const float* weight, int rows, int dim, float eps,
                          float* out, cudaStream_t stream);

}  // namespace cuda
}  // namespace kvcast

#endif  // KVCAST_KERNELS_CUDA_RMS_NORM_H_
