// Internal to //kernels:q4_matmul (and its test and benchmark): the dot
// kernels behind q4_matmul.h in a scalar version and AVX2 / AVX-VNNI /
// AVX-512 VNNI versions picked at run time, all bit-identical (the
// arithmetic is in q4_matmul.h). Activation rows come quantized by the Q8
// kernels' quantizer (q8_kernels.h: Q8Rows, whose c is 128 x the block's sum).
#ifndef KVCAST_KERNELS_INTERNAL_Q4_KERNELS_H_
#define KVCAST_KERNELS_INTERNAL_Q4_KERNELS_H_

#include <cstdint>

#include "kernels/internal/q8_kernels.h"

namespace kvcast {
namespace q4_internal {

constexpr int kPanelRows = 16;
// How a panel block keeps its 16 rows' d and m: fp16 (from Q4_0 / Q4_1
// blocks, whose d and m are fp16) or float32 (from Q4_K, whose per-32
// scale d * sc and offset dmin * m need up to 17 significant bits).
enum class Q4Scales { kF16, kF32 };
constexpr int kScaleOffset = 256;  // after the 32 nibbles of the 16 rows
// Nibbles, then 16 d, then 16 m.
constexpr int PanelBlockBytes(Q4Scales s) { return s == Q4Scales::kF16 ? 320 : 384; }
constexpr int MinOffset(Q4Scales s) { return s == Q4Scales::kF16 ? 288 : 320; }
// The byte of a panel block holding value e (< 32) of panel row i (< 16),
// and whether it is the high nibble.
constexpr int NibbleByte(int i, int e) { return ((e % 16) / 4) * 64 + i * 4 + e % 4; }
constexpr bool HighNibble(int e) { return e >= 16; }

// out[r * out_stride + j] = dot(x row r, weight row j) for r < rows and
// j < cols, where the weight rows are the panels at `w` (panel p's block b
// at w + (p * x.blocks + b) * PanelBlockBytes) and
// 16 * (panels - 1) < cols <= 16 * panels.
using DotFn = void (*)(const q8_internal::Q8Rows& x, int rows, const uint8_t* w,
                       int64_t panels, int64_t cols, float* out, int64_t out_stride);

struct Q4Kernels {
  const char* name;
  DotFn dot[2];  // by Q4Scales
};

const Q4Kernels& ScalarQ4Kernels();
// nullptr when the CPU lacks the instructions.
const Q4Kernels* Avx2Q4Kernels();
const Q4Kernels* AvxVnniQ4Kernels();
const Q4Kernels* Avx512VnniQ4Kernels();
// The fastest of the above this CPU runs.
const Q4Kernels& ActiveQ4Kernels();

}  // namespace q4_internal
}  // namespace kvcast

#endif  // KVCAST_KERNELS_INTERNAL_Q4_KERNELS_H_
