// Tests of the KV wire codecs (kv_codec.h): known encodings of every format,
// rounding ties and saturation, the row layout and block scales, non-finite
// input, the AVX2 kernels against the scalar ones, and the backend ops
// EncodeKv/DecodeKv through the CPU backend.
#include "kernels/kv_codec.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/dtype.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/internal/kv_codec_kernels.h"
#include "kernels/profiling_backend.h"

namespace kvcast {
namespace {

using kv_internal::Bits;
using kv_internal::FromBits;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kFltMax = std::numeric_limits<float>::max();

std::vector<uint8_t> Encode(KvFormat f, const std::vector<float>& x, int heads, int dim,
                            int block) {
  std::vector<uint8_t> out(KvRowBytes(f, heads, dim, block));
  EncodeKvRow(f, x.data(), heads, dim, block, out.data());
  return out;
}

std::vector<float> Decode(KvFormat f, const std::vector<uint8_t>& in, int heads, int dim,
                          int block) {
  std::vector<float> out(size_t(heads) * dim);
  DecodeKvRow(f, in.data(), heads, dim, block, out.data());
  return out;
}

uint16_t Le16(const std::vector<uint8_t>& b, size_t i) { return b[i] | b[i + 1] << 8; }

// The OCP E4M3FN value of a code, straight from the definition.
float Fp8Reference(uint8_t c) {
  const int e = (c >> 3) & 15, m = c & 7;
  const float sign = c & 0x80 ? -1.f : 1.f;
  if (e == 15 && m == 7) return kNaN;
  if (e == 0) return sign * std::ldexp(m / 8.f, -6);
  return sign * std::ldexp(1.f + m / 8.f, e - 7);
}

TEST(KvFormat, BitsScaledAndRowBytes) {
  EXPECT_EQ(KvFormatBits(KvFormat::kFp16), 16);
  EXPECT_EQ(KvFormatBits(KvFormat::kBf16), 16);
  EXPECT_EQ(KvFormatBits(KvFormat::kFp8E4M3), 8);
  EXPECT_EQ(KvFormatBits(KvFormat::kInt8), 8);
  EXPECT_EQ(KvFormatBits(KvFormat::kFp4E2M1), 4);
  EXPECT_EQ(KvFormatBits(KvFormat::kInt4), 4);
  EXPECT_FALSE(KvFormatScaled(KvFormat::kFp16));
  EXPECT_FALSE(KvFormatScaled(KvFormat::kBf16));
  EXPECT_TRUE(KvFormatScaled(KvFormat::kFp8E4M3));
  EXPECT_TRUE(KvFormatScaled(KvFormat::kInt4));
  // Llama-3-8B: 8 KV heads x 128 dims.
  EXPECT_EQ(KvRowBytes(KvFormat::kFp16, 8, 128, 0), 2048u);
  EXPECT_EQ(KvRowBytes(KvFormat::kBf16, 8, 128, 7), 2048u);  // block ignored
  EXPECT_EQ(KvRowBytes(KvFormat::kInt8, 8, 128, 128), 8u * 2 + 1024);
  EXPECT_EQ(KvRowBytes(KvFormat::kFp8E4M3, 8, 128, 32), 32u * 2 + 1024);
  EXPECT_EQ(KvRowBytes(KvFormat::kInt4, 8, 128, 32), 32u * 2 + 512);
  EXPECT_EQ(KvRowBytes(KvFormat::kFp4E2M1, 8, 128, 128), 8u * 2 + 512);
  EXPECT_EQ(KvRowBytes(KvFormat::kInt4, 1, 6, 3), 2u * 2 + 3);
}

TEST(Fp16, KnownEncodings) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(65504.f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65519.f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65520.f), 0x7c00);  // tie to even overflows to inf
  EXPECT_EQ(FloatToHalf(-kInf), 0xfc00);
  EXPECT_EQ(FloatToHalf(0x1p-24f), 0x0001);  // smallest subnormal
  EXPECT_EQ(FloatToHalf(0x1p-25f), 0x0000);  // tie to even: zero
  EXPECT_EQ(FloatToHalf(0x1.8p-24f), 0x0002);
  EXPECT_EQ(FloatToHalf(0x1p-14f), 0x0400);        // smallest normal
  EXPECT_EQ(FloatToHalf(1.f + 0x1p-11f), 0x3c00);  // tie, even is 1.0
  EXPECT_EQ(FloatToHalf(1.f + 0x3p-11f), 0x3c02);  // tie, even is up
  EXPECT_EQ(FloatToHalf(std::nextafter(1.f + 0x1p-11f, 2.f)), 0x3c01);
  EXPECT_EQ(HalfToFloat(0x3555), 0x1.554p-2f);
  // The row codec writes the same bits, little-endian.
  std::vector<float> x = {1.f, 65520.f, 0x1p-24f, 1.f + 0x3p-11f};
  auto bytes = Encode(KvFormat::kFp16, x, 1, 4, 0);
  EXPECT_EQ(bytes, (std::vector<uint8_t>{0x00, 0x3c, 0x00, 0x7c, 0x01, 0x00, 0x02, 0x3c}));
  auto back = Decode(KvFormat::kFp16, bytes, 1, 4, 0);
  EXPECT_EQ(back, (std::vector<float>{1.f, kInf, 0x1p-24f, 1.f + 0x1p-9f}));
}

