// The ac encoder's AVX2 kernels (encode_kernels.h): the AVX-512 kernels'
// method in 8-lane halves, the same bytes as the scalar reference.
// Compressing stores (renormalization words) are permutations from a table
// and a store of the whole register into the room a stream keeps below its
// words (kStreamSlack).
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>

#include "common/dtype.h"
#include "transport/kvcache/ac/internal/encode_kernels.h"

namespace kvcast::kvcache::ac::internal {
namespace {

#define KVCAST_AVX2 __attribute__((target("avx2,bmi2,popcnt,f16c,fma,sse4.1")))

KVCAST_AVX2 inline __m256 Load8(const float* x) { return _mm256_loadu_ps(x); }
KVCAST_AVX2 inline __m256 Load8(const uint16_t* x) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x)));
}

KVCAST_AVX2 float AbsMaxAvx2(const float* x, int d) {
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 big = _mm256_set1_ps(std::numeric_limits<float>::max());
  __m256 m = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
  for (int c = 0; c < d; c += 8) {
    const __m256 a = _mm256_and_ps(Load8(x + c), magnitude);
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, big, _CMP_NLE_UQ));  // inf or NaN
    m = _mm256_max_ps(m, a);
  }
  if (_mm256_movemask_ps(bad) != 0) return std::numeric_limits<float>::quiet_NaN();
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

// fp16 without widening, as the AVX-512 kernel: a finite half's magnitude
// bits order as its value; 0x7c00 and above are infinities and NaNs.
KVCAST_AVX2 float AbsMaxHalfAvx2(const uint16_t* x, int d) {
  const __m256i magnitude = _mm256_set1_epi16(0x7fff);
  __m256i m = _mm256_setzero_si256();
  for (int c = 0; c < d; c += 16) {  // d is a multiple of 16
    m = _mm256_max_epu16(
        m, _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + c)),
                            magnitude));
  }
  const __m128i l = _mm_max_epu16(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
  // The largest of 8 as the smallest of their complements (phminposuw).
  const __m128i least = _mm_minpos_epu16(_mm_xor_si128(l, _mm_set1_epi16(-1)));
  const uint16_t top = uint16_t(~_mm_extract_epi16(least, 0));
  return top >= 0x7c00 ? std::numeric_limits<float>::quiet_NaN() : HalfToFloat(top);
}

// Token by token, 8 channels at a time: codes rounded half to even by
// cvtps (the default MXCSR mode), as the scalar code; the mode costs read
// the previous token's codes back from q (just written, in L1).
template <typename T>
KVCAST_AVX2 void QuantizeAvx2(const T* x, size_t stride, const float* inv, const uint8_t* same,
                              int tokens, int d, int16_t* q, uint32_t* raw, uint32_t* delta) {
  const __m256 lo = _mm256_set1_ps(-32767.f), hi = _mm256_set1_ps(32767.f);
  for (int t = 0; t < tokens; ++t) {
    const __m256 vinv = _mm256_set1_ps(inv[t]);
    const T* xt = x + t * stride;
    int16_t* qt = q + size_t(t) * d;
    for (int c = 0; c < d; c += 16) {
      __m256i a[2];
      for (int h = 0; h < 2; ++h) {
        const __m256 v = _mm256_min_ps(
            _mm256_max_ps(_mm256_mul_ps(Load8(xt + c + 8 * h), vinv), lo), hi);
        a[h] = _mm256_cvtps_epi32(v);
      }
      // packs interleaves 128-bit halves; permute4x64 puts them in order.
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(qt + c),
                          _mm256_permute4x64_epi64(_mm256_packs_epi32(a[0], a[1]), 0xd8));
      if (!same[t]) continue;
      for (int h = 0; h < 2; ++h) {
        const __m256i p = _mm256_cvtepi16_epi32(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(qt + c + 8 * h - d)));
        __m256i* r = reinterpret_cast<__m256i*>(raw + c + 8 * h);
        __m256i* e = reinterpret_cast<__m256i*>(delta + c + 8 * h);
        _mm256_storeu_si256(r, _mm256_add_epi32(_mm256_loadu_si256(r), _mm256_abs_epi32(a[h])));
        _mm256_storeu_si256(e, _mm256_add_epi32(_mm256_loadu_si256(e),
                                                _mm256_abs_epi32(_mm256_sub_epi32(a[h], p))));
      }
    }
  }
}

