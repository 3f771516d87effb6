#include "kernels/q8_matmul.h"

#include <omp.h>

#include <algorithm>
#include <vector>

#include "kernels/internal/q8_kernels.h"

namespace kvcast {

using q8_internal::ActiveQ8Kernels;
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

size_t Q8ScalesOffset(int64_t n, int64_t k) { return (size_t(n * k) + 63) / 64 * 64; }

size_t Q8MatrixBytes(int64_t n, int64_t k) {
  return Q8ScalesOffset(n, k) + size_t(n * k / kQ8Block) * sizeof(float);
}

void QuantizeQ8Matrix(const float* w, int64_t n, int64_t k, void* out) {
  auto* q = static_cast<int8_t*>(out);
  auto* scales = reinterpret_cast<float*>(static_cast<char*>(out) + Q8ScalesOffset(n, k));
  const int64_t blocks = n * k / kQ8Block;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    scales[b] = QuantizeBlock(w + b * kQ8Block, q + b * kQ8Block);
  }
}

void DequantizeQ8Rows(const void* w, int64_t n, int64_t k, const int32_t* rows, int num_rows,
                      float* out) {
  const auto* q = static_cast<const int8_t*>(w);
  const auto* scales =
      reinterpret_cast<const float*>(static_cast<const char*>(w) + Q8ScalesOffset(n, k));
  for (int i = 0; i < num_rows; ++i) {
    const int64_t base = int64_t(rows[i]) * k;
    for (int64_t e = 0; e < k; ++e) {
      out[i * k + e] = scales[(base + e) / kQ8Block] * float(q[base + e]);
    }
  }
}

void Q8Linear(const float* x, int m, int64_t k, const void* w, int64_t n, float* y) {
  const int64_t blocks = k / kQ8Block;
  thread_local std::vector<int8_t> xq;
  thread_local std::vector<float> xs;
  xq.resize(size_t(m) * k);
  xs.resize(size_t(m) * blocks);
  for (int64_t b = 0; b < m * blocks; ++b) {
    xs[b] = QuantizeBlock(x + b * kQ8Block, xq.data() + b * kQ8Block);
  }
  const auto* wq = static_cast<const int8_t*>(w);
  const auto* ws =
      reinterpret_cast<const float*>(static_cast<const char*>(w) + Q8ScalesOffset(n, k));
  const q8_internal::DotFn dot = ActiveQ8Kernels().dot;
  // Tiles of weight rows stay in cache while every activation row passes.
  constexpr int64_t kTile = 32;
  const int64_t tiles = (n + kTile - 1) / kTile;
  const int8_t* xq_data = xq.data();
  const float* xs_data = xs.data();
#pragma omp parallel for schedule(static) if (int64_t(m) * n * k > (1 << 16))
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t j0 = t * kTile, nj = std::min(kTile, n - j0);
    for (int r = 0; r < m; r += 4) {
      dot(xq_data + r * k, xs_data + r * blocks, std::min(4, m - r), wq + j0 * k,
          ws + j0 * blocks, nj, blocks, y + int64_t(r) * n + j0, n);
    }
  }
}

std::string_view Q8KernelName() { return ActiveQ8Kernels().name; }

}  // namespace kvcast
