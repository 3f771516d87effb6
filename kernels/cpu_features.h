// The SIMD instruction sets the CPU kernels may use: what this CPU has,
// capped by KVCAST_CPU_ISA in the environment, so the kernels a CPU without
// AVX-512 (or without AVX2) would run can be measured and served on one that
// has it: KVCAST_CPU_ISA=scalar | avx2 | avx-vnni | avx512 | amx (levels in
// that order; unset or empty: no cap). AMX is also off with KVCAST_Q8_AMX=0.
// Read once, at first use. Thread safety: safe from any thread.
#ifndef KVCAST_KERNELS_CPU_FEATURES_H_
#define KVCAST_KERNELS_CPU_FEATURES_H_

namespace kvcast {

enum class CpuIsa {
  kAvx2,        // AVX2 with FMA and F16C
  kAvxVnni,     // AVX2 + AVX-VNNI (256-bit VPDPBUSD)
  kAvx512,      // AVX-512 F, BW, VL (with AVX2)
  kAvx512Vnni,  // kAvx512 + AVX-512 VNNI
  kAmx,         // AMX tiles and int8 (the kernel must also grant them)
};

// Whether the kernels may use `isa`: the CPU has it and the cap allows it.
bool CpuHas(CpuIsa isa);

}  // namespace kvcast

#endif  // KVCAST_KERNELS_CPU_FEATURES_H_
