#include "kernels/q8_matmul.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/dtype.h"
#include "gtest/gtest.h"
#include "kernels/internal/q8_kernels.h"

namespace kvcast {
namespace {

using q8_internal::Q8Kernels;

std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<char> Quantize(const std::vector<float>& w, int64_t n, int64_t k) {
  std::vector<char> q(Q8MatrixBytes(n, k));
  QuantizeQ8Matrix(w.data(), n, k, q.data());
  return q;
}

TEST(Q8MatmulTest, QuantizationErrorIsBoundedByHalfAStep) {
  const int64_t n = 7, k = 96;
  auto w = Random(n * k, 1);
  w[5] = 0;                                         // zero in a block
  for (int e = 32; e < 64; ++e) w[e] = 0;           // an all-zero block
  w[70] = 1e-30f;                                   // tiny values
  auto q = Quantize(w, n, k);
  std::vector<int32_t> rows(n);
  for (int i = 0; i < n; ++i) rows[i] = i;
  std::vector<float> back(n * k);
  DequantizeQ8Rows(q.data(), n, k, rows.data(), n, back.data());
  for (int64_t b = 0; b < n * k / 32; ++b) {
    float amax = 0;
    for (int e = 0; e < 32; ++e) amax = std::max(amax, std::fabs(w[b * 32 + e]));
    for (int e = 0; e < 32; ++e) {
      ASSERT_LE(std::fabs(back[b * 32 + e] - w[b * 32 + e]), amax / 254 * 1.0001f + 1e-37f)
          << "block " << b << " value " << e;
    }
  }
  for (int e = 32; e < 64; ++e) EXPECT_EQ(back[e], 0.0f);
  // Dequantizing a subset picks those rows.
  const int32_t pick[] = {6, 0};
  std::vector<float> two(2 * k);
  DequantizeQ8Rows(q.data(), n, k, pick, 2, two.data());
  EXPECT_EQ(0, std::memcmp(two.data(), back.data() + 6 * k, k * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(two.data() + k, back.data(), k * sizeof(float)));
}

// GGUF Q8_0 blocks keep their values: d widened to float32, q as stored
// (a -128, which ggml never writes, clamped to the kernels' -127).
TEST(Q8MatmulTest, PackedQ8_0ValuesAreTheFiles) {
  const int64_t n = 21, k = 96;  // the last panel has 5 rows
  std::mt19937 rng(9);
  std::normal_distribution<float> scale(0.0f, 0.01f);
  std::vector<uint8_t> blocks(size_t(n * k / 32) * 34);
  for (size_t b = 0; b < blocks.size() / 34; ++b) {
    const uint16_t d = b % 5 == 2 ? 0 : FloatToHalf(scale(rng));
    std::memcpy(&blocks[b * 34], &d, 2);
    for (int e = 0; e < 32; ++e) blocks[b * 34 + 2 + e] = uint8_t(rng());
  }
  blocks[2] = 0x80;  // q = -128
  std::vector<char> q(Q8MatrixBytes(n, k));
  PackQ8_0Matrix(blocks.data(), n, k, q.data());
  std::vector<int32_t> rows(n);
  for (int i = 0; i < n; ++i) rows[i] = i;
  std::vector<float> got(n * k);
  DequantizeQ8Rows(q.data(), n, k, rows.data(), n, got.data());
  for (int64_t i = 0; i < n * k; ++i) {
    const uint8_t* block = &blocks[(i / 32) * 34];
    uint16_t d;
    std::memcpy(&d, block, 2);
    const int v = std::max(-127, int(int8_t(block[2 + i % 32])));
    ASSERT_EQ(got[i], HalfToFloat(d) * float(v)) << "value " << i;
  }
}

// The product of the dequantized matrices in double: what Q8Linear must
// equal up to float rounding.
std::vector<double> Reference(const std::vector<float>& x, int m, int64_t k,
                              const std::vector<char>& q, int64_t n) {
  std::vector<char> xqm = Quantize(x, m, k);
  std::vector<int32_t> xr(m), wr(n);
  for (int i = 0; i < m; ++i) xr[i] = i;
  for (int i = 0; i < n; ++i) wr[i] = i;
  std::vector<float> xd(m * k), wd(n * k);
  DequantizeQ8Rows(xqm.data(), m, k, xr.data(), m, xd.data());
  DequantizeQ8Rows(q.data(), n, k, wr.data(), n, wd.data());
  std::vector<double> y(m * n);
  for (int r = 0; r < m; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t e = 0; e < k; ++e) s += double(xd[r * k + e]) * wd[j * k + e];
      y[r * n + j] = s;
    }
  }
  return y;
}

TEST(Q8MatmulTest, LinearEqualsDequantizedProduct) {
  for (auto [m, k, n] : {std::tuple{1, 64, 5}, {3, 576, 40}, {9, 1536, 67}}) {
    const auto x = Random(m * k, 2), w = Random(n * k, 3, 0.05f);
    const auto q = Quantize(w, n, k);
    std::vector<float> y(m * n);
    Q8Linear(x.data(), m, k, q.data(), n, y.data());
    const auto want = Reference(x, m, k, q, n);
    for (size_t i = 0; i < y.size(); ++i) {
      ASSERT_NEAR(y[i], want[i], 1e-5 * (1 + std::fabs(want[i]))) << "m=" << m << " i=" << i;
    }
  }
}

TEST(Q8MatmulTest, CloseToFloatProduct) {
  // The stated tolerance of Q8 weights and activations against float32:
  // relative error of a 576-long dot product of unit-variance data < 2%.
  const int m = 4, k = 576, n = 64;
  const auto x = Random(m * k, 4), w = Random(n * k, 5);
  const auto q = Quantize(w, n, k);
  std::vector<float> y(m * n);
  Q8Linear(x.data(), m, k, q.data(), n, y.data());
  double err = 0, norm = 0;
  for (int r = 0; r < m; ++r) {
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int e = 0; e < k; ++e) s += double(x[r * k + e]) * w[j * k + e];
      err += (y[r * n + j] - s) * (y[r * n + j] - s);
      norm += s * s;
    }
  }
  EXPECT_LT(std::sqrt(err / norm), 0.02);
}

