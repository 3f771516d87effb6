// CpuHas under each KVCAST_CPU_ISA the BUILD file runs this test with: the
// cap removes every instruction set above it and none at or below it.
#include "kernels/cpu_features.h"

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace kvcast {
namespace {

TEST(CpuFeaturesTest, TheCapLimitsWhatTheCpuHas) {
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("f16c");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  const bool vnni = avx2 && __builtin_cpu_supports("avxvnni");
  const char* env = std::getenv("KVCAST_CPU_ISA");
  const std::string cap = env != nullptr ? env : "";
  // An unknown name is ignored (and said on stderr).
  const int level = cap == "scalar" ? 0 : cap == "avx2" ? 1 : cap == "avx-vnni" ? 2
                  : cap == "avx512" ? 3 : 4;
  EXPECT_EQ(CpuHas(CpuIsa::kAvx2), avx2 && level >= 1) << cap;
  EXPECT_EQ(CpuHas(CpuIsa::kAvxVnni), vnni && level >= 2) << cap;
  EXPECT_EQ(CpuHas(CpuIsa::kAvx512), avx512 && level >= 3) << cap;
  EXPECT_EQ(CpuHas(CpuIsa::kAvx512Vnni),
            avx512 && __builtin_cpu_supports("avx512vnni") && level >= 3)
      << cap;
  if (level < 4) EXPECT_FALSE(CpuHas(CpuIsa::kAmx)) << cap;
}

}  // namespace
}  // namespace kvcast