// Adds the unit's symbols to counts (2 x kMaxSymbols) with 8 interleaved
// sub-histograms: an increment waits for the last store to its counter
// (store forwarding, ~5 cycles), and neighbouring channels often share a
// symbol (delta channels' small residuals), so one histogram would make
// a chain of them. Each increment is a load and a read-modify-write, about
// half a cycle a symbol when the chains are broken. The counters are 16
// bits (half the memory to clear and add up; 2.5 points of encode time on
// SmolLM2's shape went to that), summed into counts every 65535 symbols,
// so that not even their sum can overflow.
KVCAST_AVX2 void CountSymbolsImpl(const uint16_t* sym, size_t n, uint32_t* counts) {
  constexpr int kTable = 2 * kMaxSymbols, kSub = 8;
  constexpr size_t kMostPerPass = 65535;
  alignas(32) uint16_t sub[kSub][kTable];
  for (size_t begin = 0; begin < n; begin += kMostPerPass) {
    const size_t end = std::min(n, begin + kMostPerPass);
    std::memset(sub, 0, sizeof(sub));
    size_t i = begin;
    for (; i + kSub <= end; i += kSub) {
#pragma GCC unroll 8
      for (int k = 0; k < kSub; ++k) ++sub[k][sym[i + k]];
    }
    for (; i < end; ++i) ++sub[0][sym[i]];
    for (int s = 0; s < kTable; s += 16) {
      __m256i sum = _mm256_load_si256(reinterpret_cast<const __m256i*>(&sub[0][s]));
      for (int k = 1; k < kSub; ++k) {
        sum = _mm256_add_epi16(sum, _mm256_load_si256(reinterpret_cast<const __m256i*>(&sub[k][s])));
      }
      for (int h = 0; h < 2; ++h) {
        __m256i* c = reinterpret_cast<__m256i*>(counts + s + 8 * h);
        const __m256i wide = _mm256_cvtepu16_epi32(h ? _mm256_extracti128_si256(sum, 1)
                                                     : _mm256_castsi256_si128(sum));
        _mm256_storeu_si256(c, _mm256_add_epi32(_mm256_loadu_si256(c), wide));
      }
    }
  }
}

// One block of 16 channels of token codes qt, the scalar way: its residual
// overflowed int16 (the 16-bit lanes below cannot hold it).
inline void SymbolizeBlockScalar(const int16_t* qt, int d, int c0, uint32_t dm, uint16_t* st,
                                 EncodeStream* stream) {
  for (int j = 15; j >= 0; --j) {
    const int c = c0 + j;
    const bool delta = (dm >> j) & 1;
    const uint32_t z = ZigZag(delta ? int32_t(qt[c]) - qt[c - d] : qt[c]);
    if (z >= kEscape) stream->escapes.push_back(z - kEscape);
    st[c] = uint16_t(std::min(z, kEscape) + (delta ? kMaxSymbols : 0));
  }
}

