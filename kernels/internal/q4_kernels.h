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
// What a panel block holds: 4-bit values with fp16 d and m (from Q4_0 /
// Q4_1 blocks, whose d and m are fp16), 4-bit values with float32 d and m
// (from Q4_K, whose per-32 d * sc and dmin * m need up to 17 significant
// bits), or 5-bit values with float32 d and m (from Q5_K: a plane of fifth
// bits after the nibbles).
enum class PanelFormat { kQ4F16, kQ4F32, kQ5F32 };
constexpr bool FifthBit(PanelFormat f) { return f == PanelFormat::kQ5F32; }
// Nibbles (256 bytes), [fifth bits (64)], then 16 d, then 16 m.
constexpr int kFifthBitOffset = 256;
constexpr int ScaleOffset(PanelFormat f) { return FifthBit(f) ? 320 : 256; }
constexpr int ScaleBytes(PanelFormat f) { return f == PanelFormat::kQ4F16 ? 2 : 4; }
constexpr int MinOffset(PanelFormat f) { return ScaleOffset(f) + 16 * ScaleBytes(f); }
constexpr int PanelBlockBytes(PanelFormat f) { return MinOffset(f) + 16 * ScaleBytes(f); }
// The fifth bit of value e of panel row i: bit FifthBitShift(e) of byte
// kFifthBitOffset + FifthBitByte(i, e), so a 16-bit shift by 2c (2c + 1)
// brings chunk c's low (high) nibbles' bits to bit 0 of each byte.
constexpr int FifthBitByte(int i, int e) { return i * 4 + e % 4; }
constexpr int FifthBitShift(int e) { return 2 * ((e % 16) / 4) + (e >= 16 ? 1 : 0); }
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
  DotFn dot[3];  // by PanelFormat
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
