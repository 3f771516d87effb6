// The CUDA RMSNorm against the CPU backend (tolerance 1e-5 relative-ish:
// float32 with a different summation order). SKIPPED without a GPU.
#include "kernels/cuda/rms_norm.h"

#include <cuda_runtime.h>

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"

namespace kvcast {
namespace {

TEST(CudaRmsNorm, MatchesCpuBackend) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    GTEST_SKIP() << "no CUDA device";
  }
  const int rows = 5, dim = 1000;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> d(-2.f, 2.f);
  std::vector<float> x(rows * dim), w(dim), ref(rows * dim), got(rows * dim);
  for (float& v : x) v = d(rng);
  for (float& v : w) v = d(rng);
  NewCpuBackend()->RmsNorm(x.data(), w.data(), rows, dim, 1e-5f, ref.data());
  float *dx, *dw;
  ASSERT_EQ(cudaMalloc(&dx, x.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dw, w.size() * 4), cudaSuccess);
  cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(dw, w.data(), w.size() * 4, cudaMemcpyHostToDevice);
  ASSERT_EQ(cuda::LaunchRmsNorm(dx, dw, rows, dim, 1e-5f, dx, nullptr), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(got.data(), dx, got.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], ref[i], 1e-5f * (1 + std::abs(ref[i])));
  cudaFree(dx);
  cudaFree(dw);
}

}  // namespace
}  // namespace kvcast