// The row kernels use the inline EncodeHalf/DecodeHalf; the public
// FloatToHalf/HalfToFloat live in common/dtype.cc. They must agree.
TEST(Fp16, InlineConversionsMatchFloatToHalf) {
  for (uint64_t u = 0; u <= 0xffffffffu; u += 17) {
    const float f = FromBits(uint32_t(u));
    ASSERT_EQ(kv_internal::EncodeHalf(f), FloatToHalf(f)) << std::hex << u;
  }
  for (uint32_t h = 0; h < 0x7c00; ++h) {  // every finite half, its neighbours and midpoints
    const float lo = HalfToFloat(h), hi = HalfToFloat(h + 1), mid = (lo + hi) / 2;
    for (float f : {lo, mid, std::nextafter(mid, 0.f), std::nextafter(mid, kInf)}) {
      ASSERT_EQ(kv_internal::EncodeHalf(f), FloatToHalf(f)) << f;
      ASSERT_EQ(kv_internal::EncodeHalf(-f), FloatToHalf(-f)) << f;
    }
  }
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float a = kv_internal::DecodeHalf(h), b = HalfToFloat(h);
    if (std::isnan(b)) {
      // A NaN decodes quiet, payload and sign kept.
      ASSERT_EQ(Bits(a), Bits(b) | 0x400000u) << h;
    } else {
      ASSERT_EQ(Bits(a), Bits(b)) << h;
    }
  }
}

TEST(Bf16, KnownEncodingsAndTies) {
  EXPECT_EQ(kv_internal::EncodeBf16(1.0f), 0x3f80);
  EXPECT_EQ(kv_internal::EncodeBf16(FromBits(0x3f808000)), 0x3f80);  // tie, even is down
  EXPECT_EQ(kv_internal::EncodeBf16(FromBits(0x3f818000)), 0x3f82);  // tie, even is up
  EXPECT_EQ(kv_internal::EncodeBf16(FromBits(0x3f808001)), 0x3f81);
  EXPECT_EQ(kv_internal::EncodeBf16(kFltMax), 0x7f80);  // rounds up to inf
  EXPECT_EQ(kv_internal::EncodeBf16(-kInf), 0xff80);
  EXPECT_EQ(kv_internal::EncodeBf16(FromBits(1)), 0x0000);             // float subnormal
  const uint16_t nan = kv_internal::EncodeBf16(FromBits(0x7f800001));  // would round to inf
  EXPECT_TRUE(std::isnan(kv_internal::DecodeBf16(nan))) << std::hex << nan;
  EXPECT_EQ(kv_internal::DecodeBf16(0xc040), -3.0f);
  for (uint64_t u = 0; u <= 0xffffffffu; u += 4099) {  // against the checkpoint loader
    const float f = FromBits(uint32_t(u));
    ASSERT_EQ(kv_internal::EncodeBf16(f), FloatToBFloat16(f)) << std::hex << u;
  }
}

