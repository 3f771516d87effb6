// BF16 weights on the CPU: a [n, k] matrix kept as bfloat16 (2 bytes per
// weight, half of float32's memory traffic, exact for bf16 checkpoints), and
// the product y = x W^T with float32 activations.
//
// Arithmetic (every implementation, scalar, AVX2 and AVX-512, chosen at run
// time, follows it exactly, so results are bit-identical across them, across
// thread counts, and batch-invariant): value e of a row goes to lane e % 16
// as acc = fma(x, w, acc) in order of e; the 16 lanes are reduced as
// s[i] = lane[i] + lane[i + 8], then ((s0+s4)+(s2+s6))+((s1+s5)+(s3+s7)).
// Requires k % 16 == 0 (Bf16Supported). Thread safety: stateless; runs on
// the calling thread plus an OpenMP team.
#ifndef KVCAST_KERNELS_BF16_MATMUL_H_
#define KVCAST_KERNELS_BF16_MATMUL_H_

#include <cstdint>
#include <string_view>

namespace kvcast {

inline bool Bf16Supported(int64_t k) { return k > 0 && k % 16 == 0; }

// y[m, n] = x[m, k] W^T for the bf16 matrix `w` [n, k]; y rows are n apart.
void Bf16Linear(const float* x, int m, int64_t k, const uint16_t* w, int64_t n, float* y);

// "avx512", "avx2" or "scalar": the kernel Bf16Linear uses on this CPU.
std::string_view Bf16KernelName();

namespace bf16_internal {
// out[r * out_stride + j] = dot(x row r, w row j), r < rows (1..4), j < n.
using DotFn = void (*)(const float* x, int rows, const uint16_t* w, int64_t n, int64_t k,
                       float* out, int64_t out_stride);
struct Bf16Kernel {
  const char* name;
  DotFn dot;
};
// Every kernel this CPU runs, the scalar reference first (for tests).
int AvailableBf16Kernels(const Bf16Kernel** out, int max);
}  // namespace bf16_internal

}  // namespace kvcast

#endif  // KVCAST_KERNELS_BF16_MATMUL_H_
