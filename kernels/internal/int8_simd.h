// Internal to the int8 dot kernels (q8_kernels_avx2.cc, q4_kernels_avx.cc):
// the target attributes of their x86 code paths (each function carries its
// own, so one binary runs on any x86-64 and cpu_features.h picks the path)
// and the 4-byte activation load they broadcast.
#ifndef KVCAST_KERNELS_INTERNAL_INT8_SIMD_H_
#define KVCAST_KERNELS_INTERNAL_INT8_SIMD_H_

#include <cstdint>
#include <cstring>

#define KVCAST_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define KVCAST_TARGET_VNNI __attribute__((target("avx2,fma,f16c,avxvnni")))
#define KVCAST_TARGET_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

namespace kvcast::int8_simd {

// Four activation bytes as one int32, to broadcast to every lane.
inline int32_t Load4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace kvcast::int8_simd

#endif  // KVCAST_KERNELS_INTERNAL_INT8_SIMD_H_
