// Internal to //kernels:q8_matmul (and its test and benchmark): the block
// quantizer and the dot-product kernels behind q8_matmul.h, in a scalar
// version and AVX2 / AVX-VNNI / AVX-512 VNNI / AMX versions picked at run
// time. All produce bit-identical results (see the arithmetic in
// q8_matmul.h); the test checks that on random and extreme inputs.
#ifndef KVCAST_KERNELS_INTERNAL_Q8_KERNELS_H_
#define KVCAST_KERNELS_INTERNAL_Q8_KERNELS_H_

#include <cstdint>

namespace kvcast {
namespace q8_internal {

constexpr int kPanelRows = 16;     // weight rows interleaved in one panel
constexpr int kPanelBlockBytes = 512;  // one block (32 values) of a panel's 16 rows
// Where value e (< 32) of panel row i (< 16) sits in its panel block.
constexpr int PanelByte(int i, int e) { return (e / 4) * 64 + i * 4 + e % 4; }

// Quantizes one block of 32 floats; returns its scale.
float QuantizeBlock(const float* x, int8_t* q);

// Quantizes `blocks` consecutive blocks of 32 floats as QuantizeBlock does,
// with each block's scale in s[b] and its correction (Q8Rows::c) in c[b].
using QuantizeFn = void (*)(const float* x, int64_t blocks, int8_t* q, float* s, int32_t* c);
void QuantizeBlocksScalar(const float* x, int64_t blocks, int8_t* q, float* s, int32_t* c);

// Quantized activation rows: row r has q[r * blocks * 32 ...] (int8, the
// block layout of QuantizeBlock), s[r * blocks + b] (the block scales) and
// c[r * blocks + b] = 128 * (sum of the block's q), the correction that
// turns a dot product against the stored bytes (q_w + 128) into one
// against q_w.
struct Q8Rows {
  const int8_t* q;
  const float* s;
  const int32_t* c;
  int64_t blocks;
  // h[r * blocks + b]: the sum of the block's first 16 q (only the Q6 weight
  // kernels read it, q4_kernels.h; nullptr elsewhere).
  const int32_t* h = nullptr;
};

// Quantizes the m rows of x [m, k] with ActiveQ8Kernels().quantize (rows
// in parallel on an OpenMP team when large) into buffers owned by the
// calling thread, valid until its next call.
Q8Rows QuantizeActivations(const float* x, int m, int64_t k);

// out[r * out_stride + j] = dot(x row r, weight row j) for r < rows and
// j < cols, where the weight rows are the panels at `w` (panel p's block b
// at w + (p * blocks + b) * 512, its scales at ws + (p * blocks + b) * 16)
// and 16 * (panels - 1) < cols <= 16 * panels.
using DotFn = void (*)(const Q8Rows& x, int rows, const uint8_t* w, const float* ws,
                       int64_t panels, int64_t cols, float* out, int64_t out_stride);

struct Q8Kernels {
  const char* name;
  DotFn dot;
  QuantizeFn quantize;
  // Rows a call of `dot` must be given: 1 (any count) or 16 (a multiple).
  int row_multiple;
};

const Q8Kernels& ScalarQ8Kernels();
// nullptr when the CPU (or, for AMX, the kernel) lacks the instructions.
const Q8Kernels* Avx2Q8Kernels();
const Q8Kernels* AvxVnniQ8Kernels();
const Q8Kernels* Avx512VnniQ8Kernels();
const Q8Kernels* AmxQ8Kernels();
// The fastest of the above this CPU runs for any row count (AMX is used
// beside it, for groups of 16 rows).
const Q8Kernels& ActiveQ8Kernels();

}  // namespace q8_internal
}  // namespace kvcast

#endif  // KVCAST_KERNELS_INTERNAL_Q8_KERNELS_H_
