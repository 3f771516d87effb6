#include "kernels/q8_matmul.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "kernels/internal/q8_kernels.h"

namespace kvcast {

using q8_internal::kPanelBlockBytes;
using q8_internal::kPanelRows;
using q8_internal::PanelByte;
using q8_internal::Q8Kernels;
using q8_internal::Q8Rows;
using q8_internal::QuantizeBlock;

namespace q8_internal {

const Q8Kernels& ActiveQ8Kernels() {
  static const Q8Kernels& active = [] () -> const Q8Kernels& {
    if (const Q8Kernels* k = Avx512VnniQ8Kernels()) return *k;
    if (const Q8Kernels* k = AvxVnniQ8Kernels()) return *k;
    if (const Q8Kernels* k = Avx2Q8Kernels()) return *k;
    return ScalarQ8Kernels();
  }();
  return active;
}

}  // namespace q8_internal

namespace {

int64_t Panels(int64_t n) { return (n + kPanelRows - 1) / kPanelRows; }

}  // namespace

size_t Q8ScalesOffset(int64_t n, int64_t k) {
  return size_t(Panels(n) * (k / kQ8Block)) * kPanelBlockBytes;
}

size_t Q8MatrixBytes(int64_t n, int64_t k) {
  return Q8ScalesOffset(n, k) + size_t(Panels(n) * (k / kQ8Block)) * kPanelRows * sizeof(float);
}

void QuantizeQ8Matrix(const float* w, int64_t n, int64_t k, void* out) {
  auto* q = static_cast<uint8_t*>(out);
  auto* scales = reinterpret_cast<float*>(q + Q8ScalesOffset(n, k));
  const int64_t blocks = k / kQ8Block;
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < Panels(n); ++p) {
    for (int64_t b = 0; b < blocks; ++b) {
      uint8_t* dst = q + (p * blocks + b) * kPanelBlockBytes;
      float* sdst = scales + (p * blocks + b) * kPanelRows;
      for (int i = 0; i < kPanelRows; ++i) {
        const int64_t row = p * kPanelRows + i;
        int8_t block[kQ8Block] = {};
        sdst[i] = row < n ? QuantizeBlock(w + row * k + b * kQ8Block, block) : 0.0f;
        for (int e = 0; e < kQ8Block; ++e) dst[PanelByte(i, e)] = uint8_t(block[e] + 128);
      }
    }
  }
}

void PackQ8_0Matrix(const void* blocks, int64_t n, int64_t k, void* out) {
  const auto* src = static_cast<const uint8_t*>(blocks);
  auto* q = static_cast<uint8_t*>(out);
  auto* scales = reinterpret_cast<float*>(q + Q8ScalesOffset(n, k));
  const int64_t row_blocks = k / kQ8Block;
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < Panels(n); ++p) {
    for (int64_t b = 0; b < row_blocks; ++b) {
      uint8_t* dst = q + (p * row_blocks + b) * kPanelBlockBytes;
      float* sdst = scales + (p * row_blocks + b) * kPanelRows;
      for (int i = 0; i < kPanelRows; ++i) {
        const int64_t row = p * kPanelRows + i;
        const uint8_t* s = src + (row * row_blocks + b) * 34;
        uint16_t d = 0;
        if (row < n) std::memcpy(&d, s, 2);
        sdst[i] = HalfToFloat(d);
        for (int e = 0; e < kQ8Block; ++e) {
          const int v = row < n ? std::max(-127, int(int8_t(s[2 + e]))) : 0;
          dst[PanelByte(i, e)] = uint8_t(v + 128);
        }
      }
    }
  }
}

void DequantizeQ8Rows(const void* w, int64_t n, int64_t k, const int32_t* rows, int num_rows,
                      float* out) {
  const auto* q = static_cast<const uint8_t*>(w);
  const auto* scales = reinterpret_cast<const float*>(q + Q8ScalesOffset(n, k));
  const int64_t blocks = k / kQ8Block;
  for (int r = 0; r < num_rows; ++r) {
    const int64_t p = rows[r] / kPanelRows, i = rows[r] % kPanelRows;
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* src = q + (p * blocks + b) * kPanelBlockBytes;
      const float scale = scales[(p * blocks + b) * kPanelRows + i];
      for (int e = 0; e < kQ8Block; ++e) {
        out[r * k + b * kQ8Block + e] = scale * float(int(src[PanelByte(int(i), e)]) - 128);
      }
    }
  }
}

namespace q8_internal {

Q8Rows QuantizeActivations(const float* x, int m, int64_t k) {
  const int64_t blocks = k / kQ8Block;
  thread_local std::vector<int8_t> xq;
  thread_local std::vector<float> xs;
  thread_local std::vector<int32_t> xc;
  xq.resize(size_t(m) * k);
  xs.resize(size_t(m) * blocks);
  xc.resize(size_t(m) * blocks);
  // The buffers are this thread's: the OpenMP team gets their addresses.
  int8_t* const q = xq.data();
  float* const s = xs.data();
  int32_t* const c = xc.data();
  const Q8Kernels& vec = ActiveQ8Kernels();
#pragma omp parallel for schedule(static) if (int64_t(m) * k >= (1 << 14))
  for (int r = 0; r < m; ++r) {
    vec.quantize(x + r * k, blocks, q + r * k, s + r * blocks, c + r * blocks);
  }
  return Q8Rows{q, s, c, blocks};
}

}  // namespace q8_internal

void Q8Linear(const float* x, int m, int64_t k, const void* w, int64_t n, float* y) {
  const int64_t blocks = k / kQ8Block;
  const Q8Rows all = q8_internal::QuantizeActivations(x, m, k);
  const Q8Kernels& vec = q8_internal::ActiveQ8Kernels();
  const auto* wq = static_cast<const uint8_t*>(w);
  const auto* ws = reinterpret_cast<const float*>(wq + Q8ScalesOffset(n, k));
  const Q8Kernels* amx = q8_internal::AmxQ8Kernels();
  // AMX takes the rows in whole groups of 16, the vector kernel the rest.
  const int m_amx = amx != nullptr ? m / amx->row_multiple * amx->row_multiple : 0;
  const Q8Rows rest{all.q + int64_t(m_amx) * k, all.s + m_amx * blocks, all.c + m_amx * blocks,
                    blocks};
  // Tiles of weight panels stay in cache while every activation row passes.
  constexpr int64_t kTilePanels = 2;
  const int64_t panels = Panels(n), tiles = (panels + kTilePanels - 1) / kTilePanels;
#pragma omp parallel for schedule(static) if (int64_t(m) * n * k > (1 << 16))
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t p0 = t * kTilePanels, np = std::min(kTilePanels, panels - p0);
    const int64_t cols = std::min(n - p0 * kPanelRows, np * kPanelRows);
    const uint8_t* wt = wq + p0 * blocks * kPanelBlockBytes;
    const float* wst = ws + p0 * blocks * kPanelRows;
    if (m_amx > 0) amx->dot(all, m_amx, wt, wst, np, cols, y + p0 * kPanelRows, n);
    if (m > m_amx) {
      vec.dot(rest, m - m_amx, wt, wst, np, cols, y + int64_t(m_amx) * n + p0 * kPanelRows, n);
    }
  }
}

std::string_view Q8KernelName() {
  static const std::string name =
      std::string(q8_internal::ActiveQ8Kernels().name) +
      (q8_internal::AmxQ8Kernels() != nullptr ? "+amx" : "");
  return name;
}

}  // namespace kvcast
