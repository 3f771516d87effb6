// The SIMD decoder kernels (AVX2, AVX-512) against the scalar ones where they are not
// covered by whole groups (ac_codec_test compares decoded groups).
#include "transport/kvcache/ac/internal/unit_kernels.h"

#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace kvcast::kvcache::ac::internal {
namespace {

// Frequencies summing to kProbScale over nsym symbols, some of them 0;
// `kind` picks a shape: near uniform, one dominant symbol, all on the last.
std::vector<uint16_t> RandomFrequencies(std::mt19937& rng, int nsym, int kind) {
  std::vector<uint16_t> f(nsym, 0);
  if (kind == 2) {
    f[nsym - 1] = kProbScale;
    return f;
  }
  uint32_t left = kProbScale;
  for (int s = 0; s < nsym && left > 0; ++s) {
    if (rng() % 5 == 0) continue;  // an unused symbol
    const uint32_t cap = kind == 0 ? 2 * kProbScale / nsym + 1 : 40;
    f[s] = uint16_t(std::min<uint32_t>(left, 1 + rng() % cap));
    left -= f[s];
  }
  f[rng() % nsym] += uint16_t(left);
  return f;
}

class UnitKernels : public testing::TestWithParam<KernelSet> {};
INSTANTIATE_TEST_SUITE_P(Sets, UnitKernels, testing::Values(KernelSet::kAvx2, KernelSet::kAvx512),
                         [](const auto& info) { return std::string(KernelSetName(info.param)); });

TEST_P(UnitKernels, SimdTableBuildEqualsScalar) {
  if (!KernelSetAvailable(GetParam())) GTEST_SKIP() << "no " << KernelSetName(GetParam()) << " here";
  CapKernelSet(KernelSet::kScalar);
  const BuildTableFn scalar = SelectBuildTable();
  CapKernelSet(GetParam());
  const BuildTableFn simd = SelectBuildTable();
  CapKernelSet(KernelSet::kAvx512);
  std::mt19937 rng(3);
  for (int trial = 0; trial < 3000; ++trial) {
    const int nsym = 1 + rng() % kMaxSymbols;
    const auto f = RandomFrequencies(rng, nsym, trial % 3);
    ASSERT_TRUE(ValidFrequencies(f));
    // Guards on both sides: neither kernel writes outside its table.
    std::vector<uint32_t> a(kProbScale + 32, 0xdeadbeef), b(kProbScale + 32, 0xdeadbeef);
    scalar(f.data(), nsym, a.data() + 16);
    simd(f.data(), nsym, b.data() + 16);
    ASSERT_EQ(a, b) << "trial " << trial;
    for (int i = 0; i < 16; ++i) {
      ASSERT_EQ(b[i], 0xdeadbeef);
      ASSERT_EQ(b[kProbScale + 16 + i], 0xdeadbeef);
    }
  }
}

}  // namespace
}  // namespace kvcast::kvcache::ac::internal
