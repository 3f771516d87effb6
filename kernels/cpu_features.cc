#include "kernels/cpu_features.h"

#include <array>
#include <cstdio>
#include <iterator>
#include <cstdlib>
#include <cstring>

namespace kvcast {
namespace {

int Level(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx2: return 1;
    case CpuIsa::kAvxVnni: return 2;
    case CpuIsa::kAvx512:
    case CpuIsa::kAvx512Vnni: return 3;
    case CpuIsa::kAmx: return 4;
  }
  return 4;
}

int Cap() {
  const char* v = std::getenv("KVCAST_CPU_ISA");
  if (v == nullptr || *v == '\0') return 4;
  static const char* const kNames[] = {"scalar", "avx2", "avx-vnni", "avx512", "amx"};
  for (int i = 0; i < 5; ++i) {
    if (std::strcmp(v, kNames[i]) == 0) return i;
  }
  std::fprintf(stderr, "KVCAST_CPU_ISA=%s is not scalar, avx2, avx-vnni, avx512 or amx: ignored\n",
               v);
  return 4;
}

bool Hardware(CpuIsa isa) {
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("f16c");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  switch (isa) {
    case CpuIsa::kAvx2: return avx2;
    case CpuIsa::kAvxVnni: return avx2 && __builtin_cpu_supports("avxvnni");
    case CpuIsa::kAvx512: return avx512;
    case CpuIsa::kAvx512Vnni: return avx512 && __builtin_cpu_supports("avx512vnni");
    case CpuIsa::kAmx: {
      const char* env = std::getenv("KVCAST_Q8_AMX");
      return avx512 && __builtin_cpu_supports("avx512vnni") &&
             (env == nullptr || std::strcmp(env, "0") != 0);
    }
  }
  return false;
}

}  // namespace

bool CpuHas(CpuIsa isa) {
  // Answered once per ISA: kernels ask on every call (attention, SwiGLU).
  static const auto has = [] {
    constexpr CpuIsa kAll[] = {CpuIsa::kAvx2, CpuIsa::kAvxVnni, CpuIsa::kAvx512,
                               CpuIsa::kAvx512Vnni, CpuIsa::kAmx};
    const int cap = Cap();
    std::array<bool, std::size(kAll)> out{};
    for (CpuIsa i : kAll) out[size_t(i)] = Level(i) <= cap && Hardware(i);
    return out;
  }();
  return has[size_t(isa)];
}

}  // namespace kvcast
