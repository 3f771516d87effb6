// AVX2 and AVX-VNNI versions of the Q8 dot kernels (q8_kernels.h): the same
// arithmetic as the scalar reference, eight float lanes, one FMA per block.
#include <immintrin.h>

#include "kernels/internal/q8_kernels.h"

namespace kvcast {
namespace q8_internal {
namespace {

#define KVCAST_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define KVCAST_TARGET_VNNI __attribute__((target("avx2,fma,avxvnni")))

// Lane j of the result: the products of values 4j..4j+3 of x and w, exact.
KVCAST_TARGET_AVX2 inline __m256i BlockDotAvx2(__m256i x, __m256i w) {
  const __m256i ax = _mm256_sign_epi8(x, x);  // |x|, as unsigned bytes
  const __m256i sw = _mm256_sign_epi8(w, x);  // w with x's sign
  // |x| * |w| <= 127 * 127, so the pair sums fit int16 without saturation.
  const __m256i pairs = _mm256_maddubs_epi16(ax, sw);
  return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
}

KVCAST_TARGET_VNNI inline __m256i BlockDotVnni(__m256i x, __m256i w) {
  const __m256i ax = _mm256_sign_epi8(x, x);
  const __m256i sw = _mm256_sign_epi8(w, x);
  return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), ax, sw);
}


// R activation rows against weight rows [0, n); one weight block load
// serves all R rows.
#define KVCAST_DEFINE_DOT(NAME, TARGET, BLOCK_DOT)                                           \
  template <int R>                                                                           \
  TARGET void NAME##Rows(const int8_t* xq, const float* xs, const int8_t* wq, const float* ws, \
                         int64_t n, int64_t blocks, float* out, int64_t out_stride) {        \
    for (int64_t j = 0; j < n; ++j) {                                                        \
      __m256 acc[2][R]; /* even blocks, odd blocks */                                        \
      for (int r = 0; r < R; ++r) acc[0][r] = acc[1][r] = _mm256_setzero_ps();               \
      const int8_t* wrow = wq + j * blocks * 32;                                             \
      const float* wsrow = ws + j * blocks;                                                  \
      for (int64_t b = 0; b < blocks; ++b) {                                                 \
        const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wrow + b * 32)); \
        for (int r = 0; r < R; ++r) {                                                        \
          const __m256i x = _mm256_loadu_si256(                                              \
              reinterpret_cast<const __m256i*>(xq + (r * blocks + b) * 32));                 \
          const __m256 s = _mm256_set1_ps(xs[r * blocks + b] * wsrow[b]);                    \
          acc[b & 1][r] =                                                                    \
              _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(BLOCK_DOT(x, w)), acc[b & 1][r]);        \
        }                                                                                    \
      }                                                                                      \
      for (int r = 0; r < R; ++r) {                                                          \
        alignas(32) float lanes[8];                                                          \
        _mm256_store_ps(lanes, _mm256_add_ps(acc[0][r], acc[1][r]));                         \
        out[r * out_stride + j] = SumLanes(lanes);                                           \
      }                                                                                      \
    }                                                                                        \
  }                                                                                          \
  TARGET void NAME(const int8_t* xq, const float* xs, int rows, const int8_t* wq,            \
                   const float* ws, int64_t n, int64_t blocks, float* out,                   \
                   int64_t out_stride) {                                                     \
    switch (rows) {                                                                          \
      case 1: return NAME##Rows<1>(xq, xs, wq, ws, n, blocks, out, out_stride);              \
      case 2: return NAME##Rows<2>(xq, xs, wq, ws, n, blocks, out, out_stride);              \
      case 3: return NAME##Rows<3>(xq, xs, wq, ws, n, blocks, out, out_stride);              \
      default: return NAME##Rows<4>(xq, xs, wq, ws, n, blocks, out, out_stride);             \
    }                                                                                        \
  }

KVCAST_DEFINE_DOT(DotAvx2, KVCAST_TARGET_AVX2, BlockDotAvx2)
KVCAST_DEFINE_DOT(DotVnni, KVCAST_TARGET_VNNI, BlockDotVnni)

}  // namespace

const Q8Kernels* Avx2Q8Kernels() {
  static const Q8Kernels kernels{"avx2", &DotAvx2};
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? &kernels : nullptr;
}

const Q8Kernels* AvxVnniQ8Kernels() {
  static const Q8Kernels kernels{"avx-vnni", &DotVnni};
  __builtin_cpu_init();
  return Avx2Q8Kernels() != nullptr && __builtin_cpu_supports("avxvnni") ? &kernels : nullptr;
}

}  // namespace q8_internal
}  // namespace kvcast
