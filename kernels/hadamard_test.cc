#include "kernels/hadamard.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace kvcast {
namespace {

// Orthogonal up to the factor d: dot products scale by d, an outlier
// channel spreads over the head, and the inverse gives the values back.
TEST(Hadamard, RotatesHeadsAndBack) {
  std::mt19937 rng(3);
  std::normal_distribution<float> n;
  const int d = 64, heads = 3;
  std::vector<float> x(d * heads), y(d * heads);
  for (float& v : x) v = n(rng);
  for (float& v : y) v = n(rng);
  x[5] = 40.f;  // an outlier channel
  auto dot = [&](const std::vector<float>& a, const std::vector<float>& b, int h) {
    double s = 0;
    for (int i = 0; i < d; ++i) s += double(a[h * d + i]) * b[h * d + i];
    return s;
  };
  std::vector<float> rx = x, ry = y;
  RotateHeads(rx.data(), d * heads, d, false);
  RotateHeads(ry.data(), d * heads, d, false);
  for (int h = 0; h < heads; ++h) EXPECT_NEAR(dot(rx, ry, h), d * dot(x, y, h), 0.1) << h;
  float rx_max = 0;
  for (int i = 0; i < d; ++i) rx_max = std::max(rx_max, std::fabs(rx[i]));
  EXPECT_LT(rx_max, 0.3f * 40 * 8);  // the outlier's 40 x sqrt(d) spread, not kept in one channel
  RotateHeads(rx.data(), d * heads, d, true);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(rx[i], x[i], 1e-5) << i;
}

// The definition's butterflies and signs, computed the slow way: H_{jk} =
// (-1)^popcount(j & k).
TEST(Hadamard, MatchesTheMatrix) {
  const int d = 16;
  std::vector<float> x(d);
  for (int i = 0; i < d; ++i) x[i] = float(i * i % 7) - 3.f;
  std::vector<float> y = x;
  RotateHead(y.data(), d);
  for (int j = 0; j < d; ++j) {
    float want = 0;
    for (int k = 0; k < d; ++k) {
      want += (__builtin_popcount(j & k) % 2 ? -1.f : 1.f) * HadamardSign(k) * x[k];
    }
    EXPECT_EQ(y[j], want) << j;  // small integers: exact
  }
  int negative = 0;
  for (int c = 0; c < 1024; ++c) negative += HadamardSign(c) < 0;
  EXPECT_GT(negative, 450);
  EXPECT_LT(negative, 574);
  // The definition's signs of channels 0..15 (Python's integers agree).
  const float first[16] = {-1.f, -1.f, 1.f,  -1.f, 1.f,  1.f,  1.f, -1.f,
                           1.f,  1.f,  1.f,  -1.f, -1.f, -1.f, 1.f, -1.f};
  for (int c = 0; c < 16; ++c) EXPECT_EQ(HadamardSign(c), first[c]) << c;
}

// Every path (the AVX2 one from 8 values on) gives the floats of the
// definition's butterflies, computed here one pair at a time, for random
// values of mixed magnitudes (where rounding would show a change of
// order), both ways.
TEST(Hadamard, BitExactWithTheDefinition) {
  std::mt19937 rng(9);
  for (int d : {2, 4, 8, 16, 32, 64, 128, 256}) {
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<float> x(d);
      for (float& v : x) v = std::ldexp(float(rng() % 2000) - 1000.f, int(rng() % 40) - 20);
      std::vector<float> want = x;
      for (int c = 0; c < d; ++c) want[c] *= HadamardSign(c);
      for (int h = 1; h < d; h *= 2) {
        for (int i = 0; i < d; i += 2 * h) {
          for (int j = i; j < i + h; ++j) {
            const float a = want[j], b = want[j + h];
            want[j] = a + b;
            want[j + h] = a - b;
          }
        }
      }
      std::vector<float> got = x;
      RotateHead(got.data(), d);
      ASSERT_EQ(0, std::memcmp(got.data(), want.data(), d * sizeof(float))) << d;
      // The inverse: butterflies again, then sign and 1/d.
      std::vector<float> back = want;
      for (int h = 1; h < d; h *= 2) {
        for (int i = 0; i < d; i += 2 * h) {
          for (int j = i; j < i + h; ++j) {
            const float a = back[j], b = back[j + h];
            back[j] = a + b;
            back[j + h] = a - b;
          }
        }
      }
      for (int c = 0; c < d; ++c) back[c] = back[c] * HadamardSign(c) * (1.f / float(d));
      UnrotateHead(got.data(), d);
      ASSERT_EQ(0, std::memcmp(got.data(), back.data(), d * sizeof(float))) << d;
    }
  }
}

TEST(Hadamard, Dims) {
  EXPECT_TRUE(HadamardDim(64));
  EXPECT_TRUE(HadamardDim(128));
  EXPECT_FALSE(HadamardDim(80));
  EXPECT_FALSE(HadamardDim(1));
  EXPECT_FALSE(HadamardDim(2048));
}

}  // namespace
}  // namespace kvcast
