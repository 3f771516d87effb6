// AVX2, AVX-VNNI and AVX-512 VNNI versions of the Q8 dot kernels
// (q8_kernels.h): the same arithmetic as the scalar reference. A vector lane
// is one weight row of a panel: the 4-byte groups of a block are multiplied
// against the activation's matching 4 bytes broadcast to every lane, so
// each lane ends a block with its exact integer dot product and no
// horizontal sums are needed.
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu_features.h"
#include "kernels/internal/int8_simd.h"
#include "kernels/internal/q8_kernels.h"

namespace kvcast {
namespace q8_internal {
namespace {

using int8_simd::Load4;

// acc += per lane, sum over 4 bytes of (w_u8 - 128) * x, where x holds the
// same 4 signed bytes in every lane. AVX2 has no u8 x s8 dot without
// saturation for w_u8 up to 255, so it takes the signed weight (w ^ 0x80)
// and moves x's sign onto it: |x| * |q| <= 127 * 127 fits the int16 pairs.
KVCAST_TARGET_AVX2 inline __m256i StepAvx2(__m256i acc, __m256i w, __m256i x) {
  const __m256i q = _mm256_xor_si256(w, _mm256_set1_epi8(char(0x80)));
  const __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(q, x));
  return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}
// AVX-VNNI sums w_u8 * x; the block's correction c removes the 128 offset.
KVCAST_TARGET_VNNI inline __m256i StepVnni(__m256i acc, __m256i w, __m256i x) {
  return _mm256_dpbusd_avx_epi32(acc, w, x);
}

// 256-bit kernels: one panel at a time, its rows 0-7 (bytes 0-31 of each
// 64-byte quad row) and 8-15 (bytes 32-63) in two registers; R <= 2
// activation rows share each weight load.
#define KVCAST_DEFINE_DOT256(NAME, TARGET, STEP, CORRECTS)                                      \
  template <int R>                                                                              \
  TARGET void NAME##Rows(const Q8Rows& x, int r0, const uint8_t* w, const float* ws,            \
                         int64_t cols, float* out, int64_t out_stride) {                        \
    const int64_t blocks = x.blocks;                                                            \
    __m256 acc[R][2];                                                                           \
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();                    \
    for (int64_t b = 0; b < blocks; ++b) {                                                      \
      const uint8_t* wb = w + b * kPanelBlockBytes;                                             \
      __m256i isum[R][2];                                                                       \
      for (int r = 0; r < R; ++r) isum[r][0] = isum[r][1] = _mm256_setzero_si256();             \
      for (int j = 0; j < 8; ++j) {                                                             \
        const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + j * 64));  \
        const __m256i hi =                                                                      \
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + j * 64 + 32));             \
        for (int r = 0; r < R; ++r) {                                                           \
          const __m256i xv =                                                                    \
              _mm256_set1_epi32(Load4(x.q + ((r0 + r) * blocks + b) * 32 + 4 * j));            \
          isum[r][0] = STEP(isum[r][0], lo, xv);                                                \
          isum[r][1] = STEP(isum[r][1], hi, xv);                                                \
        }                                                                                       \
      }                                                                                         \
      for (int r = 0; r < R; ++r) {                                                             \
        const int64_t xb = (r0 + r) * blocks + b;                                               \
        const __m256 xs = _mm256_set1_ps(x.s[xb]);                                              \
        for (int h = 0; h < 2; ++h) {                                                           \
          __m256i v = isum[r][h];                                                               \
          if (CORRECTS) v = _mm256_sub_epi32(v, _mm256_set1_epi32(x.c[xb]));                    \
          const __m256 s = _mm256_mul_ps(xs, _mm256_loadu_ps(ws + b * kPanelRows + 8 * h));     \
          acc[r][h] = _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(v), acc[r][h]);                     \
        }                                                                                       \
      }                                                                                         \
    }                                                                                           \
    for (int r = 0; r < R; ++r) {                                                               \
      alignas(32) float lanes[16];                                                              \
      _mm256_store_ps(lanes, acc[r][0]);                                                        \
      _mm256_store_ps(lanes + 8, acc[r][1]);                                                    \
      std::memcpy(out + (r0 + r) * out_stride, lanes, (cols < 16 ? cols : 16) * sizeof(float)); \
    }                                                                                           \
  }                                                                                             \
  TARGET void NAME(const Q8Rows& x, int rows, const uint8_t* w, const float* ws,                \
                   int64_t panels, int64_t cols, float* out, int64_t out_stride) {              \
    for (int64_t p = 0; p < panels; ++p) {                                                      \
      const uint8_t* wp = w + p * x.blocks * kPanelBlockBytes;                                  \
      const float* wsp = ws + p * x.blocks * kPanelRows;                                        \
      int r = 0;                                                                                \
      for (; r + 2 <= rows; r += 2) {                                                           \
        NAME##Rows<2>(x, r, wp, wsp, cols - 16 * p, out + 16 * p, out_stride);                  \
      }                                                                                         \
      if (r < rows) NAME##Rows<1>(x, r, wp, wsp, cols - 16 * p, out + 16 * p, out_stride);      \
    }                                                                                           \
  }

