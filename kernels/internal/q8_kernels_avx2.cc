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

#define KVCAST_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")))

// AVX-512 VNNI: one 512-bit step covers blocks b (low half) and b + 1 (high
// half) for even b, so the low half is exactly the even-block accumulator
// and the high half the odd-block one of the 256-bit kernels; an odd last
// block runs in the low half alone.
template <int R>
KVCAST_TARGET_AVX512 void DotAvx512Rows(const int8_t* xq, const float* xs, const int8_t* wq,
                                        const float* ws, int64_t n, int64_t blocks, float* out,
                                        int64_t out_stride) {
  const __m512i spread = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  for (int64_t j = 0; j < n; ++j) {
    __m512 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
    const int8_t* wrow = wq + j * blocks * 32;
    const float* wsrow = ws + j * blocks;
    int64_t b = 0;
    for (; b + 2 <= blocks; b += 2) {
      const __m512i w = _mm512_loadu_si512(wrow + b * 32);
      const __m128 wsc = _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(wsrow + b)));
      for (int r = 0; r < R; ++r) {
        const __m512i x = _mm512_loadu_si512(xq + (r * blocks + b) * 32);
        const __mmask64 neg = _mm512_movepi8_mask(x);
        const __m512i ax = _mm512_abs_epi8(x);
        const __m512i sw = _mm512_mask_sub_epi8(w, neg, _mm512_setzero_si512(), w);
        const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ax, sw);
        const __m128 xsc =
            _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(xs + r * blocks + b)));
        const __m512 s = _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(_mm_mul_ps(xsc, wsc)));
        acc[r] = _mm512_fmadd_ps(s, _mm512_cvtepi32_ps(dot), acc[r]);
      }
    }
    for (int r = 0; r < R; ++r) {
      __m256 even = _mm512_castps512_ps256(acc[r]);
      const __m256 odd = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[r]), 1));
      if (b < blocks) {  // Odd block count: the last (even) block.
        const __m256i x =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + (r * blocks + b) * 32));
        const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wrow + b * 32));
        const __m256 s = _mm256_set1_ps(xs[r * blocks + b] * wsrow[b]);
        const __m256i ax = _mm256_sign_epi8(x, x), sw = _mm256_sign_epi8(w, x);
        const __m256i dot = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ax, sw);
        even = _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(dot), even);
      }
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, _mm256_add_ps(even, odd));
      out[r * out_stride + j] = SumLanes(lanes);
    }
  }
}

KVCAST_TARGET_AVX512 void DotAvx512(const int8_t* xq, const float* xs, int rows,
                                    const int8_t* wq, const float* ws, int64_t n, int64_t blocks,
                                    float* out, int64_t out_stride) {
  switch (rows) {
    case 1: return DotAvx512Rows<1>(xq, xs, wq, ws, n, blocks, out, out_stride);
    case 2: return DotAvx512Rows<2>(xq, xs, wq, ws, n, blocks, out, out_stride);
    case 3: return DotAvx512Rows<3>(xq, xs, wq, ws, n, blocks, out, out_stride);
    default: return DotAvx512Rows<4>(xq, xs, wq, ws, n, blocks, out, out_stride);
  }
}

}  // namespace

const Q8Kernels* Avx512VnniQ8Kernels() {
  static const Q8Kernels kernels{"avx512-vnni", &DotAvx512};
  __builtin_cpu_init();
  return Avx2Q8Kernels() != nullptr && __builtin_cpu_supports("avx512f") &&
                 __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                 __builtin_cpu_supports("avx512vnni")
             ? &kernels
             : nullptr;
}

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
