#include "common/dtype.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "gtest/gtest.h"

namespace kvcast {
namespace {

TEST(DType, SizesAndNames) {
  EXPECT_EQ(DTypeSize(DType::kF32), 4u);
  EXPECT_EQ(DTypeSize(DType::kF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16}) {
    EXPECT_EQ(DTypeFromName(DTypeName(d)), d);
  }
  EXPECT_FALSE(DTypeFromName("I64").has_value());
  EXPECT_FALSE(DTypeFromName("f32").has_value());
}

TEST(Half, EveryBitPatternRoundTrips) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    const uint32_t exponent = (h >> 10) & 0x1f;
    if (exponent == 31 && (h & 0x3ff) != 0) {
      EXPECT_TRUE(std::isnan(f)) << h;
      EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(f)))) << h;
    } else {
      EXPECT_EQ(FloatToHalf(f), h) << h;
    }
  }
}

TEST(Half, KnownValues) {
  EXPECT_EQ(HalfToFloat(0x3c00), 1.0f);
  EXPECT_EQ(HalfToFloat(0xc000), -2.0f);
  EXPECT_EQ(HalfToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);
  EXPECT_EQ(FloatToHalf(1e30f), 0x7c00);
  EXPECT_EQ(FloatToHalf(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);  // Tie to even (zero).
  EXPECT_EQ(FloatToHalf(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(FloatToHalf(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 units: tie to 2.
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(1e-30f), 0x0000);
}

// Between every two adjacent finite positive halves, the midpoint must round
// to the even one and anything a float ulp away to the nearer one.
TEST(Half, MidpointsRoundToNearestEven) {
  for (uint16_t h = 0; h < 0x7bff; ++h) {
    const float lo = HalfToFloat(h);
    const float hi = HalfToFloat(h + 1);
    const float mid = lo + (hi - lo) / 2;  // Exact: needs 12 significand bits.
    const uint16_t even = (h & 1) ? h + 1 : h;
    EXPECT_EQ(FloatToHalf(mid), even) << h;
    EXPECT_EQ(FloatToHalf(std::nextafter(mid, 0.0f)), h) << h;
    EXPECT_EQ(FloatToHalf(std::nextafter(mid, 1e9f)), h + 1) << h;
    EXPECT_EQ(FloatToHalf(-mid), even | 0x8000) << h;
  }
}

TEST(BFloat16, EveryBitPatternRoundTrips) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const float f = BFloat16ToFloat(static_cast<uint16_t>(b));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(f)))) << b;
    } else {
      EXPECT_EQ(FloatToBFloat16(f), b) << b;
    }
  }
}

TEST(BFloat16, RoundsToNearestEven) {
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3f80);
  // 1 + 2^-8 is halfway between 0x3f80 and 0x3f81: ties to 0x3f80.
  EXPECT_EQ(FloatToBFloat16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  // 1 + 3*2^-8 is halfway between 0x3f81 and 0x3f82: ties to 0x3f82.
  EXPECT_EQ(FloatToBFloat16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_EQ(FloatToBFloat16(std::nextafter(1.0f + std::ldexp(1.0f, -8), 2.0f)), 0x3f81);
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::max()), 0x7f80);  // Rounds up to inf.
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(FloatToBFloat16(std::ldexp(1.0f, -130)), 0x0008);  // Subnormal kept.
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(std::nanf("")))));
  // A NaN whose payload lives only in the low bits must not become infinity.
  uint32_t low_nan_bits = 0x7f800001u;
  float low_nan;
  std::memcpy(&low_nan, &low_nan_bits, 4);
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(low_nan))));
}

}  // namespace
}  // namespace kvcast
