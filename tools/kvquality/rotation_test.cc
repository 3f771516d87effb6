#include "tools/kvquality/rotation.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace kvcast::kvquality {
namespace {

TEST(RotateHeads, IsOrthogonalPerHead) {
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
  std::vector<double> dots;
  for (int h = 0; h < heads; ++h) dots.push_back(dot(x, y, h));
  std::vector<float> rx = x, ry = y;
  RotateHeads(rx.data(), d * heads, d, false);
  RotateHeads(ry.data(), d * heads, d, false);
  float rx_max = 0;
  for (int h = 0; h < heads; ++h) EXPECT_NEAR(dot(rx, ry, h), dots[h], 1e-3) << h;
  for (int i = 0; i < d; ++i) rx_max = std::max(rx_max, std::fabs(rx[i]));
  EXPECT_LT(rx_max, 10.f);  // the outlier spread over head 0
  EXPECT_NE(rx[0], x[0]);
  RotateHeads(rx.data(), d * heads, d, true);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(rx[i], x[i], 1e-5) << i;
}

TEST(RotatableHeadDim, PowersOfTwo) {
  EXPECT_TRUE(RotatableHeadDim(64));
  EXPECT_TRUE(RotatableHeadDim(128));
  EXPECT_FALSE(RotatableHeadDim(80));
  EXPECT_FALSE(RotatableHeadDim(1));
}

}  // namespace
}  // namespace kvcast::kvquality
