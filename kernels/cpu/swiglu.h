// SwiGLU on the CPU: out[r, i] = silu(gate[r, i]) * up[r, i] for rows laid out
// as [gate | up] (2 * dim floats a row), silu(g) = g * sigmoid(g).
//
// sigmoid is computed from e = exp(-|g|) (never overflows): 1 / (1 + e) for
// g >= 0, e / (1 + e) below, with cpu_simd's exp (relative error < 2e-7) on
// AVX-512 or AVX2, std::exp otherwise; the result is within 1e-6 relative of
// g / (1 + exp(-g)) * u in double. Rows run on an OpenMP team when there are
// many. Thread safety: stateless.
#ifndef KVCAST_KERNELS_CPU_SWIGLU_H_
#define KVCAST_KERNELS_CPU_SWIGLU_H_

namespace kvcast {

// `parallel`: rows on OpenMP's threads when there are enough of them.
void CpuSwiGlu(const float* gate_up, int rows, int dim, float* out, bool parallel = true);

// The portable loop CpuSwiGlu falls back to, for tests.
void CpuSwiGluScalar(const float* gate_up, int rows, int dim, float* out);

}  // namespace kvcast

#endif  // KVCAST_KERNELS_CPU_SWIGLU_H_