// Blocks of 16 channels in 16-bit lanes, from the last block down so that
// escapes come out in coding order. A raw code's zigzag fits 16 bits (|q|
// <= 32767), and so does a residual unless it overflows int16, which
// saturating and wrapping subtraction tell apart.
KVCAST_AVX2 void SymbolizeAvx2(const int16_t* q, const uint8_t* same, const uint16_t* masks,
                               int tokens, int d, uint16_t* sym, uint32_t* counts,
                               EncodeStream* streams) {
  const __m256i kEsc = _mm256_set1_epi16(kEscape);
  const __m256i kSyms = _mm256_set1_epi16(kMaxSymbols);
  const __m256i bits = _mm256_setr_epi16(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096,
                                         8192, 16384, -32768);
  for (int t = 0; t < tokens; ++t) {
    const int16_t* qt = q + size_t(t) * d;
    uint16_t* st = sym + size_t(t) * d;
    for (int c = d - 16; c >= 0; c -= 16) {
      const uint32_t dm = same[t] ? masks[c / 16] : 0;
      __m256i r = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qt + c));
      const __m256i dv =
          _mm256_cmpeq_epi16(_mm256_and_si256(_mm256_set1_epi16(int16_t(dm)), bits), bits);
      if (dm) {
        const __m256i prev = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qt + c - d));
        const __m256i wrapped = _mm256_sub_epi16(r, prev);
        const __m256i saturated = _mm256_subs_epi16(r, prev);
        if (_mm256_movemask_epi8(_mm256_and_si256(
                dv, _mm256_xor_si256(_mm256_cmpeq_epi16(wrapped, saturated),
                                     _mm256_set1_epi16(-1)))) != 0) {
          SymbolizeBlockScalar(qt, d, c, dm, st, &streams[t]);
          continue;
        }
        r = _mm256_blendv_epi8(r, wrapped, dv);
      }
      const __m256i z = _mm256_xor_si256(_mm256_slli_epi16(r, 1), _mm256_srai_epi16(r, 15));
      const __m256i sy = _mm256_min_epu16(z, kEsc);
      // Two mask bits a lane: the lanes whose z reached 255.
      if (const uint32_t esc = uint32_t(_mm256_movemask_epi8(_mm256_cmpeq_epi16(sy, kEsc)))) {
        alignas(32) uint16_t zs[16];
        _mm256_store_si256(reinterpret_cast<__m256i*>(zs), z);
        for (uint32_t m = esc & 0x55555555u; m != 0;) {  // from the last lane down
          const int bit = 31 - __builtin_clz(m);
          streams[t].escapes.push_back(uint32_t(zs[bit / 2]) - kEscape);
          m &= ~(1u << bit);
        }
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(st + c),
                          _mm256_add_epi16(sy, _mm256_and_si256(dv, kSyms)));
    }
  }
  CountSymbolsImpl(sym, size_t(tokens) * d, counts);
}

// Index of the first largest of freqs[0, n) (n >= 1), as std::max_element.
inline int FirstLargest(const uint16_t* freqs, int n) {
  return int(std::max_element(freqs, freqs + n) - freqs);
}

// NormalizeFrequencies (rans.cc), 4 symbols at a time in doubles, exact as
// the AVX-512 kernel's (encode_kernels.cc states why).
KVCAST_AVX2 void NormalizeAvx2(const uint32_t* counts, int n, uint16_t* freqs) {
  uint64_t total = 0;
  for (int s = 0; s < n; ++s) total += counts[s];
  if (total == 0) {
    std::fill(freqs, freqs + n, 0);
    return;
  }
  const __m256d one = _mm256_set1_pd(1.0), scale = _mm256_set1_pd(kProbScale);
  const __m256d dtotal = _mm256_set1_pd(double(total)), rcp = _mm256_set1_pd(1.0 / double(total));
  int32_t sum = 0;
  for (int s = 0; s < n; s += 4) {
    const int live = std::min(4, n - s);
    const __m128i lanes = _mm_cmpgt_epi32(_mm_set1_epi32(live), _mm_setr_epi32(0, 1, 2, 3));
    const __m128i c = _mm_maskload_epi32(reinterpret_cast<const int*>(counts + s), lanes);
    // Unsigned counts to doubles, exactly: signed after flipping the top
    // bit, then 2^31 back.
    const __m256d cd = _mm256_add_pd(
        _mm256_cvtepi32_pd(_mm_xor_si128(c, _mm_set1_epi32(int(0x80000000u)))),
        _mm256_set1_pd(2147483648.0));
    const __m256d a = _mm256_mul_pd(cd, scale);
    __m256d q = _mm256_round_pd(_mm256_mul_pd(a, rcp), _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256d low = _mm256_cmp_pd(_mm256_mul_pd(_mm256_add_pd(q, one), dtotal), a, _CMP_LE_OQ);
    q = _mm256_add_pd(q, _mm256_and_pd(low, one));
    __m128i f = _mm256_cvttpd_epi32(_mm256_max_pd(q, one));
    f = _mm_andnot_si128(_mm_cmpeq_epi32(c, _mm_setzero_si128()), f);  // no count: 0
    alignas(16) int32_t out[4];
    _mm_store_si128(reinterpret_cast<__m128i*>(out), f);
    for (int k = 0; k < live; ++k) {
      freqs[s + k] = uint16_t(out[k]);
      sum += out[k];
    }
  }
  SettleSurplus(int32_t(kProbScale) - sum, freqs, n, FirstLargest);
}

// floor(x / f) and x mod f for x < f 2^20, f = 1 .. 4096. x is made a
// float exactly but for one rounding (its high and low 16 bits fused),
// 1/f from rcp (2^-11.4) and one Newton step, so the quotient is within
// 2^-21.4 of x / f relatively, under 0.4 from it for quotients below 2^20:
// truncated, it is floor(x / f) or one either side, which one correction
// each way fixes.
KVCAST_AVX2 __attribute__((always_inline)) inline __m256i DivideAvx2(__m256i x, __m256i f,
                                                                    __m256i* rem) {
  const __m256 ff = _mm256_cvtepi32_ps(f);
  const __m256 r0 = _mm256_rcp_ps(ff);
  const __m256 r1 = _mm256_mul_ps(r0, _mm256_fnmadd_ps(ff, r0, _mm256_set1_ps(2.f)));
  const __m256 xf = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(x, 16)),
                                    _mm256_set1_ps(65536.f),
                                    _mm256_cvtepi32_ps(_mm256_and_si256(x, _mm256_set1_epi32(0xffff))));
  __m256i quot = _mm256_cvttps_epi32(_mm256_mul_ps(xf, r1));
  __m256i m = _mm256_sub_epi32(x, _mm256_mullo_epi32(quot, f));  // in (-f, 2f)
  const __m256i under = _mm256_cmpgt_epi32(_mm256_setzero_si256(), m);
  quot = _mm256_add_epi32(quot, under);  // -1 where under
  m = _mm256_add_epi32(m, _mm256_and_si256(under, f));
  const __m256i over = _mm256_cmpgt_epi32(m, _mm256_sub_epi32(f, _mm256_set1_epi32(1)));
  quot = _mm256_sub_epi32(quot, over);
  *rem = _mm256_sub_epi32(m, _mm256_and_si256(over, f));
  return quot;
}