TEST(Fp8E4M3, AllCodesDecodeToOcpValuesAndReencode) {
  for (int c = 0; c < 256; ++c) {
    const float ref = Fp8Reference(uint8_t(c)), v = Fp8E4M3ToFloat(uint8_t(c));
    if (std::isnan(ref)) {
      EXPECT_TRUE(std::isnan(v)) << c;
      continue;
    }
    EXPECT_EQ(Bits(v), Bits(ref)) << c;  // -0.0 for 0x80
    EXPECT_EQ(FloatToFp8E4M3(v), c) << c;
  }
  EXPECT_EQ(Fp8E4M3ToFloat(0x7e), 448.f);
  EXPECT_EQ(Fp8E4M3ToFloat(0x01), 0x1p-9f);
  EXPECT_EQ(Fp8E4M3ToFloat(0x08), 0x1p-6f);
  EXPECT_EQ(Fp8E4M3ToFloat(0x38), 1.f);
  EXPECT_TRUE(std::isnan(Fp8E4M3ToFloat(0xff)));
}

TEST(Fp8E4M3, RoundsToNearestEvenAndSaturates) {
  for (int c = 0; c < 0x7e; ++c) {
    const float lo = Fp8Reference(c), hi = Fp8Reference(c + 1), mid = (lo + hi) / 2;
    const int even = c % 2 == 0 ? c : c + 1;
    EXPECT_EQ(FloatToFp8E4M3(mid), even) << c;
    EXPECT_EQ(FloatToFp8E4M3(-mid), even | 0x80) << c;
    EXPECT_EQ(FloatToFp8E4M3(std::nextafter(mid, 0.f)), c) << c;
    EXPECT_EQ(FloatToFp8E4M3(std::nextafter(mid, kInf)), c + 1) << c;
  }
  EXPECT_EQ(FloatToFp8E4M3(0x1p-10f), 0x00);   // half the smallest subnormal: tie to 0
  EXPECT_EQ(FloatToFp8E4M3(0x1.8p-9f), 0x02);  // 1.5 steps: tie to 2
  for (float big : {449.f, 464.f, 465.f, 480.f, 1e6f, kFltMax}) {
    EXPECT_EQ(FloatToFp8E4M3(big), 0x7e) << big;
    EXPECT_EQ(FloatToFp8E4M3(-big), 0xfe) << big;
  }
  EXPECT_EQ(FloatToFp8E4M3(kNaN), 0x7f);
  EXPECT_EQ(FloatToFp8E4M3(-kNaN), 0x7f);
  EXPECT_EQ(FloatToFp8E4M3(kInf), 0x7f);
  EXPECT_EQ(FloatToFp8E4M3(-kInf), 0xff);
  EXPECT_EQ(FloatToFp8E4M3(FromBits(1)), 0x00);
}

