#include "kernels/q4_matmul.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/dtype.h"
#include "kernels/internal/q4_kernels.h"

namespace kvcast {

using q4_internal::HighNibble;
using q4_internal::kPanelRows;
using q4_internal::FifthBit;
using q4_internal::FifthBitByte;
using q4_internal::FifthBitShift;
using q4_internal::HalfScaleByte;
using q4_internal::kFifthBitOffset;
using q4_internal::kTopBitsOffset;
using q4_internal::TopBitsByte;
using q4_internal::TopBitsShift;
using q4_internal::TopTwoBits;
using q4_internal::ScaleBytes;
using q4_internal::ScaleOffset;
using q4_internal::MinOffset;
using q4_internal::NibbleByte;
using q4_internal::PanelBlockBytes;
using q4_internal::Q4Kernels;
using q4_internal::PanelFormat;

namespace q4_internal {

void FirstHalfSums(const int8_t* q, int64_t blocks, int32_t* h) {
  for (int64_t b = 0; b < blocks; ++b) {
    int32_t sum = 0;
    for (int e = 0; e < 16; ++e) sum += q[32 * b + e];
    h[b] = sum;
  }
}

const Q4Kernels& ActiveQ4Kernels() {
  static const Q4Kernels& active = [] () -> const Q4Kernels& {
    if (const Q4Kernels* k = Avx512VnniQ4Kernels()) return *k;
    if (const Q4Kernels* k = AvxVnniQ4Kernels()) return *k;
    if (const Q4Kernels* k = Avx2Q4Kernels()) return *k;
    return ScalarQ4Kernels();
  }();
  return active;
}

}  // namespace q4_internal

namespace {

constexpr int kHeaderBytes = 64;
// Q4Linear widens 5- and 6-bit panels for calls of at least this many rows
// (measured on a Llama-shaped Q5_0 file at batch 2 / 3 / 4, AVX-512, one
// run each: 0.57x / 1.33x / 1.48x the unwidened kernel's tokens/s).
constexpr int kWidenRows = 3;

int64_t Panels(int64_t n) { return (n + kPanelRows - 1) / kPanelRows; }

PanelFormat FormatOf(Q4Source source) {
  switch (source) {
    case Q4Source::kQ4_K: return PanelFormat::kQ4F32;
    case Q4Source::kQ5_K: return PanelFormat::kQ5F32;
    case Q4Source::kQ5_0:
    case Q4Source::kQ5_1: return PanelFormat::kQ5F16;
    case Q4Source::kQ6_K: return PanelFormat::kQ6;
    default: return PanelFormat::kQ4F16;
  }
}
bool SuperBlocks(Q4Source source) {
  return source == Q4Source::kQ4_K || source == Q4Source::kQ5_K || source == Q4Source::kQ6_K;
}
// The header's first byte: the PanelFormat.
PanelFormat FormatOf(const void* matrix) {
  return PanelFormat(static_cast<const uint8_t*>(matrix)[0]);
}

uint16_t LoadHalf(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}

// ggml's packing of a Q4_K sub-block's 6-bit scale and min (j < 8).
void ScaleMinK4(int j, const uint8_t* q, int* scale, int* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
    *min = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Block b (32 values) of row `row` of the source: its 4-, 5- or 6-bit values
// in value order and its d and m (as fp16 bits, or float32; 6-bit: d16 and
// the two halves' scales).
struct SourceBlock {
  uint8_t q[32];
  uint16_t d16, m16;
  float d32, m32;
  int8_t sc[2];
};
SourceBlock ReadSource(Q4Source source, const uint8_t* src, int64_t row, int64_t b, int64_t k) {
  SourceBlock out{};
  if (source == Q4Source::kQ6_K) {
    // ggml's Q6_K: value v (< 256) of a super-block has its low four bits in
    // byte 64 (v / 128) + v % 32 + 32 ((v / 32) % 2) of ql (the low nibble
    // for (v / 32) % 4 < 2, else the high one), its top two at bit
    // 2 ((v / 32) % 4) of byte 32 (v / 128) + v % 32 of qh, and the scale
    // of its 16 in sc[v / 16].
    const uint8_t* sb = src + (row * (k / 256) + b / 8) * Q4SourceBlockBytes(source);
    const uint8_t *ql = sb, *qh = sb + 128;
    for (int e = 0; e < 32; ++e) {
      const int v = int(b % 8) * 32 + e, quarter = (v / 32) % 4;
      const uint8_t low = ql[64 * (v / 128) + v % 32 + 32 * (quarter % 2)];
      out.q[e] = uint8_t((quarter < 2 ? low & 15 : low >> 4) |
                         (((qh[32 * (v / 128) + v % 32] >> (2 * quarter)) & 3) << 4));
    }
    out.sc[0] = int8_t(sb[192 + (b % 8) * 2]);
    out.sc[1] = int8_t(sb[192 + (b % 8) * 2 + 1]);
    out.d16 = LoadHalf(sb + 208);
    return out;
  }
  if (source == Q4Source::kQ4_K || source == Q4Source::kQ5_K) {
    const bool five = source == Q4Source::kQ5_K;
    const uint8_t* sb = src + (row * (k / 256) + b / 8) * Q4SourceBlockBytes(source);
    const int j = int(b % 8);
    int sc, mn;
    ScaleMinK4(j, sb + 4, &sc, &mn);
    // ggml: (d * sc) * q - (dmin * mn); both products are exact in float.
    out.d32 = HalfToFloat(LoadHalf(sb)) * float(sc);
    out.m32 = -(HalfToFloat(LoadHalf(sb + 2)) * float(mn));
    const uint8_t* qh = sb + 16;  // Q5_K: bit j of qh[e] is value e's fifth
    const uint8_t* qs = sb + 16 + (five ? 32 : 0) + 32 * (j / 2);
    for (int e = 0; e < 32; ++e) {
      out.q[e] = j % 2 == 0 ? qs[e] & 15 : qs[e] >> 4;
      if (five) out.q[e] |= ((qh[e] >> j) & 1) << 4;
    }
    return out;
  }
  const int bytes = Q4SourceBlockBytes(source);
  const uint8_t* s = src + (row * (k / 32) + b) * bytes;
  out.d16 = LoadHalf(s);
  // x = d * (q - 8) is d * q + (-8 * d) (Q5_0: -16 * d); exact in fp16.
  if (source == Q4Source::kQ4_0 || source == Q4Source::kQ5_0) {
    const float offset = source == Q4Source::kQ4_0 ? -8.0f : -16.0f;
    out.m16 = FloatToHalf(offset * HalfToFloat(out.d16));
  } else {
    out.m16 = LoadHalf(s + 2);
  }
  const uint8_t* qs = s + bytes - 16;
  for (int e = 0; e < 32; ++e) out.q[e] = e < 16 ? qs[e] & 15 : qs[e - 16] >> 4;
  if (source == Q4Source::kQ5_0 || source == Q4Source::kQ5_1) {
    uint32_t qh;  // bit e: value e's fifth
    std::memcpy(&qh, qs - 4, 4);
    for (int e = 0; e < 32; ++e) out.q[e] |= uint8_t(((qh >> e) & 1) << 4);
  }
  return out;
}

float ScaleAt(const uint8_t* block, int offset, PanelFormat format, int64_t i) {
  if (ScaleBytes(format) == 4) {
    float f;
    std::memcpy(&f, block + offset + 4 * i, 4);
    return f;
  }
  return HalfToFloat(LoadHalf(block + offset + 2 * i));
}

}  // namespace

int Q4SourceBlockValues(Q4Source source) { return SuperBlocks(source) ? 256 : 32; }

int Q4SourceBlockBytes(Q4Source source) {
  switch (source) {
    case Q4Source::kQ4_0: return 18;
    case Q4Source::kQ4_1: return 20;
    case Q4Source::kQ4_K: return 144;
    case Q4Source::kQ5_K: return 176;
    case Q4Source::kQ5_0: return 22;
    case Q4Source::kQ5_1: return 24;
    case Q4Source::kQ6_K: return 210;
  }
  return 0;
}

size_t Q4MatrixBytes(Q4Source source, int64_t n, int64_t k) {
  return kHeaderBytes + size_t(Panels(n) * (k / kQ4Block)) * PanelBlockBytes(FormatOf(source));
}

void PackQ4Matrix(Q4Source source, const void* blocks, int64_t n, int64_t k, void* out) {
  const auto* src = static_cast<const uint8_t*>(blocks);
  auto* dst = static_cast<uint8_t*>(out);
  const PanelFormat format = FormatOf(source);
  std::memset(dst, 0, kHeaderBytes);
  dst[0] = uint8_t(format);
  dst += kHeaderBytes;
  const int64_t row_blocks = k / kQ4Block;
  const int block_bytes = PanelBlockBytes(format), min_offset = MinOffset(format);
  const int scale_offset = ScaleOffset(format), width = ScaleBytes(format);
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < Panels(n); ++p) {
    for (int64_t b = 0; b < row_blocks; ++b) {
      uint8_t* block = dst + (p * row_blocks + b) * block_bytes;
      std::memset(block, 0, block_bytes);
      for (int i = 0; i < kPanelRows; ++i) {
        const int64_t row = p * kPanelRows + i;
        if (row >= n) break;
        const SourceBlock s = ReadSource(source, src, row, b, k);
        std::memcpy(block + scale_offset + width * i, width == 4 ? &s.d32 : (void*)&s.d16, width);
        if (TopTwoBits(format)) {
          for (int h = 0; h < 2; ++h) block[HalfScaleByte(h, i)] = uint8_t(s.sc[h]);
        } else {
          std::memcpy(block + min_offset + width * i, width == 4 ? &s.m32 : (void*)&s.m16, width);
        }
        for (int e = 0; e < kQ4Block; ++e) {
          const uint8_t q = s.q[e] & 15;
          block[NibbleByte(i, e)] |= HighNibble(e) ? uint8_t(q << 4) : q;
          if (FifthBit(format)) {
            block[kFifthBitOffset + FifthBitByte(i, e)] |=
                uint8_t((s.q[e] >> 4) << FifthBitShift(e));
          }
          if (TopTwoBits(format)) {
            block[kTopBitsOffset + TopBitsByte(i, e)] |= uint8_t((s.q[e] >> 4) << TopBitsShift(e));
          }
        }
      }
    }
  }
}

void DequantizeQ4Rows(const void* w, int64_t n, int64_t k, const int32_t* rows, int num_rows,
                      float* out) {
  const PanelFormat format = FormatOf(w);
  const auto* q = static_cast<const uint8_t*>(w) + kHeaderBytes;
  const int64_t blocks = k / kQ4Block;
  const int block_bytes = PanelBlockBytes(format), min_offset = MinOffset(format);
  for (int r = 0; r < num_rows; ++r) {
    const int64_t p = rows[r] / kPanelRows, i = rows[r] % kPanelRows;
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* block = q + (p * blocks + b) * block_bytes;
      const float d = ScaleAt(block, ScaleOffset(format), format, i);
      const float m = TopTwoBits(format) ? 0.0f : ScaleAt(block, min_offset, format, i);
      for (int e = 0; e < kQ4Block; ++e) {
        const uint8_t byte = block[NibbleByte(int(i), e)];
        int v = HighNibble(e) ? byte >> 4 : byte & 15;
        if (FifthBit(format)) {
          v |= ((block[kFifthBitOffset + FifthBitByte(int(i), e)] >> FifthBitShift(e)) & 1) << 4;
        }
        if (TopTwoBits(format)) {
          v |= ((block[kTopBitsOffset + TopBitsByte(int(i), e)] >> TopBitsShift(e)) & 3) << 4;
          // ggml's (d * sc) * (q - 32), d * sc exact.
          const float dh = d * float(int8_t(block[HalfScaleByte(e / 16, int(i))]));
          out[r * k + b * kQ4Block + e] = dh * float(v - 32);
          continue;
        }
        // d * v is exact in float, so this is ggml's d * v + m (or, for a
        // Q4_0 block, its d * (v - 8)) whether or not it fuses.
        out[r * k + b * kQ4Block + e] = d * float(v) + m;
      }
    }
  }
  (void)n;
}

