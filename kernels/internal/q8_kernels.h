// Internal to //kernels:q8_matmul (and its test and benchmark): the block
// quantizer and the dot-product kernels behind q8_matmul.h, in a scalar
// version and AVX2 / AVX-VNNI / AVX-512 VNNI versions picked at run time. All produce
// bit-identical results (see the arithmetic in q8_matmul.h); the test checks
// that on random and extreme inputs.
#ifndef KVCAST_KERNELS_INTERNAL_Q8_KERNELS_H_
#define KVCAST_KERNELS_INTERNAL_Q8_KERNELS_H_

#include <cstdint>

namespace kvcast {
namespace q8_internal {

// Quantizes one block of 32 floats; returns its scale.
float QuantizeBlock(const float* x, int8_t* q);

// out[r * out_stride + j] = dot(x row r, w row j) for r < rows (1..4) and
// j < n. x rows: `blocks` blocks each, row r at xq + r * blocks * 32 and
// xs + r * blocks; w rows likewise, row j at wq + j * blocks * 32.
using DotFn = void (*)(const int8_t* xq, const float* xs, int rows, const int8_t* wq,
                       const float* ws, int64_t n, int64_t blocks, float* out,
                       int64_t out_stride);

struct Q8Kernels {
  const char* name;
  DotFn dot;
};

const Q8Kernels& ScalarQ8Kernels();
// nullptr when the CPU lacks the instructions.
const Q8Kernels* Avx2Q8Kernels();
const Q8Kernels* AvxVnniQ8Kernels();
const Q8Kernels* Avx512VnniQ8Kernels();
// The fastest of the above this CPU runs.
const Q8Kernels& ActiveQ8Kernels();

// The fixed reduction of the eight lanes.
inline float SumLanes(const float* a) {
  return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

}  // namespace q8_internal
}  // namespace kvcast

#endif  // KVCAST_KERNELS_INTERNAL_Q8_KERNELS_H_
