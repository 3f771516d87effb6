// AVX2, AVX-VNNI and AVX-512 VNNI versions of the Q4 dot kernels
// (q4_kernels.h): the scalar reference's arithmetic. As in the Q8 kernels a
// vector lane is one weight row of a panel: a 64-byte load of nibbles splits
// into its low nibbles (values 4c..4c+3 of each row) and high nibbles
// (values 16+4c..), each multiplied against the activation's matching 4
// bytes broadcast to every lane, so each lane ends a block with its exact
// integer dot product and no horizontal sums are needed. The nibbles are
// unsigned and the activations signed, which is the operand order of both
// VPMADDUBSW and VPDPBUSD: no offset or sign trick.
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu_features.h"
#include "kernels/internal/int8_simd.h"
#include "kernels/internal/q4_kernels.h"

namespace kvcast {
namespace q4_internal {
namespace {

using q8_internal::Q8Rows;

using int8_simd::Load4;

// AVX2: a block's eight VPMADDUBSW pair sums add up in int16 (each at most
// 2 * 15 * 127, eight of them 30,480 < 32,767), widened once per block.
KVCAST_TARGET_AVX2 inline __m256i StepAvx2(__m256i acc, __m256i w, __m256i x) {
  return _mm256_add_epi16(acc, _mm256_maddubs_epi16(w, x));
}
KVCAST_TARGET_AVX2 inline __m256i FinishAvx2(__m256i acc) {
  return _mm256_madd_epi16(acc, _mm256_set1_epi16(1));
}
KVCAST_TARGET_VNNI inline __m256i StepVnni(__m256i acc, __m256i w, __m256i x) {
  return _mm256_dpbusd_avx_epi32(acc, w, x);
}
KVCAST_TARGET_VNNI inline __m256i FinishVnni(__m256i acc) { return acc; }
// 5-bit values (up to 2 * 31 * 127 a pair) would overflow int16 over a
// block: each pair sum is widened at once.
KVCAST_TARGET_AVX2 inline __m256i StepAvx2Wide(__m256i acc, __m256i w, __m256i x) {
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, x),
                                                 _mm256_set1_epi16(1)));
}
KVCAST_TARGET_AVX2 inline __m256i FinishAvx2Wide(__m256i acc) { return acc; }

// Rows 8h..8h+7 of a panel block's d (or m) at `p`, as float32.
template <PanelFormat S>
KVCAST_TARGET_AVX2 inline __m256 Load8Scales(const uint8_t* p, int h) {
  if (ScaleBytes(S) == 4) return _mm256_loadu_ps(reinterpret_cast<const float*>(p) + 8 * h);
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * h)));
}
// All 16 rows' d (or m) at `p`, as float32.
template <PanelFormat S>
KVCAST_TARGET_AVX512 inline __m512 Load16Scales(const uint8_t* p) {
  if (ScaleBytes(S) == 4) return _mm512_loadu_ps(p);
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// Bit `shift` of each byte of `plane`, moved to bit 4 (the fifth bit of a
// 5-bit value whose low four are the nibble).
KVCAST_TARGET_AVX2 inline __m256i FifthBits256(__m256i plane, int shift) {
  const __m256i bit = _mm256_and_si256(_mm256_srl_epi16(plane, _mm_cvtsi32_si128(shift)),
                                       _mm256_set1_epi8(1));
  return _mm256_slli_epi16(bit, 4);
}
KVCAST_TARGET_AVX512 inline __m512i FifthBits512(__m512i plane, int shift) {
  const __m512i bit = _mm512_and_si512(_mm512_srl_epi16(plane, _mm_cvtsi32_si128(shift)),
                                       _mm512_set1_epi8(1));
  return _mm512_slli_epi16(bit, 4);
}

// Q6: the top-two-bit pairs of chunk c's low (kHigh false) or high nibbles
// in `pairs` (the 64 bytes of chunks c and c + 1, q4_kernels.h:
// TopBitsShift), moved to bits 4-5 of each byte; other bits unmasked.
template <bool kHigh>
KVCAST_TARGET_AVX2 inline __m256i TopBitsUnmasked256(__m256i pairs, int c) {
  const int at = 4 * (c % 2) + (kHigh ? 2 : 0);
  return at <= 4 ? _mm256_sll_epi16(pairs, _mm_cvtsi32_si128(4 - at))
                 : _mm256_srl_epi16(pairs, _mm_cvtsi32_si128(at - 4));
}
template <bool kHigh>
KVCAST_TARGET_AVX512 inline __m512i TopBitsUnmasked512(__m512i pairs, int c) {
  const int at = 4 * (c % 2) + (kHigh ? 2 : 0);
  return at <= 4 ? _mm512_sll_epi16(pairs, _mm_cvtsi32_si128(4 - at))
                 : _mm512_srl_epi16(pairs, _mm_cvtsi32_si128(at - 4));
}

// Q6: rows 8h..8h+7 (or all 16) of d * sc for half `k`, from a block's
// scales (its bytes from ScaleOffset on).
KVCAST_TARGET_AVX2 inline __m256 Load8HalfScales(const uint8_t* scales, int h, int k) {
  const __m256 d = Load8Scales<PanelFormat::kQ6>(scales, h);
  constexpr int kAt = ScaleOffset(PanelFormat::kQ6);
  const __m128i sc =
      _mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales + HalfScaleByte(k, 8 * h) - kAt));
  return _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc)));
}
KVCAST_TARGET_AVX512 inline __m512 Load16HalfScales(const uint8_t* scales, int k) {
  const __m512 d = Load16Scales<PanelFormat::kQ6>(scales);
  constexpr int kAt = ScaleOffset(PanelFormat::kQ6);
  const __m128i sc =
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + HalfScaleByte(k, 0) - kAt));
  return _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc)));
}