TEST(Fp4E2M1, AllCodes) {
  const float magnitudes[8] = {0.f, .5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  for (int c = 0; c < 16; ++c) {
    const float ref = c & 8 ? -magnitudes[c & 7] : magnitudes[c & 7];
    EXPECT_EQ(Bits(Fp4E2M1ToFloat(uint8_t(c))), Bits(ref)) << c;
    EXPECT_EQ(Fp4E2M1ToFloat(uint8_t(c | 0xf0)), ref) << c;  // high nibble ignored
    EXPECT_EQ(FloatToFp4E2M1(ref), c) << c;
  }
}

TEST(Fp4E2M1, RoundsToNearestEvenAndSaturates) {
  const float magnitudes[8] = {0.f, .5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  for (int c = 0; c < 7; ++c) {
    const float mid = (magnitudes[c] + magnitudes[c + 1]) / 2;
    const int even = c % 2 == 0 ? c : c + 1;
    EXPECT_EQ(FloatToFp4E2M1(mid), even) << mid;
    EXPECT_EQ(FloatToFp4E2M1(-mid), even | 8) << mid;
    EXPECT_EQ(FloatToFp4E2M1(std::nextafter(mid, 0.f)), c) << mid;
    EXPECT_EQ(FloatToFp4E2M1(std::nextafter(mid, kInf)), c + 1) << mid;
  }
  for (float big : {6.5f, 7.f, 8.f, 1e30f, kInf}) {
    EXPECT_EQ(FloatToFp4E2M1(big), 7) << big;
    EXPECT_EQ(FloatToFp4E2M1(-big), 15) << big;
  }
  EXPECT_EQ(FloatToFp4E2M1(kNaN), 0);
  EXPECT_EQ(FloatToFp4E2M1(-kNaN), 0);
  EXPECT_EQ(FloatToFp4E2M1(-0.f), 8);
}

std::vector<float> Gaussian(size_t n, uint32_t seed, float sigma = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Checks the scale of every block and the error of every value.
void CheckScaledRow(KvFormat f, const std::vector<float>& x, int heads, int dim, int block) {
  const float qmax = kv_internal::KvFormatQmax(f);
  const auto bytes = Encode(f, x, heads, dim, block);
  const auto y = Decode(f, bytes, heads, dim, block);
  const bool is_int = f == KvFormat::kInt8 || f == KvFormat::kInt4;
  for (size_t b = 0; b * block < x.size(); ++b) {
    double amax = 0;
    for (int i = 0; i < block; ++i) amax = std::max(amax, std::fabs(double(x[b * block + i])));
    const uint16_t h = Le16(bytes, 2 * b);
    const double scale = HalfToFloat(h);
    // Rounded up, and the smallest fp16 that is.
    EXPECT_GE(scale * qmax, amax) << "block " << b;
    if (h > 0) {
      EXPECT_LT(HalfToFloat(h - 1) * qmax, amax) << "block " << b;
    }
    for (int i = 0; i < block; ++i) {
      const size_t j = b * block + i;
      const double err = std::fabs(double(y[j]) - x[j]);
      // x / scale is one float division away from exact: allow its rounding.
      if (is_int) {
        EXPECT_LE(err, scale / 2 * (1 + 0x1p-20)) << j;
      } else {
        // fp8/fp4: half a step of the code's binade, relative to the scale.
        const double v = std::fabs(x[j]) / scale;
        const int mbits = f == KvFormat::kFp8E4M3 ? 3 : 1;
        const double min_exp = f == KvFormat::kFp8E4M3 ? -6 : 0;
        const double step =
            std::ldexp(1.0, int(std::max(min_exp, std::floor(std::log2(v)))) - mbits);
        EXPECT_LE(err, step / 2 * scale * (1 + 0x1p-16)) << j << " v=" << v;
      }
    }
  }
}

TEST(ScaledFormats, RandomRowsRoundTripWithinHalfAStep) {
  struct Case {
    KvFormat f;
    int heads, dim, block;
  };
  for (const Case& c : {Case{KvFormat::kInt8, 8, 128, 128}, Case{KvFormat::kInt8, 4, 64, 16},
                        Case{KvFormat::kInt4, 8, 128, 32}, Case{KvFormat::kInt4, 2, 6, 3},
                        Case{KvFormat::kFp8E4M3, 8, 128, 128}, Case{KvFormat::kFp8E4M3, 3, 40, 8},
                        Case{KvFormat::kFp4E2M1, 8, 128, 32}, Case{KvFormat::kFp4E2M1, 2, 2, 1}}) {
    for (uint32_t seed = 0; seed < 20; ++seed) {
      SCOPED_TRACE(testing::Message()
                   << "format " << int(c.f) << " block " << c.block << " seed " << seed);
      CheckScaledRow(c.f, Gaussian(size_t(c.heads) * c.dim, seed, std::ldexp(1.f, seed % 9 - 4)),
                     c.heads, c.dim, c.block);
    }
  }
}

TEST(ScaledFormats, ScaleRoundsUpToFp16) {
  // amax / 127 is exactly 1 + 2^-10, an fp16: that is the scale.
  std::vector<float> x(4, 0.f);
  x[1] = 127.f * (1.f + 0x1p-10f);
  auto bytes = Encode(KvFormat::kInt8, x, 1, 4, 4);
  EXPECT_EQ(Le16(bytes, 0), 0x3c01);
  EXPECT_EQ(bytes[2 + 1], 127);
  // Just above 127: the quotient 1.0000001 rounds *up*, to 1 + 2^-10.
  x[1] = std::nextafter(127.f, 200.f);
  bytes = Encode(KvFormat::kInt8, x, 1, 4, 4);
  EXPECT_EQ(Le16(bytes, 0), 0x3c01);
  // Exactly 127: scale 1, code 127; -127 likewise.
  x[1] = -127.f;
  bytes = Encode(KvFormat::kInt8, x, 1, 4, 4);
  EXPECT_EQ(Le16(bytes, 0), 0x3c00);
  EXPECT_EQ(int8_t(bytes[3]), -127);
  // Tiny blocks get the smallest subnormal scale.
  x[1] = 1e-30f;
  bytes = Encode(KvFormat::kInt4, x, 1, 4, 4);
  EXPECT_EQ(Le16(bytes, 0), 0x0001);
  // Every fp16 scale: amax = qmax * scale gives that scale, one float more
  // gives the next.
  for (int f : {2, 3, 4, 5}) {
    const float qmax = kv_internal::KvFormatQmax(KvFormat(f));
    for (uint32_t h = 1; h < 0x7c00; ++h) {
      const float amax = HalfToFloat(h) * qmax;
      EXPECT_EQ(kv_internal::ScaleForBlock(Bits(amax), qmax), h) << f << " " << h;
      EXPECT_EQ(kv_internal::ScaleForBlock(Bits(std::nextafter(amax, kInf)), qmax),
                h + 1 < 0x7c00 ? h + 1 : 0x7bff)
          << f << " " << h;
    }
  }
}

TEST(ScaledFormats, LayoutScalesFirstThenValues) {
  // Two blocks of 2: [127, -63.5] (scale 1), [0, 0] (scale 0). -63.5 ties to -64.
  std::vector<float> x = {127.f, -63.5f, 0.f, 0.f};
  auto bytes = Encode(KvFormat::kInt8, x, 1, 4, 2);
  EXPECT_EQ(bytes, (std::vector<uint8_t>{0x00, 0x3c, 0x00, 0x00, 127, 0xc0, 0, 0}));
  // fp8: block max 448 -> scale 1; codes of 448, 1, -0, -3.
  x = {448.f, 1.f, -0.f, -3.f};
  bytes = Encode(KvFormat::kFp8E4M3, x, 1, 4, 4);
  EXPECT_EQ(bytes, (std::vector<uint8_t>{0x00, 0x3c, 0x7e, 0x38, 0x80, 0xc4}));
}

TEST(ScaledFormats, NibbleOrderLowFirst) {
  // amax 7 -> int4 scale 1: codes 7, -7 (0x9), 1, -0.5 -> 0 (tie to even).
  auto bytes = Encode(KvFormat::kInt4, {7.f, -7.f, 1.f, -0.5f}, 1, 4, 4);
  EXPECT_EQ(bytes, (std::vector<uint8_t>{0x00, 0x3c, 0x97, 0x01}));
  EXPECT_EQ(Decode(KvFormat::kInt4, bytes, 1, 4, 4), (std::vector<float>{7.f, -7.f, 1.f, 0.f}));
  // amax 6 -> fp4 scale 1: codes 7, -0.5 (0x9), 1 (0x2), 0.
  bytes = Encode(KvFormat::kFp4E2M1, {6.f, -0.5f, 1.f, 0.f}, 1, 4, 4);
  EXPECT_EQ(bytes, (std::vector<uint8_t>{0x00, 0x3c, 0x97, 0x02}));
  // Odd blocks: a byte spans two blocks. Blocks [7, -7, 3.5] and [0, 14, 0]:
  // scales 1 and 2, codes 7, -7, 4 (3.5 ties to 4) | 0, 7, 0.
  bytes = Encode(KvFormat::kInt4, {7.f, -7.f, 3.5f, 0.f, 14.f, 0.f}, 1, 6, 3);
  EXPECT_EQ(bytes, (std::vector<uint8_t>{0x00, 0x3c, 0x00, 0x40, 0x97, 0x04, 0x07}));
  EXPECT_EQ(Decode(KvFormat::kInt4, bytes, 1, 6, 3),
            (std::vector<float>{7.f, -7.f, 4.f, 0.f, 14.f, 0.f}));
}

TEST(AllFormats, ZeroRowsDecodeToZero) {
  for (KvFormat f : kAllKvFormats) {
    std::vector<float> x(2 * 64, 0.f);
    x[3] = -0.f;
    auto bytes = Encode(f, x, 2, 64, 32);
    if (f != KvFormat::kFp8E4M3 && f != KvFormat::kFp4E2M1 && f != KvFormat::kFp16 &&
        f != KvFormat::kBf16) {
      for (uint8_t b : bytes) EXPECT_EQ(b, 0) << int(f);
    }
    if (KvFormatScaled(f)) {
      for (int i = 0; i < 2 * 4; ++i) EXPECT_EQ(bytes[i], 0) << int(f);  // scale 0
    }
    for (float y : Decode(f, bytes, 2, 64, 32)) EXPECT_EQ(y, 0.f) << int(f);
  }
}

TEST(AllFormats, NonFiniteInput) {
  // Unscaled: values stay what they are.
  std::vector<float> x = {kNaN, kInf, -kInf, 1.f};
  for (KvFormat f : {KvFormat::kFp16, KvFormat::kBf16}) {
    auto y = Decode(f, Encode(f, x, 1, 4, 0), 1, 4, 0);
    EXPECT_TRUE(std::isnan(y[0]));
    EXPECT_EQ(y[1], kInf);
    EXPECT_EQ(y[2], -kInf);
    EXPECT_EQ(y[3], 1.f);
  }
  // Scaled: four blocks of 8; NaN in block 0, +inf in 1, -inf in 2, block 3
  // finite. Only block 3 decodes to numbers.
  for (KvFormat f : {KvFormat::kFp8E4M3, KvFormat::kInt8, KvFormat::kFp4E2M1, KvFormat::kInt4}) {
    SCOPED_TRACE(int(f));
    std::vector<float> row = Gaussian(32, 7);
    row[3] = kNaN;
    row[8] = kInf;
    row[23] = -kInf;
    auto bytes = Encode(f, row, 2, 16, 8);
    EXPECT_EQ(Le16(bytes, 0), 0x7e00);
    EXPECT_EQ(Le16(bytes, 2), 0x7c00);
    EXPECT_EQ(Le16(bytes, 4), 0x7c00);
    EXPECT_LT(Le16(bytes, 6), 0x7c00);
    auto y = Decode(f, bytes, 2, 16, 8);
    for (int i = 0; i < 24; ++i) EXPECT_TRUE(std::isnan(y[i])) << i;
    for (int i = 24; i < 32; ++i) EXPECT_NEAR(y[i], row[i], std::fabs(row[i]) * 0.4 + 0.3) << i;
    // A foreign encoder's non-zero codes under an inf scale still give NaN.
    for (size_t i = 8; i < bytes.size(); ++i) bytes[i] = 0x11;
    y = Decode(f, bytes, 2, 16, 8);
    for (int i = 0; i < 24; ++i) EXPECT_TRUE(std::isnan(y[i])) << i;
  }
}

TEST(ScaledFormats, FiniteBlocksTooLargeForFp16ScalesSaturate) {
  for (KvFormat f : {KvFormat::kFp8E4M3, KvFormat::kInt8, KvFormat::kFp4E2M1, KvFormat::kInt4}) {
    const float qmax = kv_internal::KvFormatQmax(f);
    std::vector<float> x = {kFltMax, -1e30f, 1.f, 0.f};
    auto bytes = Encode(f, x, 1, 4, 4);
    EXPECT_EQ(Le16(bytes, 0), 0x7bff) << int(f);
    auto y = Decode(f, bytes, 1, 4, 4);
    EXPECT_EQ(y[0], 65504.f * qmax) << int(f);
    EXPECT_EQ(y[1], -65504.f * qmax) << int(f);
    EXPECT_EQ(y[2], 0.f) << int(f);
  }
}

// ---- AVX2 kernels against the scalar ones -------------------------------

// Values that stress conversions: ties, subnormals, extremes, any bits.
float Adversarial(std::mt19937& rng) {
  static const float kSpecial[] = {0.f,
                                   -0.f,
                                   1.f,
                                   65504.f,
                                   65520.f,
                                   65519.f,
                                   448.f,
                                   464.f,
                                   6.f,
                                   7.f,
                                   kFltMax,
                                   0x1p-24f,
                                   0x1p-25f,
                                   0x1p-14f,
                                   0x1p-126f,
                                   FromBits(1),
                                   kInf,
                                   kNaN,
                                   FromBits(0x7f800001)};
  const uint32_t r = rng();
  const float sign = r & 1 ? -1.f : 1.f;
  switch ((r >> 1) % 8) {
    case 0:
      return FromBits(rng());
    case 1:
      return FromBits(rng() & 0x807fffffu);  // float subnormal
    case 2: {                                // fp16 midpoint
      const uint16_t h = rng() % 0x7bff;
      return sign * (HalfToFloat(h) + HalfToFloat(h + 1)) / 2;
    }
    case 3:
      return FromBits((rng() & 0xffff0000u) | 0x8000u);  // bf16 tie
    case 4:
      return kSpecial[rng() % (sizeof kSpecial / sizeof *kSpecial)] * sign;
    case 5:
      return sign * std::ldexp(float(rng() % 4096) / 4096.f, int(rng() % 80) - 40);
    case 6:
      return sign * (float(rng() % 16) + 0.5f);  // integer ties
    default:
      return sign * std::ldexp(1.f + float(rng() % 16) / 16.f, int(rng() % 24) - 12);
  }
}

// A midpoint between two codes, in code units (x / scale).
float CodeTie(KvFormat f, std::mt19937& rng) {
  const float sign = rng() & 1 ? -1.f : 1.f;
  if (f == KvFormat::kInt8 || f == KvFormat::kInt4) {
    const int qmax = f == KvFormat::kInt8 ? 127 : 7;
    return sign * (float(rng() % qmax) + 0.5f);
  }
  if (f == KvFormat::kFp8E4M3) {
    const int c = rng() % 0x7e;
    return sign * (Fp8E4M3ToFloat(c) + Fp8E4M3ToFloat(c + 1)) / 2;
  }
  const int c = rng() % 7;
  return sign * (Fp4E2M1ToFloat(c) + Fp4E2M1ToFloat(c + 1)) / 2;
}

std::vector<float> StressRow(KvFormat f, size_t n, int block, std::mt19937& rng) {
  std::vector<float> x(n);
  switch (rng() % 4) {
    case 0:  // anything, non-finite included
      for (float& v : x) v = Adversarial(rng);
      break;
    case 1: {  // finite values
      for (float& v : x) {
        do v = Adversarial(rng);
        while (!std::isfinite(v));
      }
      break;
    }
    case 2: {  // exact ties under an exact fp16 scale
      if (!KvFormatScaled(f)) {
        for (float& v : x) v = Adversarial(rng);
        break;
      }
      const float qmax = kv_internal::KvFormatQmax(f);
      for (size_t b = 0; b * block < n; ++b) {
        const float scale = HalfToFloat(1 + rng() % 0x7000);
        for (int i = 0; i < block; ++i) x[b * block + i] = CodeTie(f, rng) * scale;
        x[b * block + rng() % block] = (rng() & 1 ? qmax : -qmax) * scale;
      }
      break;
    }
    default:
      for (float& v : x) v = std::ldexp(float(int(rng() % 20001) - 10000), -int(rng() % 40));
  }
  return x;
}

TEST(Avx2Kernels, BitIdenticalToScalar) {
  const kv_internal::KvKernels* avx2 = kv_internal::Avx2KvKernels();
  if (avx2 == nullptr) GTEST_SKIP() << "this CPU has no AVX2+F16C";
  const kv_internal::KvKernels& scalar = kv_internal::ScalarKvKernels();
  EXPECT_EQ(&kv_internal::ActiveKvKernels(), avx2);
  struct Shape {
    int heads, dim, block;
  };
  const Shape shapes[] = {{8, 128, 128}, {8, 128, 32}, {2, 64, 16}, {3, 40, 8},   {1, 6, 3},
                          {1, 2, 1},     {2, 50, 2},   {1, 96, 96}, {4, 256, 64}, {1, 70, 14}};
  std::mt19937 rng(2024);
  for (KvFormat f : kAllKvFormats) {
    for (const Shape& s : shapes) {
      if (KvFormatBits(f) == 4 && s.dim % 2 != 0) continue;
      const size_t n = size_t(s.heads) * s.dim, bytes = KvRowBytes(f, s.heads, s.dim, s.block);
      for (int trial = 0; trial < 150; ++trial) {
        SCOPED_TRACE(testing::Message() << "format " << int(f) << " shape " << s.heads << "x"
                                        << s.dim << "/" << s.block << " trial " << trial);
        const std::vector<float> x = StressRow(f, n, s.block, rng);
        std::vector<uint8_t> a(bytes), b(bytes);
        kv_internal::EncodeKvRowWith(*avx2, f, x.data(), s.heads, s.dim, s.block, a.data());
        kv_internal::EncodeKvRowWith(scalar, f, x.data(), s.heads, s.dim, s.block, b.data());
        ASSERT_EQ(a, b);
        // Decode both our encodings and random bytes (any scale, any code).
        std::vector<uint8_t> noise(bytes);
        for (uint8_t& v : noise) v = uint8_t(rng());
        for (const auto* in : {&a, &noise}) {
          std::vector<float> ya(n), yb(n);
          kv_internal::DecodeKvRowWith(*avx2, f, in->data(), s.heads, s.dim, s.block, ya.data());
          kv_internal::DecodeKvRowWith(scalar, f, in->data(), s.heads, s.dim, s.block, yb.data());
          ASSERT_EQ(std::memcmp(ya.data(), yb.data(), n * sizeof(float)), 0);
        }
      }
    }
  }
}

// ---- The backend ops -----------------------------------------------------

TEST(CpuBackendKvOps, EncodeAndDecodeScatteredSlots) {
  auto cpu = NewCpuBackend();
  ProfilingBackend be(cpu.get());
  const int heads = 2, dim = 16, num_slots = 12;
  const size_t row = size_t(heads) * dim;
  const std::vector<int32_t> slots = {5, 0, 11, 7};
  // Two arrays (one layer's K and V), array_floats apart, as in a pool.
  const int arrays = 2;
  const size_t array_floats = num_slots * row + 3;
  std::vector<float> cache = Gaussian(arrays * array_floats, 3);
  for (KvFormat f : kAllKvFormats) {
    SCOPED_TRACE(int(f));
    const int block = 8;
    const size_t row_bytes = KvRowBytes(f, heads, dim, block);
    const size_t stride = arrays * row_bytes + 5;
    std::vector<uint8_t> wire(slots.size() * stride, 0xab);
    be.EncodeKv(f, block, KvArrays{cache.data(), arrays, array_floats, heads, dim}, slots.data(),
                int(slots.size()), wire.data(), stride);
    for (size_t t = 0; t < slots.size(); ++t) {
      for (int a = 0; a < arrays; ++a) {
        auto from = cache.begin() + a * array_floats + slots[t] * row;
        const auto expect = Encode(f, std::vector<float>(from, from + row), heads, dim, block);
        auto at = wire.begin() + t * stride + a * row_bytes;
        EXPECT_EQ(std::vector<uint8_t>(at, at + row_bytes), expect) << t << " array " << a;
      }
      for (size_t i = arrays * row_bytes; i < stride; ++i) EXPECT_EQ(wire[t * stride + i], 0xab);
    }
    std::vector<float> dst(arrays * array_floats, -99.f);
    be.DecodeKv(f, block, wire.data(), stride, slots.data(), int(slots.size()),
                KvArrays{dst.data(), arrays, array_floats, heads, dim});
    for (int a = 0; a < arrays; ++a) {
      for (int slot = 0; slot < num_slots; ++slot) {
        size_t t = 0;
        while (t < slots.size() && slots[t] != slot) ++t;
        for (size_t i = 0; i < row; ++i) {
          const size_t at = a * array_floats + slot * row + i;
          if (t == slots.size()) {
            ASSERT_EQ(dst[at], -99.f) << "slot " << slot << " was not decoded into";
          } else {
            auto enc = wire.begin() + t * stride + a * row_bytes;
            const auto expect =
                Decode(f, std::vector<uint8_t>(enc, enc + row_bytes), heads, dim, block);
            ASSERT_EQ(dst[at], expect[i]) << "slot " << slot << " array " << a;
            ASSERT_NEAR(dst[at], cache[at], 0.7) << "slot " << slot;
          }
        }
      }
    }
  }
  EXPECT_EQ(be.seconds().count("EncodeKv"), 1u);
  EXPECT_EQ(be.seconds().count("DecodeKv"), 1u);
}

}  // namespace
}  // namespace kvcast