void Q4Linear(const float* x, int m, int64_t k, const void* w, int64_t n, float* y) {
  q8_internal::Q8Rows rows = q8_internal::QuantizeActivations(x, m, k);
  const PanelFormat format = FormatOf(w);
  if (TopTwoBits(format)) {  // the 6-bit kernels also need each half's sum
    thread_local std::vector<int32_t> first_halves;
    first_halves.resize(size_t(m) * size_t(rows.blocks));
    q4_internal::FirstHalfSums(rows.q, int64_t(m) * rows.blocks, first_halves.data());
    rows.h = first_halves.data();
  }
  const q4_internal::Q4Kernels& kernels = q4_internal::ActiveQ4Kernels();
  const auto* wq = static_cast<const uint8_t*>(w) + kHeaderBytes;
  const int64_t blocks = k / kQ4Block, panel_bytes = blocks * PanelBlockBytes(format);
  // With several rows, 5- and 6-bit tiles are widened once and every row
  // reads them without unpacking (4-bit ones unpack in two instructions:
  // widening them measured slower).
  const bool widen = (FifthBit(format) || TopTwoBits(format)) && m >= kWidenRows;
  // Tiles of weight panels stay in cache while every activation row passes.
  constexpr int64_t kTilePanels = 2;
  const int64_t panels = Panels(n), tiles = (panels + kTilePanels - 1) / kTilePanels;
#pragma omp parallel for schedule(static) if (int64_t(m) * n * k > (1 << 16))
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t p0 = t * kTilePanels, np = std::min(kTilePanels, panels - p0);
    const int64_t cols = std::min(n - p0 * kPanelRows, np * kPanelRows);
    const uint8_t* tile = wq + p0 * panel_bytes;
    if (widen) {
      thread_local std::vector<uint8_t> wide;
      wide.resize(size_t(np * blocks * q4_internal::WideBlockBytes(format)));
      kernels.widen[int(format)](tile, np, blocks, wide.data());
      kernels.wide_dot[int(format)](rows, m, wide.data(), np, cols, y + p0 * kPanelRows, n);
    } else {
      kernels.dot[int(format)](rows, m, tile, np, cols, y + p0 * kPanelRows, n);
    }
  }
}

std::string_view Q4KernelName() { return q4_internal::ActiveQ4Kernels().name; }

}  // namespace kvcast
