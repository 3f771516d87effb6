// Host test of kv_codec_math.h, the math the GPU KV codec kernels run: built
// by the host compiler (no GPU, no nvcc), it checks that the shared
// KVCAST_HD functions reproduce the CPU reference of kernels/kv_codec.h bit
// for bit. Scalar conversions are swept over dense float bit patterns
// (including every rounding tie); whole rows assembled from the block
// functions are compared byte for byte with EncodeKvRow on random,
// adversarial and tie-laden input; decoding is compared on every code under
// every fp16 scale pattern (and every fp16 / bf16 pattern for the 16-bit
// formats). Floats compare by bit pattern, NaN payloads included.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "gtest/gtest.h"
#include "kernels/cuda/kv_codec_math.h"
#include "kernels/kv_codec.h"

namespace kvcast {
namespace cuda {
namespace {

namespace km = kv_math;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr KvFormat kScaledFormats[] = {KvFormat::kFp8E4M3, KvFormat::kInt8, KvFormat::kFp4E2M1,
                                       KvFormat::kInt4};

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

std::string Name(KvFormat f) {
  static const char* const kNames[] = {"fp16", "bf16", "fp8", "int8", "fp4", "int4"};
  return kNames[static_cast<int>(f)];
}

// Float bit patterns for the scalar sweeps: every value of the top 24 bits
// with low bytes 0, 1, 0x80 and 0xff. Every rounding position of fp16
// (bit 12), bf16 (bit 15) and fp8 (bit 19) then sees exact ties, values just
// above and below them, and values far from them, in every binade and both
// signs, NaN and inf patterns included.
template <typename Fn>
void SweepFloatBits(Fn fn) {
  constexpr uint32_t kLow[] = {0x00, 0x01, 0x80, 0xff};
  for (uint32_t hi = 0; hi < (1u << 24); ++hi) {
    for (uint32_t lo : kLow) fn((hi << 8) | lo);
  }
}

TEST(KvCodecMath, HalfAndBf16EncodeMatchDtype) {
  uint64_t half_mismatch = 0, bf16_mismatch = 0;
  uint32_t first_half = 0, first_bf16 = 0;
  SweepFloatBits([&](uint32_t b) {
    const float x = FromBits(b);
    if (km::EncodeHalf(x) != FloatToHalf(x) && half_mismatch++ == 0) first_half = b;
    if (km::EncodeBf16(x) != FloatToBFloat16(x) && bf16_mismatch++ == 0) first_bf16 = b;
  });
  EXPECT_EQ(half_mismatch, 0u) << "first at float bits 0x" << std::hex << first_half;
  EXPECT_EQ(bf16_mismatch, 0u) << "first at float bits 0x" << std::hex << first_bf16;
}

// dtype.h's HalfToFloat keeps a signalling NaN signalling where the codec
// (like vcvtph2ps) quiets it: NaN payloads are pinned against DecodeKvRow in
// DecodeEvery16BitPattern instead.
TEST(KvCodecMath, HalfAndBf16DecodeMatchDtypeForEveryPattern) {
  for (uint32_t v = 0; v < 65536; ++v) {
    const uint16_t h = static_cast<uint16_t>(v);
    const float ref = HalfToFloat(h);
    const uint32_t quiet = ref != ref ? 0x400000u : 0u;
    ASSERT_EQ(Bits(km::DecodeHalf(h)), Bits(ref) | quiet) << "half 0x" << std::hex << v;
    ASSERT_EQ(Bits(km::DecodeBf16(h)), Bits(BFloat16ToFloat(h))) << "bf16 0x" << std::hex << v;
  }
}

TEST(KvCodecMath, Fp8AndFp4MatchReference) {
  uint64_t fp8_mismatch = 0, fp4_mismatch = 0;
  uint32_t first_fp8 = 0, first_fp4 = 0;
  SweepFloatBits([&](uint32_t b) {
    const float x = FromBits(b);
    if (km::EncodeFp8E4M3(x) != FloatToFp8E4M3(x) && fp8_mismatch++ == 0) first_fp8 = b;
    if (km::EncodeFp4E2M1(x) != FloatToFp4E2M1(x) && fp4_mismatch++ == 0) first_fp4 = b;
  });
  EXPECT_EQ(fp8_mismatch, 0u) << "first at float bits 0x" << std::hex << first_fp8;
  EXPECT_EQ(fp4_mismatch, 0u) << "first at float bits 0x" << std::hex << first_fp4;
  // fp4 ties (.25 .75 1.25 1.75 2.5 3.5 5) sit below the sweep's resolution
  // only in name: they are exact floats with zero low bytes, so swept; spell
  // them out anyway, with their neighbours.
  for (float t : {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.f}) {
    for (float x : {t, std::nextafter(t, 0.f), std::nextafter(t, kInf)}) {
      EXPECT_EQ(km::EncodeFp4E2M1(x), FloatToFp4E2M1(x)) << x;
      EXPECT_EQ(km::EncodeFp4E2M1(-x), FloatToFp4E2M1(-x)) << -x;
    }
  }
  for (uint32_t c = 0; c < 256; ++c) {
    const uint8_t code = static_cast<uint8_t>(c);
    ASSERT_EQ(Bits(km::DecodeFp8E4M3(code)), Bits(Fp8E4M3ToFloat(code))) << "fp8 code " << c;
    ASSERT_EQ(Bits(km::DecodeFp4E2M1(code & 15)), Bits(Fp4E2M1ToFloat(code))) << "fp4 " << c;
  }
}

TEST(KvCodecMath, RoundToIntTiesToEven) {
  EXPECT_EQ(km::RoundToInt(0.5f, 127.f), 0);
  EXPECT_EQ(km::RoundToInt(1.5f, 127.f), 2);
  EXPECT_EQ(km::RoundToInt(2.5f, 127.f), 2);
  EXPECT_EQ(km::RoundToInt(-2.5f, 127.f), -2);
  EXPECT_EQ(km::RoundToInt(-3.5f, 7.f), -4);
  EXPECT_EQ(km::RoundToInt(6.5f, 7.f), 6);
  EXPECT_EQ(km::RoundToInt(200.f, 127.f), 127);
  EXPECT_EQ(km::RoundToInt(-200.f, 7.f), -7);
  EXPECT_EQ(km::RoundToInt(std::nextafter(0.5f, 1.f), 127.f), 1);
}

// ---------------------------------------------------------------------------
// Rows.

// A row encoded with the kv_math block functions, as the kernels assemble
// it: per block the max of AbsBits, ScaleForBlock, the little-endian scale,
// then every value byte through EncodeValueByte.
std::vector<uint8_t> MathEncodeRow(KvFormat f, const std::vector<float>& x, int heads, int dim,
                                   int block) {
  const size_t n = static_cast<size_t>(heads) * dim;
  std::vector<uint8_t> out(km::RowBytes(f, n, block));
  if (!km::FormatScaled(f)) {
    for (size_t i = 0; i < n; ++i) {
      const uint16_t v = km::EncodeUnscaled(f, x[i]);
      out[2 * i] = static_cast<uint8_t>(v);
      out[2 * i + 1] = static_cast<uint8_t>(v >> 8);
    }
    return out;
  }
  const size_t num_blocks = n / block;
  std::vector<float> scales(num_blocks);
  for (size_t b = 0; b < num_blocks; ++b) {
    uint32_t m = 0;
    for (int i = 0; i < block; ++i) {
      const uint32_t v = km::AbsBits(x[b * block + i]);
      m = v > m ? v : m;
    }
    const uint16_t h = km::ScaleForBlock(m, km::FormatQmax(f));
    out[2 * b] = static_cast<uint8_t>(h);
    out[2 * b + 1] = static_cast<uint8_t>(h >> 8);
    scales[b] = km::DecodeHalf(h);
  }
  uint8_t* values = out.data() + 2 * num_blocks;
  const auto scale_of = [&](size_t b) { return scales[b]; };
  for (size_t j = 0; j < km::ValueBytes(f, n); ++j) {
    values[j] = km::EncodeValueByte(f, x.data(), j, block, scale_of);
  }
  return out;
}

std::vector<float> MathDecodeRow(KvFormat f, const std::vector<uint8_t>& in, int heads, int dim,
                                 int block) {
  const size_t n = static_cast<size_t>(heads) * dim;
  std::vector<float> out(n);
  if (!km::FormatScaled(f)) {
    for (size_t i = 0; i < n; ++i) {
      out[i] = km::DecodeUnscaled(f, static_cast<uint16_t>(in[2 * i] | in[2 * i + 1] << 8));
    }
    return out;
  }
  const size_t num_blocks = n / block;
  const uint8_t* values = in.data() + 2 * num_blocks;
  const auto scale_of = [&](size_t b) {
    return km::DecodeHalf(static_cast<uint16_t>(in[2 * b] | in[2 * b + 1] << 8));
  };
  for (size_t i = 0; i < n; ++i) out[i] = km::DecodeValue(f, values, i, block, scale_of);
  return out;
}

std::vector<uint8_t> RefEncode(KvFormat f, const std::vector<float>& x, int heads, int dim,
                               int block) {
  std::vector<uint8_t> out(KvRowBytes(f, heads, dim, block));
  EncodeKvRow(f, x.data(), heads, dim, block, out.data());
  return out;
}

std::vector<float> RefDecode(KvFormat f, const std::vector<uint8_t>& in, int heads, int dim,
                             int block) {
  std::vector<float> out(static_cast<size_t>(heads) * dim);
  DecodeKvRow(f, in.data(), heads, dim, block, out.data());
  return out;
}

// Encodes with both, compares bytes, then decodes the encoding with both and
// compares float bits.
void ExpectRowMatches(KvFormat f, const std::vector<float>& x, int heads, int dim, int block,
                      const std::string& what) {
  SCOPED_TRACE(Name(f) + " " + what + " heads=" + std::to_string(heads) +
               " dim=" + std::to_string(dim) + " block=" + std::to_string(block));
  const std::vector<uint8_t> ref = RefEncode(f, x, heads, dim, block);
  const std::vector<uint8_t> got = MathEncodeRow(f, x, heads, dim, block);
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_EQ(got[i], ref[i]) << "byte " << i << " of " << ref.size();
  }
  const std::vector<float> ref_y = RefDecode(f, ref, heads, dim, block);
  const std::vector<float> got_y = MathDecodeRow(f, ref, heads, dim, block);
  for (size_t i = 0; i < ref_y.size(); ++i) {
    ASSERT_EQ(Bits(got_y[i]), Bits(ref_y[i])) << "value " << i;
  }
}

struct Shape {
  int heads, dim, block;
};

// Even, odd (4-bit bytes spanning two blocks), single-value and whole-head
// blocks.
constexpr Shape kShapes[] = {{1, 32, 32}, {2, 64, 16}, {4, 128, 32}, {2, 128, 128}, {3, 64, 8},
                             {2, 12, 3},  {3, 10, 5},  {1, 6, 1},    {2, 2, 1},     {1, 42, 7},
                             {2, 96, 48}, {1, 8, 2}};

std::vector<float> Normal(std::mt19937& rng, size_t n, float magnitude) {
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<float> x(n);
  for (float& v : x) v = dist(rng) * magnitude;
  return x;
}

TEST(KvCodecMath, RowsOfRandomValuesMatchEncodeKvRow) {
  std::mt19937 rng(1234);
  const float kMagnitudes[] = {1e-42f, 1e-30f, 1e-7f, 1e-3f, 0.1f,  1.f,
                               30.f,   1e4f,   6e4f,  1e8f,  1e30f, 1e38f};
  for (KvFormat f : kAllKvFormats) {
    for (const Shape& s : kShapes) {
      const size_t n = static_cast<size_t>(s.heads) * s.dim;
      for (float mag : kMagnitudes) {
        for (int rep = 0; rep < 4; ++rep) {
          ExpectRowMatches(f, Normal(rng, n, mag), s.heads, s.dim, s.block,
                           "normal*" + std::to_string(mag));
        }
      }
      // Magnitudes varying from block to block and within blocks.
      for (int rep = 0; rep < 8; ++rep) {
        std::vector<float> x = Normal(rng, n, 1.f);
        std::uniform_int_distribution<int> exp(-140, 127);
        for (float& v : x) v = std::ldexp(v, exp(rng)) / 2;
        ExpectRowMatches(f, x, s.heads, s.dim, s.block, "wild exponents");
      }
      // Random bit patterns (NaN and inf included).
      for (int rep = 0; rep < 8; ++rep) {
        std::vector<float> x(n);
        for (float& v : x) v = FromBits(static_cast<uint32_t>(rng()));
        ExpectRowMatches(f, x, s.heads, s.dim, s.block, "random bits");
      }
    }
  }
}

TEST(KvCodecMath, RowsOfSpecialValuesMatchEncodeKvRow) {
  const float kSpecials[] = {0.f,
                             -0.f,
                             kInf,
                             -kInf,
                             kNaN,
                             -kNaN,
                             FromBits(0x7f800001u),  // signalling NaN
                             FromBits(0xffbfffffu),
                             FromBits(1),  // smallest subnormal
                             -FromBits(1),
                             FromBits(0x007fffffu),  // largest subnormal
                             std::numeric_limits<float>::min(),
                             std::numeric_limits<float>::max(),
                             -std::numeric_limits<float>::max(),
                             65504.f,
                             65520.f,
                             65504.f * 448.f,
                             65504.f * 448.f * 1.001f,
                             65504.f * 127.f * 1.001f,
                             65504.f * 7.f * 2.f,
                             6e-8f,
                             1e-45f};
  std::mt19937 rng(99);
  for (KvFormat f : kAllKvFormats) {
    for (const Shape& s : kShapes) {
      const size_t n = static_cast<size_t>(s.heads) * s.dim;
      // Whole rows of one special value.
      for (float special : kSpecials) {
        ExpectRowMatches(f, std::vector<float>(n, special), s.heads, s.dim, s.block,
                         "all " + std::to_string(special));
      }
      // One or a few specials dropped into normal rows (one NaN, inf, -0,
      // subnormal or huge value poisoning a block, or several).
      for (float special : kSpecials) {
        for (int rep = 0; rep < 3; ++rep) {
          std::vector<float> x = Normal(rng, n, rep == 0 ? 1.f : 1e-3f);
          std::uniform_int_distribution<size_t> pos(0, n - 1);
          for (int k = 0; k <= rep; ++k) x[pos(rng)] = special;
          ExpectRowMatches(f, x, s.heads, s.dim, s.block, "with " + std::to_string(special));
        }
      }
      // Rows mixing zeros, -0 and tiny subnormals.
      {
        std::vector<float> x(n);
        for (size_t i = 0; i < n; ++i) {
          x[i] = i % 3 == 0 ? -0.f : (i % 3 == 1 ? 0.f : FromBits(1 + (i % 5)));
        }
        ExpectRowMatches(f, x, s.heads, s.dim, s.block, "zeros and subnormals");
      }
    }
  }
}

// Values that land exactly on rounding ties once divided by the scale, so a
// kernel rounding half away from zero (or truncating) fails.
TEST(KvCodecMath, RowsOfRoundingTiesMatchEncodeKvRow) {
  std::mt19937 rng(7);
  for (KvFormat f : kScaledFormats) {
    const float qmax = km::FormatQmax(f);
    // Midpoints between adjacent code values, in [0, qmax].
    std::vector<float> mids;
    if (f == KvFormat::kInt8 || f == KvFormat::kInt4) {
      for (int k = 0; k < static_cast<int>(qmax); ++k) mids.push_back(k + 0.5f);
    } else {
      std::vector<float> codes;
      for (uint32_t c = 0; c < (f == KvFormat::kFp8E4M3 ? 0x7fu : 8u); ++c) {
        codes.push_back(f == KvFormat::kFp8E4M3 ? Fp8E4M3ToFloat(static_cast<uint8_t>(c))
                                                : Fp4E2M1ToFloat(static_cast<uint8_t>(c)));
      }
      for (size_t k = 0; k + 1 < codes.size(); ++k) mids.push_back((codes[k] + codes[k + 1]) / 2);
    }
    for (const Shape& s : kShapes) {
      const size_t n = static_cast<size_t>(s.heads) * s.dim;
      // Power-of-two scales keep x = mid * scale exact and x / scale == mid.
      for (int e : {-20, -8, -1, 0, 3, 10}) {
        const float scale = std::ldexp(1.f, e);
        std::vector<float> x(n);
        std::uniform_int_distribution<size_t> pick(0, mids.size() - 1);
        for (size_t i = 0; i < n; ++i) {
          x[i] = mids[pick(rng)] * scale * (rng() % 2 ? -1.f : 1.f);
        }
        // Each block's amax = qmax * scale, so its scale is exactly `scale`.
        for (size_t b = 0; b < n / s.block; ++b) x[b * s.block] = qmax * scale;
        ExpectRowMatches(f, x, s.heads, s.dim, s.block, "ties at 2^" + std::to_string(e));
      }
    }
  }
}

// Scale rounding: amax / qmax just above, at and below fp16 values, and
// above the fp16 range (saturation at 65504).
TEST(KvCodecMath, BlockScalesMatchEncodeKvRow) {
  for (KvFormat f : kScaledFormats) {
    const float qmax = km::FormatQmax(f);
    std::vector<float> amaxes;
    for (uint32_t h = 1; h < 0x7c00u; h += 7) {
      const float s = HalfToFloat(static_cast<uint16_t>(h));
      const float a = s * qmax;  // exact
      for (float v : {a, std::nextafter(a, 0.f), std::nextafter(a, kInf)}) amaxes.push_back(v);
    }
    for (float v : {65504.f * qmax * 1.5f, 3e38f, 1e-40f, 1e-30f}) amaxes.push_back(v);
    // One block per amax value: heads = count, dim = block = 4.
    std::vector<float> x;
    for (float a : amaxes) {
      for (float v : {a, -a / 3, a / 2, -a}) x.push_back(v);
    }
    const int heads = static_cast<int>(amaxes.size());
    ExpectRowMatches(f, x, heads, 4, 4, "scale sweep");
    ExpectRowMatches(f, x, heads, 4, 1, "scale sweep, block 1");
  }
}

// Every code under every fp16 scale pattern (0, subnormals, 65504, inf, NaN
// with payloads, negative scales no encoder writes): 8-bit formats get one
// block of all 256 codes, 4-bit formats one block of all 256 (low, high)
// nibble pairs, and an odd-block (block 1) row where each byte straddles two
// blocks with different scales.
TEST(KvCodecMath, DecodeEveryCodeUnderEveryScale) {
  for (KvFormat f : kScaledFormats) {
    SCOPED_TRACE(Name(f));
    const bool four = km::FormatBits(f) == 4;
    const int dim = four ? 512 : 256;
    for (uint32_t h = 0; h < 65536; ++h) {
      std::vector<uint8_t> row(2 + 256);
      row[0] = static_cast<uint8_t>(h);
      row[1] = static_cast<uint8_t>(h >> 8);
      for (int c = 0; c < 256; ++c) row[2 + c] = static_cast<uint8_t>(c);
      const std::vector<float> ref = RefDecode(f, row, 1, dim, dim);
      const std::vector<float> got = MathDecodeRow(f, row, 1, dim, dim);
      for (int i = 0; i < dim; ++i) {
        ASSERT_EQ(Bits(got[i]), Bits(ref[i])) << "scale 0x" << std::hex << h << " value " << i;
      }
    }
    if (!four) continue;
    // Block 1: value 2j under scale 2j, value 2j + 1 under scale 2j + 1.
    std::mt19937 rng(5);
    for (int rep = 0; rep < 64; ++rep) {
      const int values = 256;
      std::vector<uint8_t> row(2 * values + values / 2);
      for (uint8_t& b : row) b = static_cast<uint8_t>(rng());
      const std::vector<float> ref = RefDecode(f, row, 1, values, 1);
      const std::vector<float> got = MathDecodeRow(f, row, 1, values, 1);
      for (int i = 0; i < values; ++i) ASSERT_EQ(Bits(got[i]), Bits(ref[i])) << "value " << i;
      const std::vector<float> ref3 = RefDecode(f, row, 2, 6, 3);
      const std::vector<float> got3 = MathDecodeRow(f, row, 2, 6, 3);
      for (int i = 0; i < 12; ++i) ASSERT_EQ(Bits(got3[i]), Bits(ref3[i])) << "value " << i;
    }
  }
}

TEST(KvCodecMath, DecodeEvery16BitPattern) {
  for (KvFormat f : {KvFormat::kFp16, KvFormat::kBf16}) {
    SCOPED_TRACE(Name(f));
    std::vector<uint8_t> row(2 * 65536);
    for (uint32_t v = 0; v < 65536; ++v) {
      row[2 * v] = static_cast<uint8_t>(v);
      row[2 * v + 1] = static_cast<uint8_t>(v >> 8);
    }
    const std::vector<float> ref = RefDecode(f, row, 256, 256, 256);
    const std::vector<float> got = MathDecodeRow(f, row, 256, 256, 256);
    for (uint32_t v = 0; v < 65536; ++v) {
      ASSERT_EQ(Bits(got[v]), Bits(ref[v])) << "pattern 0x" << std::hex << v;
    }
  }
}

TEST(KvCodecMath, RowBytesMatchKvRowBytes) {
  for (KvFormat f : kAllKvFormats) {
    for (const Shape& s : kShapes) {
      EXPECT_EQ(km::RowBytes(f, static_cast<size_t>(s.heads) * s.dim, s.block),
                KvRowBytes(f, s.heads, s.dim, s.block))
          << Name(f);
    }
  }
}

}  // namespace
}  // namespace cuda
}  // namespace kvcast