// The values of chunk c (< 4) of a panel block at `wb`, as bytes: `lo` holds
// values 4c..4c+3 of each row, `hi` values 16+4c.., in 256-bit halves h
// (rows 8h..8h+7) or whole 512-bit panels.
template <PanelFormat S>
KVCAST_TARGET_AVX2 inline void Unpack256(const uint8_t* wb, int c, int h, __m256i* lo,
                                          __m256i* hi) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + c * 64 + 32 * h));
  *lo = _mm256_and_si256(v, low4);
  *hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
  if (FifthBit(S)) {
    const __m256i fifth =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + kFifthBitOffset + 32 * h));
    *lo = _mm256_or_si256(*lo, FifthBits256(fifth, 2 * c));
    *hi = _mm256_or_si256(*hi, FifthBits256(fifth, 2 * c + 1));
  }
  if (TopTwoBits(S)) {
    const __m256i pairs = _mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(wb + kTopBitsOffset + 64 * (c / 2) + 32 * h));
    const __m256i top2 = _mm256_set1_epi8(0x30);
    *lo = _mm256_or_si256(*lo, _mm256_and_si256(TopBitsUnmasked256<false>(pairs, c), top2));
    *hi = _mm256_or_si256(*hi, _mm256_and_si256(TopBitsUnmasked256<true>(pairs, c), top2));
  }
}
template <PanelFormat S>
KVCAST_TARGET_AVX512 inline void Unpack512(const uint8_t* wb, int c, __m512i* lo, __m512i* hi) {
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const __m512i v = _mm512_loadu_si512(wb + c * 64);
  *lo = _mm512_and_si512(v, low4);
  *hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
  if (FifthBit(S)) {
    const __m512i fifth = _mm512_loadu_si512(wb + kFifthBitOffset);
    *lo = _mm512_or_si512(*lo, FifthBits512(fifth, 2 * c));
    *hi = _mm512_or_si512(*hi, FifthBits512(fifth, 2 * c + 1));
  }
  if (TopTwoBits(S)) {
    const __m512i pairs = _mm512_loadu_si512(wb + kTopBitsOffset + 64 * (c / 2));
    // (0x30 & top bits) | nibble in one instruction.
    const __m512i top2 = _mm512_set1_epi8(0x30);
    *lo = _mm512_ternarylogic_epi32(top2, TopBitsUnmasked512<false>(pairs, c), *lo, 0xEA);
    *hi = _mm512_ternarylogic_epi32(top2, TopBitsUnmasked512<true>(pairs, c), *hi, 0xEA);
  }
}