KVCAST_DEFINE_DOT256(DotAvx2, KVCAST_TARGET_AVX2, StepAvx2, false)
KVCAST_DEFINE_DOT256(DotVnni, KVCAST_TARGET_VNNI, StepVnni, true)

// AVX-512 VNNI: a register is a whole panel (16 rows); R activation rows by
// PP panels of integer and float accumulators stay in registers.
template <int R, int PP>
KVCAST_TARGET_AVX512 void Avx512Panels(const Q8Rows& x, int r0, const uint8_t* w,
                                       const float* ws, int64_t cols, float* out,
                                       int64_t out_stride) {
  const int64_t blocks = x.blocks;
  const int64_t panel_bytes = blocks * kPanelBlockBytes, panel_scales = blocks * kPanelRows;
  __m512 acc[R][PP];
  for (int r = 0; r < R; ++r) {
    for (int p = 0; p < PP; ++p) acc[r][p] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < blocks; ++b) {
    __m512i isum[R][PP];
    for (int r = 0; r < R; ++r) {
      for (int p = 0; p < PP; ++p) isum[r][p] = _mm512_setzero_si512();
    }
    for (int j = 0; j < 8; ++j) {
      __m512i wv[PP];
      for (int p = 0; p < PP; ++p) {
        wv[p] = _mm512_loadu_si512(w + p * panel_bytes + b * kPanelBlockBytes + j * 64);
      }
      for (int r = 0; r < R; ++r) {
        const __m512i xv = _mm512_set1_epi32(Load4(x.q + ((r0 + r) * blocks + b) * 32 + 4 * j));
        for (int p = 0; p < PP; ++p) isum[r][p] = _mm512_dpbusd_epi32(isum[r][p], wv[p], xv);
      }
    }
    for (int r = 0; r < R; ++r) {
      const int64_t xb = (r0 + r) * blocks + b;
      const __m512 xs = _mm512_set1_ps(x.s[xb]);
      const __m512i c = _mm512_set1_epi32(x.c[xb]);
      for (int p = 0; p < PP; ++p) {
        const __m512 s =
            _mm512_mul_ps(xs, _mm512_loadu_ps(ws + p * panel_scales + b * kPanelRows));
        acc[r][p] =
            _mm512_fmadd_ps(s, _mm512_cvtepi32_ps(_mm512_sub_epi32(isum[r][p], c)), acc[r][p]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int p = 0; p < PP; ++p) {
      const int64_t valid = cols - 16 * p;
      if (valid <= 0) break;
      float* dst = out + (r0 + r) * out_stride + 16 * p;
      if (valid >= 16) {
        _mm512_storeu_ps(dst, acc[r][p]);
      } else {
        _mm512_mask_storeu_ps(dst, __mmask16((1u << valid) - 1), acc[r][p]);
      }
    }
  }
}

template <int R, int PP>
KVCAST_TARGET_AVX512 void Avx512Rows(const Q8Rows& x, int r0, const uint8_t* w, const float* ws,
                                     int64_t panels, int64_t cols, float* out,
                                     int64_t out_stride) {
  int64_t p = 0;
  for (; p + PP <= panels; p += PP) {
    Avx512Panels<R, PP>(x, r0, w + p * x.blocks * kPanelBlockBytes, ws + p * x.blocks * kPanelRows,
                        cols - 16 * p, out + 16 * p, out_stride);
  }
  for (; p < panels; ++p) {
    Avx512Panels<R, 1>(x, r0, w + p * x.blocks * kPanelBlockBytes, ws + p * x.blocks * kPanelRows,
                       cols - 16 * p, out + 16 * p, out_stride);
  }
}

KVCAST_TARGET_AVX512 void DotAvx512(const Q8Rows& x, int rows, const uint8_t* w, const float* ws,
                                    int64_t panels, int64_t cols, float* out,
                                    int64_t out_stride) {
  int r = 0;
  for (; r + 4 <= rows; r += 4) Avx512Rows<4, 2>(x, r, w, ws, panels, cols, out, out_stride);
  switch (rows - r) {
    case 3: return Avx512Rows<3, 2>(x, r, w, ws, panels, cols, out, out_stride);
    case 2: return Avx512Rows<2, 2>(x, r, w, ws, panels, cols, out, out_stride);
    case 1: return Avx512Rows<1, 2>(x, r, w, ws, panels, cols, out, out_stride);
    default: return;
  }
}

// QuantizeBlock's arithmetic sixteen lanes at a time: the same division for
// the scale and its inverse, the same round-to-nearest-even (the default
// MXCSR mode of the conversion) and clamp.
KVCAST_TARGET_AVX512 void QuantizeAvx512(const float* x, int64_t blocks, int8_t* q, float* s,
                                         int32_t* c) {
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
  for (int64_t b = 0; b < blocks; ++b) {
    const __m512 x0 = _mm512_loadu_ps(x + b * 32), x1 = _mm512_loadu_ps(x + b * 32 + 16);
    const float amax = _mm512_reduce_max_ps(
        _mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
    const float scale = amax / 127.0f;
    const __m512 inv = _mm512_set1_ps(scale != 0.0f ? 1.0f / scale : 0.0f);
    const __m512i q0 =
        _mm512_max_epi32(lo, _mm512_min_epi32(hi, _mm512_cvtps_epi32(_mm512_mul_ps(x0, inv))));
    const __m512i q1 =
        _mm512_max_epi32(lo, _mm512_min_epi32(hi, _mm512_cvtps_epi32(_mm512_mul_ps(x1, inv))));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + b * 32), _mm512_cvtepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + b * 32 + 16), _mm512_cvtepi32_epi8(q1));
    s[b] = scale;
    c[b] = 128 * _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
  }
}

}  // namespace

const Q8Kernels* Avx2Q8Kernels() {
  static const Q8Kernels kernels{"avx2", &DotAvx2, &QuantizeBlocksScalar, 1};
  return CpuHas(CpuIsa::kAvx2) ? &kernels : nullptr;
}

const Q8Kernels* AvxVnniQ8Kernels() {
  static const Q8Kernels kernels{"avx-vnni", &DotVnni, &QuantizeBlocksScalar, 1};
  return CpuHas(CpuIsa::kAvxVnni) ? &kernels : nullptr;
}

const Q8Kernels* Avx512VnniQ8Kernels() {
  static const Q8Kernels kernels{"avx512-vnni", &DotAvx512, &QuantizeAvx512, 1};
  return CpuHas(CpuIsa::kAvx512Vnni) ? &kernels : nullptr;
}

}  // namespace q8_internal
}  // namespace kvcast
