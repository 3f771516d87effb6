#include "kernels/cpu/swiglu.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace kvcast {
namespace {

// silu(g) * u in double, straight from the definition.
double Want(double g, double u) { return g / (1.0 + std::exp(-g)) * u; }

TEST(SwiGluTest, EqualsTheDefinitionWithin1e6) {
  const int rows = 37, dim = 77;  // vector bodies and scalar tails
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0.0f, 4.0f);
  std::vector<float> gate_up(size_t(rows) * 2 * dim);
  for (float& x : gate_up) x = d(rng);
  const float extremes[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 88.0f, -88.0f, 200.0f, -200.0f,
                            1e4f, -1e4f, 20.0f, -20.0f, 1e-3f, -1e-3f, 0.5f, -0.5f, 3.0f};
  for (int i = 0; i < int(std::size(extremes)); ++i) {
    gate_up[i] = extremes[i];                        // row 0's gate, vector body
    gate_up[2 * dim + dim - 1 - i] = extremes[i];    // row 1's gate, tail
  }
  for (int threads : {0, 1}) {
    std::vector<float> out(size_t(rows) * dim, -1.0f);
    if (threads == 0) {
      CpuSwiGlu(gate_up.data(), rows, dim, out.data());
    } else {
      CpuSwiGluScalar(gate_up.data(), rows, dim, out.data());
    }
    for (int r = 0; r < rows; ++r) {
      for (int i = 0; i < dim; ++i) {
        const double g = gate_up[size_t(r) * 2 * dim + i], u = gate_up[size_t(r) * 2 * dim + dim + i];
        const double want = Want(g, u), got = out[size_t(r) * dim + i];
        ASSERT_LE(std::fabs(got - want), 1e-6 * std::fabs(want) + 1e-30)
            << (threads == 0 ? "CpuSwiGlu" : "scalar") << " row " << r << " i " << i << " g " << g;
      }
    }
  }
}

}  // namespace
}  // namespace kvcast