// Widens `panels` panels of `blocks` blocks (q4_kernels.h: WidenFn).
template <PanelFormat S>
KVCAST_TARGET_AVX2 void WidenAvx2(const uint8_t* w, int64_t panels, int64_t blocks, uint8_t* out) {
  for (int64_t b = 0; b < panels * blocks; ++b) {
    const uint8_t* wb = w + b * PanelBlockBytes(S);
    uint8_t* ob = out + b * WideBlockBytes(S);
    for (int c = 0; c < 4; ++c) {
      for (int h = 0; h < 2; ++h) {
        __m256i lo, hi;
        Unpack256<S>(wb, c, h, &lo, &hi);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(ob + 64 * c + 32 * h), lo);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(ob + 64 * (c + 4) + 32 * h), hi);
      }
    }
    std::memcpy(ob + kWideValueBytes, wb + ScaleOffset(S), PanelBlockBytes(S) - ScaleOffset(S));
  }
}
template <PanelFormat S>
KVCAST_TARGET_AVX512 void WidenAvx512(const uint8_t* w, int64_t panels, int64_t blocks,
                                      uint8_t* out) {
  for (int64_t b = 0; b < panels * blocks; ++b) {
    const uint8_t* wb = w + b * PanelBlockBytes(S);
    uint8_t* ob = out + b * WideBlockBytes(S);
    for (int c = 0; c < 4; ++c) {
      __m512i lo, hi;
      Unpack512<S>(wb, c, &lo, &hi);
      _mm512_storeu_si512(ob + 64 * c, lo);
      _mm512_storeu_si512(ob + 64 * (c + 4), hi);
    }
    std::memcpy(ob + kWideValueBytes, wb + ScaleOffset(S), PanelBlockBytes(S) - ScaleOffset(S));
  }
}

