#include "kernels/q4_matmul.h"

#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/dtype.h"
#include "gtest/gtest.h"
#include "kernels/internal/q4_kernels.h"
#include "kernels/internal/q8_kernels.h"

namespace kvcast {
namespace {

using q4_internal::Q4Kernels;

std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// n rows of k values as GGUF blocks of `source` with random nibbles and
// scales (negative, zero and subnormal ones included).
std::vector<uint8_t> SourceBlocks(Q4Source source, int64_t n, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  const int bytes = Q4SourceBlockBytes(source);
  std::vector<uint8_t> out(size_t(n * k / Q4SourceBlockValues(source)) * bytes);
  std::normal_distribution<float> scale(0.0f, 0.02f);
  for (size_t b = 0; b < out.size() / bytes; ++b) {
    uint8_t* block = out.data() + b * bytes;
    uint16_t d = FloatToHalf(scale(rng)), m = FloatToHalf(scale(rng) * 8);
    if (b % 7 == 3) d = 0;
    if (b % 11 == 5) d = 0x0003;  // subnormal
    std::memcpy(block, &d, 2);
    if (source != Q4Source::kQ4_0) std::memcpy(block + 2, &m, 2);
    const bool k_quant = source == Q4Source::kQ4_K || source == Q4Source::kQ5_K;
    const int from = k_quant ? 4 : bytes - 16;
    for (int j = from; j < bytes; ++j) block[j] = uint8_t(rng());
  }
  return out;
}

// The GGUF definition of the blocks' values (ggml's dequantization), written
// from the format's description: a Q4_K sub-block j's 6-bit scale and min
// are bits of the 12 scale bytes (j < 4: the low 6 bits of bytes j and
// j + 4; else the nibbles of byte j + 4 below the top 2 bits of bytes j - 4
// and j), its 32 nibbles the low (j even) or high nibbles of 32 bytes; a
// Q5_K value's fifth bit is bit j of byte e of the 32 before the nibbles.
std::vector<float> GgmlValues(Q4Source source, const std::vector<uint8_t>& blocks) {
  const int bytes = Q4SourceBlockBytes(source);
  std::vector<float> out;
  for (size_t b = 0; b < blocks.size() / bytes; ++b) {
    const uint8_t* block = blocks.data() + b * bytes;
    uint16_t d, m;
    std::memcpy(&d, block, 2);
    std::memcpy(&m, block + 2, 2);
    if (source == Q4Source::kQ4_K || source == Q4Source::kQ5_K) {
      const bool five = source == Q4Source::kQ5_K;
      const uint8_t* sc = block + 4;
      for (int j = 0; j < 8; ++j) {
        const int scale = j < 4 ? sc[j] % 64 : (sc[j + 4] % 16) + (sc[j - 4] / 64) * 16;
        const int min = j < 4 ? sc[j + 4] % 64 : (sc[j + 4] / 16) + (sc[j] / 64) * 16;
        const float dj = HalfToFloat(d) * float(scale), mj = HalfToFloat(m) * float(min);
        for (int e = 0; e < 32; ++e) {
          const uint8_t byte = block[16 + (five ? 32 : 0) + 32 * (j / 2) + e];
          int q = j % 2 == 0 ? byte % 16 : byte / 16;
          if (five) q += 16 * ((block[16 + e] >> j) % 2);
          out.push_back(dj * float(q) - mj);
        }
      }
      continue;
    }
    const uint8_t* qs = block + bytes - 16;
    for (int e = 0; e < 32; ++e) {
      const int q = e < 16 ? qs[e] & 15 : qs[e - 16] >> 4;
      out.push_back(source == Q4Source::kQ4_0 ? float(q - 8) * HalfToFloat(d)
                                              : HalfToFloat(d) * float(q) + HalfToFloat(m));
    }
  }
  return out;
}

constexpr Q4Source kSources[] = {Q4Source::kQ4_0, Q4Source::kQ4_1, Q4Source::kQ4_K,
                                 Q4Source::kQ5_K};

std::vector<uint8_t> Pack(Q4Source source, const std::vector<uint8_t>& blocks, int64_t n,
                          int64_t k) {
  std::vector<uint8_t> q(Q4MatrixBytes(source, n, k));
  PackQ4Matrix(source, blocks.data(), n, k, q.data());
  return q;
}

std::vector<float> Dequantize(const std::vector<uint8_t>& q, int64_t n, int64_t k) {
  std::vector<int32_t> rows(n);
  for (int i = 0; i < n; ++i) rows[i] = i;
  std::vector<float> out(n * k);
  DequantizeQ4Rows(q.data(), n, k, rows.data(), int(n), out.data());
  return out;
}

TEST(Q4MatmulTest, PackedValuesAreTheFilesBitForBit) {
  for (Q4Source source : kSources) {
    const int64_t n = 37, k = 512;  // the last panel has 5 rows
    const auto blocks = SourceBlocks(source, n, k, 1);
    const auto want = GgmlValues(source, blocks);
    const auto got = Dequantize(Pack(source, blocks, n, k), n, k);
    // Equal as numbers: a Q4_0 value d * q + (-8 * d) is +0 where ggml's
    // d * (q - 8) may be -0.
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(got[i], want[i]) << "source " << int(source) << " value " << i;
    }
    // A subset of rows, in any order.
    const int32_t pick[] = {36, 0, 17};
    std::vector<float> three(3 * k);
    const auto q = Pack(source, blocks, n, k);
    DequantizeQ4Rows(q.data(), n, k, pick, 3, three.data());
    for (int r = 0; r < 3; ++r) {
      for (int e = 0; e < k; ++e) ASSERT_EQ(three[r * k + e], want[pick[r] * k + e]);
    }
  }
}

// Q4Linear equals the product of its dequantized weights and its quantized
// activations, computed in double, up to float rounding.
TEST(Q4MatmulTest, LinearEqualsDequantizedProduct) {
  for (auto [m, k, n] : {std::tuple{1, 256, 5}, {3, 768, 40}, {9, 1536, 67}}) {
    for (Q4Source source : kSources) {
      const auto x = Random(m * k, 2);
      const auto blocks = SourceBlocks(source, n, k, 3);
      const auto wd = GgmlValues(source, blocks);
      const auto q = Pack(source, blocks, n, k);
      std::vector<float> y(m * n);
      Q4Linear(x.data(), m, k, q.data(), n, y.data());
      std::vector<float> xd(k);
      for (int r = 0; r < m; ++r) {
        for (int64_t b = 0; b < k / 32; ++b) {
          int8_t xq[32];
          const float s = q8_internal::QuantizeBlock(x.data() + r * k + b * 32, xq);
          for (int e = 0; e < 32; ++e) xd[b * 32 + e] = s * xq[e];
        }
        for (int64_t j = 0; j < n; ++j) {
          double want = 0, mag = 0;
          for (int64_t e = 0; e < k; ++e) {
            want += double(xd[e]) * wd[j * k + e];
            mag += std::fabs(double(xd[e]) * wd[j * k + e]);
          }
          ASSERT_NEAR(y[r * n + j], want, 1e-5 * (1e-3 + mag))
              << "m=" << m << " k=" << k << " r=" << r << " j=" << j;
        }
      }
    }
  }
}

// Every kernel this CPU runs gives the scalar reference's bits, for every
// row count; a row's result does not depend on its batch or the thread
// count.
TEST(Q4MatmulTest, KernelsBitIdenticalAndBatchInvariant) {
  const int64_t k = 512, n = 45;  // 16 blocks; the last panel has 13 rows
  const int m = 13;
  const int64_t panels = (n + 15) / 16;
  auto x = Random(m * k, 6, 3.0f);
  for (int e = 0; e < 32; ++e) x[e] = (e % 2 ? 1e4f : -1e4f);  // +-127 alternating
  for (int e = 64; e < 96; ++e) x[k + e] = -1e3f;              // all at -127
  const q8_internal::Q8Rows all = q8_internal::QuantizeActivations(x.data(), m, k);
  std::vector<int8_t> xq(all.q, all.q + m * k);
  std::vector<float> xs(all.s, all.s + m * all.blocks);
  std::vector<int32_t> xc(all.c, all.c + m * all.blocks);
  for (Q4Source source : {Q4Source::kQ4_1, Q4Source::kQ4_K, Q4Source::kQ5_K}) {
    SCOPED_TRACE(int(source));
    auto blocks = SourceBlocks(source, n, k, 7);
    // A block of the largest values (15, or 31 with the fifth bits): the
    // bound of the AVX2 kernels' int16 sums.
    const int nibbles = source == Q4Source::kQ4_1 ? 4 : 16;
    const int top = source == Q4Source::kQ5_K ? 16 + 32 + 32 : nibbles + 16;
    for (int j = nibbles; j < top; ++j) blocks[j] = 0xFF;
    const auto q = Pack(source, blocks, n, k);
    const int scales = source == Q4Source::kQ4_1 ? 0 : source == Q4Source::kQ4_K ? 1 : 2;
    ASSERT_EQ(q[0], scales);  // the header names the panel format
    auto run = [&](const Q4Kernels& kern, int rows_per_call) {
      std::vector<float> y(m * n, -1.0f);
      for (int r = 0; r < m; r += rows_per_call) {
        const int rows = std::min(rows_per_call, m - r);
        const q8_internal::Q8Rows part{xq.data() + r * k, xs.data() + r * all.blocks,
                                       xc.data() + r * all.blocks, all.blocks};
        kern.dot[scales](part, rows, q.data() + 64, panels, n, y.data() + r * n, n);
      }
      return y;
    };
    const auto want = run(q4_internal::ScalarQ4Kernels(), m);
    std::vector<const Q4Kernels*> kernels = {q4_internal::Avx2Q4Kernels(),
                                             q4_internal::AvxVnniQ4Kernels(),
                                             q4_internal::Avx512VnniQ4Kernels()};
    int ran = 0;
    for (const Q4Kernels* kern : kernels) {
      if (kern == nullptr) continue;
      ++ran;
      for (int rows_per_call : {m, 1, 2, 3, 5}) {
        const auto got = run(*kern, rows_per_call);
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_EQ(got[i], want[i]) << kern->name << " rows/call " << rows_per_call << " at " << i;
        }
      }
    }
    EXPECT_GE(ran, 1) << "this CPU has no AVX2: only the scalar kernel ran";
    // Through Q4Linear on 1 and 2 threads, and one row alone.
    for (int threads : {1, 2}) {
      omp_set_num_threads(threads);
      std::vector<float> y(m * n);
      Q4Linear(x.data(), m, k, q.data(), n, y.data());
      EXPECT_EQ(0, std::memcmp(y.data(), want.data(), y.size() * 4)) << threads << " threads";
      std::vector<float> one(n);
      Q4Linear(x.data() + 7 * k, 1, k, q.data(), n, one.data());
      EXPECT_EQ(0, std::memcmp(one.data(), want.data() + 7 * n, n * 4)) << threads << " threads";
    }
  }
}

}  // namespace
}  // namespace kvcast
