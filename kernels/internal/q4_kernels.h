// Internal to //kernels:q4_matmul (and its test and benchmark): the dot
// kernels behind q4_matmul.h in a scalar version and AVX2 / AVX-VNNI /
// AVX-512 VNNI versions picked at run time, all bit-identical (the
// arithmetic is in q4_matmul.h). Activation rows come quantized by the Q8
// kernels' quantizer (q8_kernels.h: Q8Rows, whose c is 128 x the block's
// sum; the Q6 kernels also read its h, the sums of each block's first 16).
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
// bits), 5-bit values with float32 d and m (from Q5_K: a plane of fifth
// bits after the nibbles), 5-bit values with fp16 d and m (from Q5_0 /
// Q5_1), or 6-bit values (from Q6_K: a plane of top-two-bit pairs after the
// nibbles) with an fp16 d per row and an int8 scale per row and 16-value
// half, x = (d * sc) * (q - 32).
enum class PanelFormat { kQ4F16, kQ4F32, kQ5F32, kQ5F16, kQ6 };
constexpr int kPanelFormats = 5;
constexpr bool FifthBit(PanelFormat f) {
  return f == PanelFormat::kQ5F32 || f == PanelFormat::kQ5F16;
}
constexpr bool TopTwoBits(PanelFormat f) { return f == PanelFormat::kQ6; }
// Nibbles (256 bytes), [fifth bits (64) | top two bits (128)], then 16 d,
// then 16 m (Q6: 16 int8 scales of the rows' values 0-15, then 16 of
// values 16-31).
constexpr int kFifthBitOffset = 256;
constexpr int kTopBitsOffset = 256;
constexpr int ScaleOffset(PanelFormat f) {
  return 256 + (FifthBit(f) ? 64 : 0) + (TopTwoBits(f) ? 128 : 0);
}
constexpr int ScaleBytes(PanelFormat f) {
  return f == PanelFormat::kQ4F32 || f == PanelFormat::kQ5F32 ? 4 : 2;
}
constexpr int MinOffset(PanelFormat f) { return ScaleOffset(f) + 16 * ScaleBytes(f); }
// Q6: the int8 scale of half h (0: values 0-15, 1: 16-31) of row i.
constexpr int HalfScaleByte(int h, int i) {
  return ScaleOffset(PanelFormat::kQ6) + 32 + 16 * h + i;
}
constexpr int PanelBlockBytes(PanelFormat f) {
  return TopTwoBits(f) ? ScaleOffset(f) + 32 + 32 : MinOffset(f) + 16 * ScaleBytes(f);
}
// The fifth bit of value e of panel row i: bit FifthBitShift(e) of byte
// kFifthBitOffset + FifthBitByte(i, e), so a 16-bit shift by 2c (2c + 1)
// brings chunk c's low (high) nibbles' bits to bit 0 of each byte.
constexpr int FifthBitByte(int i, int e) { return i * 4 + e % 4; }
constexpr int FifthBitShift(int e) { return 2 * ((e % 16) / 4) + (e >= 16 ? 1 : 0); }
// The top two bits (4 and 5) of a Q6 value e of panel row i: bits
// TopBitsShift(e) and the next of byte kTopBitsOffset + TopBitsByte(i, e):
// the 64 bytes at 64 * (c / 2) hold chunks c and c + 1, the low nibbles' pair
// at bit 4 * (c % 2), the high nibbles' two above, so one 16-bit shift (by
// 4, 2, 0 or -2) and a mask of 0x30 put a chunk's pairs in place.
constexpr int TopBitsByte(int i, int e) { return 64 * ((e % 16) / 8) + i * 4 + e % 4; }
constexpr int TopBitsShift(int e) { return 4 * (((e % 16) / 4) % 2) + (e >= 16 ? 2 : 0); }
// The byte of a panel block holding value e (< 32) of panel row i (< 16),
// and whether it is the high nibble.
constexpr int NibbleByte(int i, int e) { return ((e % 16) / 4) * 64 + i * 4 + e % 4; }
constexpr bool HighNibble(int e) { return e >= 16; }

// A widened panel block: the 32 values of each of its 16 rows as bytes (q
// of 4, 5 or 6 bits), value e of row i at byte (e / 4) * 64 + 4 * i + e % 4
// (the Q8 panel order, q8_kernels.h PanelByte), then the block's bytes from
// ScaleOffset on. Q4Linear widens a tile's panels once when many rows pass
// over them, so the kernels skip the unpacking.
constexpr int kWideValueBytes = 512;
constexpr int WideBlockBytes(PanelFormat f) {
  return kWideValueBytes + PanelBlockBytes(f) - ScaleOffset(f);
}
constexpr int BlockBytes(PanelFormat f, bool wide) {
  return wide ? WideBlockBytes(f) : PanelBlockBytes(f);
}
// Where a (widened) block's scales start.
constexpr int ScalesAt(PanelFormat f, bool wide) { return wide ? kWideValueBytes : ScaleOffset(f); }

// out[r * out_stride + j] = dot(x row r, weight row j) for r < rows and
// j < cols, where the weight rows are the panels at `w` (panel p's block b
// at w + (p * x.blocks + b) * PanelBlockBytes) and
// 16 * (panels - 1) < cols <= 16 * panels.
using DotFn = void (*)(const q8_internal::Q8Rows& x, int rows, const uint8_t* w,
                       int64_t panels, int64_t cols, float* out, int64_t out_stride);

// Widens `panels` consecutive panels of `blocks` blocks each at `w` into
// `out` (panels * blocks * WideBlockBytes bytes).
using WidenFn = void (*)(const uint8_t* w, int64_t panels, int64_t blocks, uint8_t* out);

struct Q4Kernels {
  const char* name;
  DotFn dot[kPanelFormats];       // by PanelFormat
  DotFn wide_dot[kPanelFormats];  // the same on widened panels (WideBlockBytes a block)
  WidenFn widen[kPanelFormats];
};

// h[i] = the sum of q[32 i .. 32 i + 15] for i < blocks (Q8Rows::h).
void FirstHalfSums(const int8_t* q, int64_t blocks, int32_t* h);

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
