#include "kernels/q4_matmul.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "common/dtype.h"
#include "kernels/internal/q4_kernels.h"

namespace kvcast {

using q4_internal::HighNibble;
using q4_internal::kMinOffset;
using q4_internal::kPanelBlockBytes;
using q4_internal::kPanelRows;
using q4_internal::kScaleOffset;
using q4_internal::NibbleByte;
using q4_internal::Q4Kernels;

namespace q4_internal {

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

int64_t Panels(int64_t n) { return (n + kPanelRows - 1) / kPanelRows; }

uint16_t LoadHalf(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}

}  // namespace

int Q4SourceBlockBytes(Q4Source source) { return source == Q4Source::kQ4_0 ? 18 : 20; }

size_t Q4MatrixBytes(int64_t n, int64_t k) {
  return size_t(Panels(n) * (k / kQ4Block)) * kPanelBlockBytes;
}

void PackQ4Matrix(Q4Source source, const void* blocks, int64_t n, int64_t k, void* out) {
  const auto* src = static_cast<const uint8_t*>(blocks);
  auto* dst = static_cast<uint8_t*>(out);
  const int64_t row_blocks = k / kQ4Block;
  const int source_bytes = Q4SourceBlockBytes(source);
  const int nibbles_at = source == Q4Source::kQ4_0 ? 2 : 4;
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < Panels(n); ++p) {
    for (int64_t b = 0; b < row_blocks; ++b) {
      uint8_t* block = dst + (p * row_blocks + b) * kPanelBlockBytes;
      std::memset(block, 0, kPanelBlockBytes);
      for (int i = 0; i < kPanelRows; ++i) {
        const int64_t row = p * kPanelRows + i;
        if (row >= n) break;
        const uint8_t* s = src + (row * row_blocks + b) * source_bytes;
        const uint16_t d = LoadHalf(s);
        // x = d * (q - 8) is d * q + (-8 * d); -8 * d is exact in fp16.
        const uint16_t m =
            source == Q4Source::kQ4_0 ? FloatToHalf(-8.0f * HalfToFloat(d)) : LoadHalf(s + 2);
        std::memcpy(block + kScaleOffset + 2 * i, &d, 2);
        std::memcpy(block + kMinOffset + 2 * i, &m, 2);
        for (int e = 0; e < kQ4Block; ++e) {
          const uint8_t byte = s[nibbles_at + e % 16];
          const uint8_t q = e < 16 ? byte & 15 : byte >> 4;
          block[NibbleByte(i, e)] |= HighNibble(e) ? uint8_t(q << 4) : q;
        }
      }
    }
  }
}

void DequantizeQ4Rows(const void* w, int64_t n, int64_t k, const int32_t* rows, int num_rows,
                      float* out) {
  const auto* q = static_cast<const uint8_t*>(w);
  const int64_t blocks = k / kQ4Block;
  for (int r = 0; r < num_rows; ++r) {
    const int64_t p = rows[r] / kPanelRows, i = rows[r] % kPanelRows;
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* block = q + (p * blocks + b) * kPanelBlockBytes;
      const float d = HalfToFloat(LoadHalf(block + kScaleOffset + 2 * i));
      const float m = HalfToFloat(LoadHalf(block + kMinOffset + 2 * i));
      for (int e = 0; e < kQ4Block; ++e) {
        const uint8_t byte = block[NibbleByte(int(i), e)];
        const int v = HighNibble(e) ? byte >> 4 : byte & 15;
        // d * v is exact in float, so this is ggml's d * v + m (or, for a
        // Q4_0 block, its d * (v - 8)) whether or not it fuses.
        out[r * k + b * kQ4Block + e] = d * float(v) + m;
      }
    }
  }
  (void)n;
}

void Q4Linear(const float* x, int m, int64_t k, const void* w, int64_t n, float* y) {
  const q8_internal::Q8Rows rows = q8_internal::QuantizeActivations(x, m, k);
  const Q4Kernels& kernels = q4_internal::ActiveQ4Kernels();
  const auto* wq = static_cast<const uint8_t*>(w);
  const int64_t blocks = k / kQ4Block;
  // Tiles of weight panels stay in cache while every activation row passes.
  constexpr int64_t kTilePanels = 2;
  const int64_t panels = Panels(n), tiles = (panels + kTilePanels - 1) / kTilePanels;
#pragma omp parallel for schedule(static) if (int64_t(m) * n * k > (1 << 16))
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t p0 = t * kTilePanels, np = std::min(kTilePanels, panels - p0);
    const int64_t cols = std::min(n - p0 * kPanelRows, np * kPanelRows);
    kernels.dot(rows, m, wq + p0 * blocks * kPanelBlockBytes, np, cols, y + p0 * kPanelRows, n);
  }
}

std::string_view Q4KernelName() { return q4_internal::ActiveQ4Kernels().name; }

}  // namespace kvcast