// kCompressHigh[m]: the permutation that moves the lanes of m, in order, to
// the top of the register (lanes 8 - popcount(m) .. 7).
struct CompressTable {
  alignas(32) std::array<std::array<int32_t, 8>, 256> idx;
  constexpr CompressTable() : idx() {
    for (int m = 0; m < 256; ++m) {
      int k = 8;
      for (int j = 0; j < 8; ++j) k -= (m >> j) & 1;
      for (int j = 0; j < 8; ++j) idx[m][j] = 0;
      for (int j = 0; j < 8; ++j) {
        if ((m >> j) & 1) idx[m][k++] = j;
      }
    }
  }
};
constexpr CompressTable kCompressHigh;

// One block of 16 symbols (table entries entry[0..1]) into the lanes
// x[0..1] of a stream whose words end at *w. Lanes 8-15's words go above
// lanes 0-7's (the stream is read forwards in lane order); each half's
// words are packed to the top of a 16-byte store ending at *w, whose lower
// bytes fall into the stream's free room below.
KVCAST_AVX2 __attribute__((always_inline)) inline void EncodeBlockAvx2(__m256i* x,
                                                                      const __m256i* entry,
                                                                      uint8_t** w) {
  const __m256i low_words = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1,
                                             -1, -1, 0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1,
                                             -1, -1, -1, -1);
#pragma GCC unroll 2
  for (int h = 1; h >= 0; --h) {
    const __m256i f = _mm256_srli_epi32(entry[h], 16);
    __m256i v = x[h];
    // x >= f 2^20, as x / 2^20 > f - 1.
    const __m256i needv =
        _mm256_cmpgt_epi32(_mm256_srli_epi32(v, 20), _mm256_sub_epi32(f, _mm256_set1_epi32(1)));
    const uint32_t need = uint32_t(_mm256_movemask_ps(_mm256_castsi256_ps(needv)));
    // Branch-free (most blocks emit words; without any, the store writes
    // only below *w).
    const __m256i top = _mm256_permutevar8x32_epi32(
        v, _mm256_load_si256(reinterpret_cast<const __m256i*>(kCompressHigh.idx[need].data())));
    const __m256i words = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(top, low_words), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(*w - 16), _mm256_castsi256_si128(words));
    *w -= 2 * _mm_popcnt_u32(need);
    v = _mm256_blendv_epi8(v, _mm256_srli_epi32(v, 16), needv);
    __m256i rem;
    const __m256i quot = DivideAvx2(v, f, &rem);
    x[h] = _mm256_add_epi32(_mm256_add_epi32(_mm256_slli_epi32(quot, kProbBits), rem),
                            _mm256_and_si256(entry[h], _mm256_set1_epi32(0xffff)));
  }
}