// Every kernel this CPU runs gives the scalar reference's bits, for every
// row count; and a row's result does not depend on its batch.
TEST(Q8MatmulTest, KernelsBitIdenticalAndBatchInvariant) {
  const int64_t k = 288, n = 45;  // 9 blocks; the last panel has 13 rows
  const int m = 37;               // two AMX groups of 16 and 5 more
  const int64_t blocks = k / 32, panels = (n + 15) / 16;
  auto x = Random(m * k, 6, 3.0f);
  for (int e = 0; e < 32; ++e) x[e] = (e % 2 ? 1e4f : -1e4f);  // extreme block
  for (int e = 64; e < 96; ++e) x[k + e] = -1e3f;              // all at -127
  auto w = Random(n * k, 7);
  for (int e = 0; e < 32; ++e) w[3 * k + e] = 2.0f;  // all at +127: 255 stored
  const auto q = Quantize(w, n, k);
  // Activations quantized as Q8Linear does.
  std::vector<int8_t> xq(m * k);
  std::vector<float> xs(m * blocks);
  std::vector<int32_t> xc(m * blocks);
  for (int64_t b = 0; b < m * blocks; ++b) {
    xs[b] = q8_internal::QuantizeBlock(x.data() + b * 32, xq.data() + b * 32);
    xc[b] = 0;
    for (int e = 0; e < 32; ++e) xc[b] += 128 * xq[b * 32 + e];
  }
  const auto* wq = reinterpret_cast<const uint8_t*>(q.data());
  const auto* ws = reinterpret_cast<const float*>(q.data() + Q8ScalesOffset(n, k));
  auto run = [&](const Q8Kernels& kern, int rows_per_call) {
    std::vector<float> y(m * n, -1.0f);
    for (int r = 0; r + kern.row_multiple <= m; r += rows_per_call) {
      const int rows = std::min(rows_per_call, (m - r) / kern.row_multiple * kern.row_multiple);
      const q8_internal::Q8Rows rx{xq.data() + r * k, xs.data() + r * blocks,
                                   xc.data() + r * blocks, blocks};
      kern.dot(rx, rows, wq, ws, panels, n, y.data() + r * n, n);
    }
    return y;
  };
  const auto want = run(q8_internal::ScalarQ8Kernels(), 1);
  // Every activation quantizer gives the reference's bytes, scales and
  // corrections (ties to even, clamping, an infinite and a zero block).
  auto odd = x;
  odd[2 * k + 40] = 2.5f * (odd[2 * k + 41] = 1.0f);
  for (int e = 96; e < 128; ++e) odd[2 * k + e] = 0.0f;
  odd[3 * k + 7] = std::numeric_limits<float>::infinity();
  for (int e = 0; e < 32; ++e) odd[4 * k + e] = 127.0f * (e % 3) - 127.0f + 0.5f * (e % 2);
  std::vector<int8_t> q_ref(m * k), q_got(m * k);
  std::vector<float> s_ref(m * blocks), s_got(m * blocks);
  std::vector<int32_t> c_ref(m * blocks), c_got(m * blocks);
  q8_internal::QuantizeBlocksScalar(odd.data(), m * blocks, q_ref.data(), s_ref.data(),
                                    c_ref.data());
  for (const Q8Kernels* kern :
       {q8_internal::Avx2Q8Kernels(), q8_internal::AvxVnniQ8Kernels(),
        q8_internal::Avx512VnniQ8Kernels()}) {
    if (kern == nullptr) continue;
    kern->quantize(odd.data(), m * blocks, q_got.data(), s_got.data(), c_got.data());
    EXPECT_EQ(q_got, q_ref) << kern->name;
    EXPECT_EQ(0, std::memcmp(s_got.data(), s_ref.data(), s_ref.size() * sizeof(float)))
        << kern->name;
    EXPECT_EQ(c_got, c_ref) << kern->name;
  }
  std::vector<const Q8Kernels*> kernels = {&q8_internal::ScalarQ8Kernels()};
  if (auto* a = q8_internal::Avx2Q8Kernels()) kernels.push_back(a);
  if (auto* v = q8_internal::AvxVnniQ8Kernels()) kernels.push_back(v);
  if (auto* v = q8_internal::Avx512VnniQ8Kernels()) kernels.push_back(v);
  if (auto* a = q8_internal::AmxQ8Kernels()) kernels.push_back(a);
  for (const Q8Kernels* kern : kernels) {
    for (int rows : {1, 2, 3, 4, 5, 16, 32, 37}) {
      if (rows % kern->row_multiple != 0) continue;
      const auto got = run(*kern, rows);
      const int covered = m / kern->row_multiple * kern->row_multiple;
      ASSERT_EQ(0, std::memcmp(got.data(), want.data(), covered * n * sizeof(float)))
          << kern->name << " rows " << rows;
    }
  }
  // Q8Linear (AMX for the first 32 rows where the CPU has it): one row
  // alone equals that row inside the batch of 37, and the reference.
  std::vector<float> all(m * n), one(n);
  Q8Linear(x.data(), m, k, q.data(), n, all.data());
  EXPECT_EQ(0, std::memcmp(all.data(), want.data(), all.size() * sizeof(float)));
  for (int r : {1, 5, 36}) {
    Q8Linear(x.data() + r * k, 1, k, q.data(), n, one.data());
    EXPECT_EQ(0, std::memcmp(one.data(), all.data() + r * n, n * sizeof(float))) << "row " << r;
  }
  EXPECT_FALSE(Q8KernelName().empty());
}

// SmolLM2's shapes: a prompt's rows computed in one call (AMX for groups of
// 16 where the CPU has it) equal the same rows computed in other splits.
TEST(Q8MatmulTest, ModelShapesAreBatchInvariant) {
  const int m = 151;
  for (auto [k, n] : {std::pair<int64_t, int64_t>{576, 192}, {576, 3072}, {1536, 576}}) {
    const auto x = Random(m * k, 8), w = Random(n * k, 9, 0.05f);
    const auto q = Quantize(w, n, k);
    std::vector<float> all(m * n);
    Q8Linear(x.data(), m, k, q.data(), n, all.data());
    for (auto [r0, rows] : {std::pair<int, int>{128, 23}, {0, 1}, {150, 1}, {7, 33}, {16, 16}}) {
      std::vector<float> part(rows * n);
      Q8Linear(x.data() + r0 * k, rows, k, q.data(), n, part.data());
      ASSERT_EQ(0, std::memcmp(part.data(), all.data() + r0 * n, part.size() * sizeof(float)))
          << "k " << k << " n " << n << " rows " << r0 << ".." << r0 + rows;
    }
  }
}

}  // namespace
}  // namespace kvcast
