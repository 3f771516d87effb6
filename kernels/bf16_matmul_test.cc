#include "kernels/bf16_matmul.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/dtype.h"
#include "gtest/gtest.h"

namespace kvcast {
namespace {

TEST(Bf16MatmulTest, KernelsBitIdenticalBatchInvariantAndExact) {
  const int m = 6;
  const int64_t k = 208, n = 37;  // 13 groups of 16
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0, 1);
  std::vector<float> x(m * k), wf(n * k);
  std::vector<uint16_t> w(n * k);
  for (float& v : x) v = d(rng);
  for (int64_t i = 0; i < n * k; ++i) {
    w[i] = FloatToBFloat16(d(rng));
    wf[i] = BFloat16ToFloat(w[i]);
  }
  const bf16_internal::Bf16Kernel* kernels[3];
  const int count = bf16_internal::AvailableBf16Kernels(kernels, 3);
  ASSERT_GE(count, 1);
  EXPECT_STREQ(kernels[0]->name, "scalar");
  std::vector<float> want(m * n);
  kernels[0]->dot(x.data(), 1, w.data(), n, k, want.data(), n);  // row 0 alone
  for (int r = 1; r < m; ++r) kernels[0]->dot(x.data() + r * k, 1, w.data(), n, k, want.data() + r * n, n);
  for (int i = 0; i < count; ++i) {
    for (int rows : {1, 3, 4}) {
      std::vector<float> got(m * n);
      for (int r = 0; r < m; r += rows) {
        kernels[i]->dot(x.data() + r * k, std::min(rows, m - r), w.data(), n, k,
                        got.data() + r * n, n);
      }
      ASSERT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * 4))
          << kernels[i]->name << " rows " << rows;
    }
  }
  std::vector<float> y(m * n);
  Bf16Linear(x.data(), m, k, w.data(), n, y.data());
  EXPECT_EQ(0, std::memcmp(y.data(), want.data(), want.size() * 4));
  // The weights are exact: only float rounding of the sums differs from a
  // double-precision product.
  for (int r = 0; r < m; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t e = 0; e < k; ++e) s += double(x[r * k + e]) * wf[j * k + e];
      ASSERT_NEAR(y[r * n + j], s, 1e-4 * (1 + std::fabs(s)));
    }
  }
  EXPECT_FALSE(Bf16KernelName().empty());
}

}  // namespace
}  // namespace kvcast