// 256-bit kernels: one panel at a time, its rows 0-7 (bytes 0-31 of each
// 64-byte chunk) and 8-15 (bytes 32-63) in two registers; R <= 2 activation
// rows share each weight load and unpacking. W: the panels are widened
// (q4_kernels.h), the values read as they are.
#define KVCAST_DEFINE_Q4_DOT256(NAME, TARGET, STEP, FINISH)                                      \
  template <PanelFormat S, bool W, int R>                                                          \
  TARGET void NAME##Rows(const Q8Rows& x, int r0, const uint8_t* w, int64_t cols, float* out,  \
                         int64_t out_stride) {                                                  \
    constexpr int K = TopTwoBits(S) ? 2 : 1;                                                    \
    const int64_t blocks = x.blocks;                                                            \
    __m256 acc[R][2];                                                                           \
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();                    \
    for (int64_t b = 0; b < blocks; ++b) {                                                      \
      const uint8_t* wb = w + b * BlockBytes(S, W);                                             \
      /* Q6 sums each row's two halves apart (K = 2): each has its own scale; */                \
      /* the sums start at -32 x the activation half's sum (the -32 offset). */                 \
      __m256i isum[R][2][K];                                                                    \
      for (int r = 0; r < R; ++r) {                                                             \
        const int64_t xb = (r0 + r) * blocks + b;                                               \
        for (int k = 0; k < K; ++k) {                                                           \
          isum[r][0][k] = isum[r][1][k] =                                                       \
              TopTwoBits(S)                                                                     \
                  ? _mm256_set1_epi32(-32 * (k == 0 ? x.h[xb] : x.c[xb] / 128 - x.h[xb]))        \
                  : _mm256_setzero_si256();                                                     \
        }                                                                                       \
      }                                                                                         \
      for (int c = 0; c < 4; ++c) {                                                             \
        __m256i lo[2], hi[2];                                                                   \
        for (int h = 0; h < 2; ++h) {                                                           \
          if (W) {                                                                              \
            lo[h] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 64 * c + 32 * h)); \
            hi[h] = _mm256_loadu_si256(                                                         \
                reinterpret_cast<const __m256i*>(wb + 64 * (c + 4) + 32 * h));                  \
          } else {                                                                              \
            Unpack256<S>(wb, c, h, &lo[h], &hi[h]);                                             \
          }                                                                                     \
        }                                                                                       \
        for (int r = 0; r < R; ++r) {                                                           \
          const int8_t* xq = x.q + ((r0 + r) * blocks + b) * 32;                                \
          const __m256i xl = _mm256_set1_epi32(Load4(xq + 4 * c));                              \
          const __m256i xh = _mm256_set1_epi32(Load4(xq + 16 + 4 * c));                         \
          for (int h = 0; h < 2; ++h) {                                                         \
            isum[r][h][0] = STEP(isum[r][h][0], lo[h], xl);                                     \
            isum[r][h][K - 1] = STEP(isum[r][h][K - 1], hi[h], xh);                             \
          }                                                                                     \
        }                                                                                       \
      }                                                                                         \
      const uint8_t* scales = wb + ScalesAt(S, W);                                              \
      if (TopTwoBits(S)) {                                                                      \
        __m256 ds[2][2];                                                                        \
        for (int h = 0; h < 2; ++h) {                                                           \
          for (int k = 0; k < 2; ++k) ds[h][k] = Load8HalfScales(scales, h, k);                 \
        }                                                                                       \
        for (int r = 0; r < R; ++r) {                                                           \
          const __m256 xs = _mm256_set1_ps(x.s[(r0 + r) * blocks + b]);                        \
          for (int h = 0; h < 2; ++h) {                                                         \
            for (int k = 0; k < K; ++k) {                                                       \
              const __m256 dot = _mm256_cvtepi32_ps(FINISH(isum[r][h][k]));                     \
              acc[r][h] = _mm256_fmadd_ps(_mm256_mul_ps(ds[h][k], xs), dot, acc[r][h]);         \
            }                                                                                   \
          }                                                                                     \
        }                                                                                       \
        continue;                                                                               \
      }                                                                                         \
      __m256 d[2], m[2];                                                                        \
      for (int h = 0; h < 2; ++h) {                                                             \
        d[h] = Load8Scales<S>(scales, h);                                                       \
        m[h] = Load8Scales<S>(scales + 16 * ScaleBytes(S), h);                                  \
      }                                                                                         \
      for (int r = 0; r < R; ++r) {                                                             \
        const int64_t xb = (r0 + r) * blocks + b;                                               \
        const __m256 xs = _mm256_set1_ps(x.s[xb]);                                              \
        const __m256 xsum = _mm256_set1_ps(x.s[xb] * float(x.c[xb] / 128));                    \
        for (int h = 0; h < 2; ++h) {                                                           \
          const __m256 dot = _mm256_cvtepi32_ps(FINISH(isum[r][h][0]));                         \
          acc[r][h] = _mm256_fmadd_ps(_mm256_mul_ps(d[h], xs), dot, acc[r][h]);                 \
          acc[r][h] = _mm256_fmadd_ps(m[h], xsum, acc[r][h]);                                   \
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
  template <PanelFormat S, bool W = false>                                                        \
  TARGET void NAME(const Q8Rows& x, int rows, const uint8_t* w, int64_t panels, int64_t cols,   \
                   float* out, int64_t out_stride) {                                            \
    for (int64_t p = 0; p < panels; ++p) {                                                      \
      const uint8_t* wp = w + p * x.blocks * BlockBytes(S, W);                                  \
      const int64_t left = cols - 16 * p;                                                       \
      int r = 0;                                                                                \
      for (; r + 2 <= rows; r += 2) {                                                           \
        NAME##Rows<S, W, 2>(x, r, wp, left, out + 16 * p, out_stride);                          \
      }                                                                                         \
      if (r < rows) NAME##Rows<S, W, 1>(x, r, wp, left, out + 16 * p, out_stride);              \
    }                                                                                           \
  }

KVCAST_DEFINE_Q4_DOT256(DotAvx2, KVCAST_TARGET_AVX2, StepAvx2, FinishAvx2)
KVCAST_DEFINE_Q4_DOT256(DotVnni, KVCAST_TARGET_VNNI, StepVnni, FinishVnni)
KVCAST_DEFINE_Q4_DOT256(DotAvx2Wide, KVCAST_TARGET_AVX2, StepAvx2Wide, FinishAvx2Wide)

// AVX-512 VNNI: a register is a whole panel (16 rows); R activation rows by
// PP panels of accumulators stay in registers. With few rows the low and
// high nibbles accumulate apart (A = 2), so more dot chains run at once.
// W: the panels are widened (q4_kernels.h), the values read as they are.
template <PanelFormat S, bool W, int R, int PP>
KVCAST_TARGET_AVX512 void Avx512Panels(const Q8Rows& x, int r0, const uint8_t* w, int64_t cols,
                                       float* out, int64_t out_stride) {
  // Q6 always keeps the halves apart: each has its own scale.
  constexpr int A = R <= 2 || TopTwoBits(S) ? 2 : 1;
  constexpr int kBlockBytes = BlockBytes(S, W);
  constexpr int kPrefetchBlocks = 4;
  const int64_t blocks = x.blocks, panel_bytes = blocks * kBlockBytes;
  __m512 acc[R][PP];
  for (int r = 0; r < R; ++r) {
    for (int p = 0; p < PP; ++p) acc[r][p] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < blocks; ++b) {
    // Q6's sums start at -32 x the activation half's sum: the -32 offset.
    __m512i isum[R][PP][A];
    for (int r = 0; r < R; ++r) {
      const int64_t xb = (r0 + r) * blocks + b;
      for (int a = 0; a < A; ++a) {
        const __m512i start =
            TopTwoBits(S) ? _mm512_set1_epi32(-32 * (a == 0 ? x.h[xb] : x.c[xb] / 128 - x.h[xb]))
                          : _mm512_setzero_si512();
        for (int p = 0; p < PP; ++p) isum[r][p][a] = start;
      }
    }
    // With few rows, each panel's stream is fetched a few blocks ahead of
    // its loads: one row's arithmetic per block is too short for the memory
    // system to overlap otherwise (more rows need no help).
    for (int p = 0; p < (R <= 2 ? PP : 0); ++p) {
      const char* ahead = reinterpret_cast<const char*>(w + p * panel_bytes +
                                                        (b + kPrefetchBlocks) * kBlockBytes);
      for (int line = 0; line < kBlockBytes; line += 64) _mm_prefetch(ahead + line, _MM_HINT_T0);
    }
    for (int c = 0; c < 4; ++c) {
      __m512i lo[PP], hi[PP];
      for (int p = 0; p < PP; ++p) {
        const uint8_t* wb = w + p * panel_bytes + b * kBlockBytes;
        if (W) {
          lo[p] = _mm512_loadu_si512(wb + 64 * c);
          hi[p] = _mm512_loadu_si512(wb + 64 * (c + 4));
        } else {
          Unpack512<S>(wb, c, &lo[p], &hi[p]);
        }
      }
      for (int r = 0; r < R; ++r) {
        const int8_t* xq = x.q + ((r0 + r) * blocks + b) * 32;
        const __m512i xl = _mm512_set1_epi32(Load4(xq + 4 * c));
        const __m512i xh = _mm512_set1_epi32(Load4(xq + 16 + 4 * c));
        for (int p = 0; p < PP; ++p) {
          isum[r][p][0] = _mm512_dpbusd_epi32(isum[r][p][0], lo[p], xl);
          isum[r][p][A - 1] = _mm512_dpbusd_epi32(isum[r][p][A - 1], hi[p], xh);
        }
      }
    }
    if (TopTwoBits(S)) {
      __m512 ds[PP][2];
      for (int p = 0; p < PP; ++p) {
        const uint8_t* scales = w + p * panel_bytes + b * kBlockBytes + ScalesAt(S, W);
        for (int k = 0; k < 2; ++k) ds[p][k] = Load16HalfScales(scales, k);
      }
      for (int r = 0; r < R; ++r) {
        const __m512 xs = _mm512_set1_ps(x.s[(r0 + r) * blocks + b]);
        for (int p = 0; p < PP; ++p) {
          for (int k = 0; k < 2; ++k) {
            const __m512i dot = isum[r][p][k == 0 ? 0 : A - 1];
            acc[r][p] = _mm512_fmadd_ps(_mm512_mul_ps(ds[p][k], xs), _mm512_cvtepi32_ps(dot),
                                        acc[r][p]);
          }
        }
      }
      continue;
    }
    __m512 d[PP], m[PP];
    for (int p = 0; p < PP; ++p) {
      const uint8_t* scales = w + p * panel_bytes + b * kBlockBytes + ScalesAt(S, W);
      d[p] = Load16Scales<S>(scales);
      m[p] = Load16Scales<S>(scales + 16 * ScaleBytes(S));
    }
    for (int r = 0; r < R; ++r) {
      const int64_t xb = (r0 + r) * blocks + b;
      const __m512 xs = _mm512_set1_ps(x.s[xb]);
      const __m512 xsum = _mm512_set1_ps(x.s[xb] * float(x.c[xb] / 128));
      for (int p = 0; p < PP; ++p) {
        __m512i dot = isum[r][p][0];
        if (A == 2) dot = _mm512_add_epi32(dot, isum[r][p][A - 1]);
        acc[r][p] = _mm512_fmadd_ps(_mm512_mul_ps(d[p], xs), _mm512_cvtepi32_ps(dot), acc[r][p]);
        acc[r][p] = _mm512_fmadd_ps(m[p], xsum, acc[r][p]);
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

template <PanelFormat S, bool W, int R, int PP>
KVCAST_TARGET_AVX512 void Avx512Rows(const Q8Rows& x, int r0, const uint8_t* w, int64_t panels,
                                     int64_t cols, float* out, int64_t out_stride) {
  const int64_t panel_bytes = x.blocks * BlockBytes(S, W);
  int64_t p = 0;
  for (; p + PP <= panels; p += PP) {
    Avx512Panels<S, W, R, PP>(x, r0, w + p * panel_bytes, cols - 16 * p, out + 16 * p,
                              out_stride);
  }
  for (; p < panels; ++p) {
    Avx512Panels<S, W, R, 1>(x, r0, w + p * panel_bytes, cols - 16 * p, out + 16 * p, out_stride);
  }
}

template <PanelFormat S, bool W = false>
KVCAST_TARGET_AVX512 void DotAvx512(const Q8Rows& x, int rows, const uint8_t* w, int64_t panels,
                                    int64_t cols, float* out, int64_t out_stride) {
  int r = 0;
  for (; r + 4 <= rows; r += 4) Avx512Rows<S, W, 4, 2>(x, r, w, panels, cols, out, out_stride);
  switch (rows - r) {
    case 3: return Avx512Rows<S, W, 3, 2>(x, r, w, panels, cols, out, out_stride);
    case 2: return Avx512Rows<S, W, 2, 2>(x, r, w, panels, cols, out, out_stride);
    case 1: return Avx512Rows<S, W, 1, 2>(x, r, w, panels, cols, out, out_stride);
    default: return;
  }
}

}  // namespace

// Each format's kernels, narrow and widened, and its widening.
#define KVCAST_Q4_KERNELS(NAME, DOT, DOT5, WIDEN)                                               \
  {NAME,                                                                                        \
   {&DOT<PanelFormat::kQ4F16>, &DOT<PanelFormat::kQ4F32>, &DOT5<PanelFormat::kQ5F32>,          \
    &DOT5<PanelFormat::kQ5F16>, &DOT5<PanelFormat::kQ6>},                                       \
   {&DOT<PanelFormat::kQ4F16, true>, &DOT<PanelFormat::kQ4F32, true>,                           \
    &DOT5<PanelFormat::kQ5F32, true>, &DOT5<PanelFormat::kQ5F16, true>,                         \
    &DOT5<PanelFormat::kQ6, true>},                                                             \
   {&WIDEN<PanelFormat::kQ4F16>, &WIDEN<PanelFormat::kQ4F32>, &WIDEN<PanelFormat::kQ5F32>,      \
    &WIDEN<PanelFormat::kQ5F16>, &WIDEN<PanelFormat::kQ6>}}

const Q4Kernels* Avx2Q4Kernels() {
  static const Q4Kernels kernels KVCAST_Q4_KERNELS("avx2", DotAvx2, DotAvx2Wide, WidenAvx2);
  return CpuHas(CpuIsa::kAvx2) ? &kernels : nullptr;
}

const Q4Kernels* AvxVnniQ4Kernels() {
  static const Q4Kernels kernels KVCAST_Q4_KERNELS("avx-vnni", DotVnni, DotVnni, WidenAvx2);
  return CpuHas(CpuIsa::kAvxVnni) ? &kernels : nullptr;
}

const Q4Kernels* Avx512VnniQ4Kernels() {
  static const Q4Kernels kernels KVCAST_Q4_KERNELS("avx512-vnni", DotAvx512, DotAvx512,
                                                   WidenAvx512);
  return CpuHas(CpuIsa::kAvx512Vnni) ? &kernels : nullptr;
}

}  // namespace q4_internal
}  // namespace kvcast
