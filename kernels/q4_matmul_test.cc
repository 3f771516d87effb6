#include "kernels/q4_matmul.h"

#include <omp.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "kernels/internal/q4_kernels.h"
#include "kernels/internal/q8_kernels.h"

namespace kvcast {
namespace {

using q4_internal::PanelFormat;
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
    if (source == Q4Source::kQ6_K) {  // values and scales, then d
      for (int j = 0; j < 208; ++j) block[j] = uint8_t(rng());
      std::memcpy(block + 208, &d, 2);
      continue;
    }
    std::memcpy(block, &d, 2);
    const bool has_min = source != Q4Source::kQ4_0 && source != Q4Source::kQ5_0;
    if (has_min) std::memcpy(block + 2, &m, 2);
    for (int j = has_min ? 4 : 2; j < bytes; ++j) block[j] = uint8_t(rng());
  }
  return out;
}

// The GGUF definition of the blocks' values (ggml's dequantization), written
// from the format's description: a Q4_K sub-block j's 6-bit scale and min
// are bits of the 12 scale bytes (j < 4: the low 6 bits of bytes j and
// j + 4; else the nibbles of byte j + 4 below the top 2 bits of bytes j - 4
// and j), its 32 nibbles the low (j even) or high nibbles of 32 bytes; a
// Q5_K value's fifth bit is bit j of byte e of the 32 before the nibbles;
// a Q5_0 / Q5_1 value e's fifth bit is bit e of the 4 bytes after d (and
// m); a Q6_K super-block is ql[128], qh[64], int8 sc[16], d: its 256 values
// in two halves of 128, value l < 32 of quarter t < 4 of half n taking its
// low four bits from the low (t < 2) or high nibble of ql[64 n + 32 (t % 2)
// + l], its top two from bits 2t, 2t + 1 of qh[32 n + l], and x = d *
// sc[8 n + 2 t + l / 16] * (q - 32).
std::vector<float> GgmlValues(Q4Source source, const std::vector<uint8_t>& blocks) {
  const int bytes = Q4SourceBlockBytes(source);
  std::vector<float> out;
  for (size_t b = 0; b < blocks.size() / bytes; ++b) {
    const uint8_t* block = blocks.data() + b * bytes;
    uint16_t d, m;
    std::memcpy(&d, block, 2);
    std::memcpy(&m, block + 2, 2);
    if (source == Q4Source::kQ6_K) {
      std::memcpy(&d, block + 208, 2);
      float values[256];
      for (int n = 0; n < 2; ++n) {
        for (int t = 0; t < 4; ++t) {
          for (int l = 0; l < 32; ++l) {
            const uint8_t low = block[64 * n + 32 * (t % 2) + l];
            const int top = (block[128 + 32 * n + l] >> (2 * t)) % 4;
            const int q = (t < 2 ? low % 16 : low / 16) + 16 * top;
            const int sc = int8_t(block[192 + 8 * n + 2 * t + l / 16]);
            values[128 * n + 32 * t + l] = HalfToFloat(d) * float(sc) * float(q - 32);
          }
        }
      }
      out.insert(out.end(), values, values + 256);
      continue;
    }
    if (source == Q4Source::kQ5_0 || source == Q4Source::kQ5_1) {
      const bool has_min = source == Q4Source::kQ5_1;
      const uint8_t* qh = block + (has_min ? 4 : 2);
      for (int e = 0; e < 32; ++e) {
        const uint8_t byte = qh[4 + e % 16];
        const int q = (e < 16 ? byte % 16 : byte / 16) + 16 * ((qh[e / 8] >> (e % 8)) % 2);
        out.push_back(has_min ? HalfToFloat(d) * float(q) + HalfToFloat(m)
                              : float(q - 16) * HalfToFloat(d));
      }
      continue;
    }
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
                                 Q4Source::kQ5_K, Q4Source::kQ5_0, Q4Source::kQ5_1,
                                 Q4Source::kQ6_K};

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

// Against PyPI's gguf package (tests/data/gguf_dequant_vectors.json,
// tools/golden/gguf_dequant_vectors.py: random blocks of each type and the
// float32 values gguf.quants.dequantize gives), one block a row: packed and
// dequantized, the values are the package's, bit for bit.
TEST(Q4MatmulTest, PackedValuesAreTheGgufPackagesBitForBit) {
  std::ifstream in("tests/data/gguf_dequant_vectors.json");
  ASSERT_TRUE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json vectors = nlohmann::json::parse(text.str());
  const std::map<std::string, Q4Source> sources = {
      {"Q4_0", Q4Source::kQ4_0}, {"Q4_1", Q4Source::kQ4_1}, {"Q5_0", Q4Source::kQ5_0},
      {"Q5_1", Q4Source::kQ5_1}, {"Q4_K", Q4Source::kQ4_K}, {"Q5_K", Q4Source::kQ5_K},
      {"Q6_K", Q4Source::kQ6_K}};
  int checked = 0;
  for (const auto& entry : vectors["types"]) {
    const auto it = sources.find(entry["type"].get<std::string>());
    if (it == sources.end()) continue;
    SCOPED_TRACE(it->first);
    const Q4Source source = it->second;
    const std::string hex = entry["bytes"];
    std::vector<uint8_t> blocks(hex.size() / 2);
    for (size_t i = 0; i < blocks.size(); ++i) {
      blocks[i] = uint8_t(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
    }
    const int64_t k = Q4SourceBlockValues(source), n = entry["count"].get<int64_t>() / k;
    ASSERT_EQ(blocks.size(), size_t(n * Q4SourceBlockBytes(source)));
    const auto got = Dequantize(Pack(source, blocks, n, k), n, k);
    const auto& want = entry["float_bits"];
    for (int64_t i = 0; i < n * k; ++i) {
      uint32_t bits;
      std::memcpy(&bits, &got[i], 4);
      float w;
      const uint32_t want_bits = want[i].get<uint32_t>();
      std::memcpy(&w, &want_bits, 4);
      // Equal as numbers (+0 where the package's d * (q - 8) is -0).
      ASSERT_TRUE(bits == want_bits || got[i] == w)
          << "value " << i << ": " << got[i] << " vs " << w;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 7);
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
  std::vector<int32_t> xh(m * all.blocks);
  q4_internal::FirstHalfSums(xq.data(), m * all.blocks, xh.data());
  // Each source and the panel format its header names.
  for (auto [source, format] : {std::pair{Q4Source::kQ4_1, 0}, {Q4Source::kQ4_K, 1},
                                {Q4Source::kQ5_K, 2}, {Q4Source::kQ5_1, 3}, {Q4Source::kQ5_0, 3},
                                {Q4Source::kQ6_K, 4}}) {
    SCOPED_TRACE(int(source));
    auto blocks = SourceBlocks(source, n, k, 7);
    // A block of the largest values (15, 31 with the fifth bits, 63 with the
    // sixth): the bound of the AVX2 kernels' int16 sums.
    int from = 16, to = 16 + 16;  // Q4_K: nibbles
    if (source == Q4Source::kQ4_1) from = 4, to = 4 + 16;
    if (source == Q4Source::kQ5_K) to = 16 + 32 + 32;  // fifth bits and nibbles
    if (source == Q4Source::kQ5_1) from = 4, to = 4 + 4 + 16;
    if (source == Q4Source::kQ5_0) from = 2, to = 2 + 4 + 16;
    if (source == Q4Source::kQ6_K) from = 0, to = 128 + 64;  // a whole super-block
    for (int j = from; j < to; ++j) blocks[j] = 0xFF;
    const auto q = Pack(source, blocks, n, k);
    ASSERT_EQ(q[0], format);  // the header names the panel format
    // The panels widened by the scalar reference (q4_kernels.h: every value
    // a byte, then the block's scales).
    const int64_t row_blocks = k / 32;
    std::vector<uint8_t> wide(panels * row_blocks *
                              q4_internal::WideBlockBytes(PanelFormat(format)));
    q4_internal::ScalarQ4Kernels().widen[format](q.data() + 64, panels, row_blocks, wide.data());
    auto run = [&](const Q4Kernels& kern, int rows_per_call, bool widened) {
      std::vector<float> y(m * n, -1.0f);
      for (int r = 0; r < m; r += rows_per_call) {
        const int rows = std::min(rows_per_call, m - r);
        q8_internal::Q8Rows part{xq.data() + r * k, xs.data() + r * all.blocks,
                                 xc.data() + r * all.blocks, all.blocks};
        // As Q4Linear: only the 6-bit kernels are given the half sums.
        part.h = format == 4 ? xh.data() + r * all.blocks : nullptr;
        if (widened) {
          kern.wide_dot[format](part, rows, wide.data(), panels, n, y.data() + r * n, n);
        } else {
          kern.dot[format](part, rows, q.data() + 64, panels, n, y.data() + r * n, n);
        }
      }
      return y;
    };
    const auto want = run(q4_internal::ScalarQ4Kernels(), m, false);
    std::vector<const Q4Kernels*> kernels = {&q4_internal::ScalarQ4Kernels(),
                                             q4_internal::Avx2Q4Kernels(),
                                             q4_internal::AvxVnniQ4Kernels(),
                                             q4_internal::Avx512VnniQ4Kernels()};
    int ran = 0;
    for (const Q4Kernels* kern : kernels) {
      if (kern == nullptr) continue;
      ++ran;
      std::vector<uint8_t> own(wide.size());
      kern->widen[format](q.data() + 64, panels, row_blocks, own.data());
      ASSERT_EQ(own, wide) << kern->name << " widens otherwise";
      for (bool widened : {false, true}) {
        for (int rows_per_call : {m, 1, 2, 3, 5}) {
          const auto got = run(*kern, rows_per_call, widened);
          for (size_t i = 0; i < got.size(); ++i) {
            ASSERT_EQ(got[i], want[i]) << kern->name << (widened ? " widened" : "") << " rows/call "
                                       << rows_per_call << " at " << i;
          }
        }
      }
    }
    EXPECT_GE(ran, 2) << "this CPU has no AVX2: only the scalar kernel ran";
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