// N tokens' chains side by side (independent gathers and divisions in
// flight), states in registers (the loops unrolled: left as loops, the
// states lived on the stack and the kernel ran 20% slower). Four tokens
// ran 1-4% faster than two on Zen 5.
template <int N>
KVCAST_AVX2 void EncodeTokensAvx2(EncodeStream* streams, const uint16_t* sym, int d,
                                  const uint32_t* fc, LinePrefetch* prefetch) {
  __m256i x[N][2];
  uint8_t* w[N];
  LinePrefetch pf = *prefetch;
#pragma GCC unroll 8
  for (int k = 0; k < N; ++k) {
    x[k][0] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(streams[k].state));
    x[k][1] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(streams[k].state + 8));
    w[k] = streams[k].w;
  }
  for (int c = d - 16; c >= 0; c -= 16) {
#pragma GCC unroll 8
    for (int k = 0; k < N; ++k) {
      const uint16_t* s = sym + size_t(k) * d + c;
      const __m256i entry[2] = {
          _mm256_i32gather_epi32(reinterpret_cast<const int*>(fc),
                                 _mm256_cvtepu16_epi32(_mm_loadu_si128(
                                     reinterpret_cast<const __m128i*>(s))), 4),
          _mm256_i32gather_epi32(reinterpret_cast<const int*>(fc),
                                 _mm256_cvtepu16_epi32(_mm_loadu_si128(
                                     reinterpret_cast<const __m128i*>(s + 8))), 4)};
      EncodeBlockAvx2(x[k], entry, &w[k]);
    }
    for (int k = 0; k < N; ++k) pf.Next();
  }
  *prefetch = pf;
#pragma GCC unroll 8
  for (int k = 0; k < N; ++k) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(streams[k].state), x[k][0]);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(streams[k].state + 8), x[k][1]);
    streams[k].w = w[k];
  }
}

KVCAST_AVX2 void EncodeAvx2(EncodeStream* streams, const uint16_t* sym, int tokens, int d,
                            const uint32_t* fc, const double* /*rcp*/, LinePrefetch* pf) {
  int t = 0;
  for (; t + 4 <= tokens; t += 4) EncodeTokensAvx2<4>(streams + t, sym + size_t(t) * d, d, fc, pf);
  for (; t + 2 <= tokens; t += 2) EncodeTokensAvx2<2>(streams + t, sym + size_t(t) * d, d, fc, pf);
  if (t < tokens) EncodeTokensAvx2<1>(streams + t, sym + size_t(t) * d, d, fc, pf);
}

KVCAST_AVX2 void WidenHalfAvx2(const uint16_t* in, size_t n, float* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, Load8(in + i));
  for (; i < n; ++i) out[i] = HalfToFloat(in[i]);
}

KVCAST_AVX2 void DivideForTestAvx2(const uint32_t* x, const uint32_t* f, uint32_t* quot,
                                   uint32_t* rem) {
  for (int h = 0; h < 2; ++h) {
    __m256i r;
    const __m256i q = DivideAvx2(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 8 * h)),
                                 _mm256_loadu_si256(reinterpret_cast<const __m256i*>(f + 8 * h)), &r);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(quot + 8 * h), q);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(rem + 8 * h), r);
  }
}

}  // namespace

void UseAvx2EncoderKernels(EncoderKernels* k) {
  k->abs_max = AbsMaxAvx2;
  k->abs_max_half = AbsMaxHalfAvx2;
  k->quantize = QuantizeAvx2<float>;
  k->quantize_half = QuantizeAvx2<uint16_t>;
  k->symbolize = SymbolizeAvx2;
  k->normalize = NormalizeAvx2;
  k->encode = EncodeAvx2;
  k->widen_half = WidenHalfAvx2;
}

void CountSymbolsAvx2(const uint16_t* sym, size_t n, uint32_t* counts) {
  CountSymbolsImpl(sym, n, counts);
}

void DivideAvx2ForTest(const uint32_t* x, const uint32_t* f, uint32_t* quot, uint32_t* rem) {
  DivideForTestAvx2(x, f, quot, rem);
}

}  // namespace kvcast::kvcache::ac::internal
