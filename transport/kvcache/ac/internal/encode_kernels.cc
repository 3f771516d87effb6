// The ac encoder's unit passes: see encode_kernels.h.
#include "transport/kvcache/ac/internal/encode_kernels.h"

// GCC 12's avx512fintrin.h trips -W(maybe-)uninitialized on its own
// _mm512_undefined operands (a known false positive of those headers).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "common/dtype.h"
#include "transport/kvcache/ac/internal/unit_kernels.h"

namespace kvcast::kvcache::ac::internal {
namespace {

// ---- scalar (the reference) ---------------------------------------------------

// The kernels take float or fp16 values; fp16 widens exactly.
inline float ToFloat(float x) { return x; }
inline float ToFloat(uint16_t h) { return HalfToFloat(h); }

template <typename T>
float AbsMaxScalar(const T* x, int d) {
  float m = 0, probe = 0;
  for (int c = 0; c < d; ++c) {
    const float v = ToFloat(x[c]);
    m = std::max(m, std::fabs(v));
    probe += v * 0.f;  // NaN once any x is inf or NaN
  }
  return probe == 0 ? m : std::numeric_limits<float>::quiet_NaN();
}

template <typename T>
void QuantizeScalar(const T* x, size_t stride, const float* inv, const uint8_t* same,
                    int tokens, int d, int16_t* q, uint32_t* raw, uint32_t* delta) {
  constexpr float kRound = 12582912.f;  // 1.5 * 2^23: adding it rounds half to even
  for (int t = 0; t < tokens; ++t) {
    const T* xt = x + t * stride;
    int16_t* qt = q + size_t(t) * d;
    for (int c = 0; c < d; ++c) {
      const float v = std::clamp(ToFloat(xt[c]) * inv[t], -32767.f, 32767.f);
      qt[c] = int16_t((v + kRound) - kRound);
    }
    if (!same[t]) continue;
    for (int c = 0; c < d; ++c) {
      raw[c] += std::abs(int32_t(qt[c]));
      delta[c] += std::abs(int32_t(qt[c]) - qt[c - d]);
    }
  }
}

void SymbolizeScalar(const int16_t* q, const uint8_t* same, const uint16_t* masks, int tokens,
                     int d, uint16_t* sym, uint32_t* counts, EncodeStream* streams) {
  for (int t = 0; t < tokens; ++t) {
    const int16_t* qt = q + size_t(t) * d;
    uint16_t* st = sym + size_t(t) * d;
    for (int c = d - 1; c >= 0; --c) {
      const bool delta = same[t] && ((masks[c / 16] >> (c % 16)) & 1);
      const uint32_t z = ZigZag(delta ? int32_t(qt[c]) - qt[c - d] : qt[c]);
      if (z >= kEscape) streams[t].escapes.push_back(z - kEscape);
      st[c] = uint16_t(std::min(z, kEscape) + (delta ? kMaxSymbols : 0));
      ++counts[st[c]];
    }
  }
}

void EncodeScalar(EncodeStream* streams, const uint16_t* sym, int tokens, int d,
                  const uint32_t* fc, const double* rcp, LinePrefetch* /*pf*/) {
  for (int t = 0; t < tokens; ++t) {
    EncodeStream& st = streams[t];
    const uint16_t* s = sym + size_t(t) * d;
    for (int c = d - 1; c >= 0; --c) RansEncode(&st.state[c % kLanes], fc[s[c]], rcp[s[c]], &st.w);
  }
}

uint8_t* PutEscapesScalar(const uint32_t* escapes, size_t n, uint8_t* p) {
  while (n > 0) p = PutVarint(escapes[--n], p);
  return p;
}

uint8_t* PutVarintsScalar(const uint16_t* v, size_t n, uint8_t* p) {
  for (size_t i = 0; i < n; ++i) p = PutVarint(v[i], p);
  return p;
}

void WidenHalfScalar(const uint16_t* in, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = HalfToFloat(in[i]);
}

void NormalizeScalar(const uint32_t* counts, int n, uint16_t* freqs) {
  NormalizeFrequencies(absl::MakeConstSpan(counts, n), freqs);
}

// ---- AVX-512 -------------------------------------------------------------------

#define KVCAST_AVX512 __attribute__((target("avx512f,avx512bw,avx512vbmi2,bmi2,popcnt,sse4.1,f16c")))

KVCAST_AVX512 inline __m512 Load16(const float* x) { return _mm512_loadu_ps(x); }
KVCAST_AVX512 inline __m512 Load16(const uint16_t* x) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)));
}

template <typename T>
KVCAST_AVX512 float AbsMaxAvx512(const T* x, int d) {
  __m512 m = _mm512_setzero_ps();
  __mmask16 finite = 0xffff;
  const __m512 big = _mm512_set1_ps(std::numeric_limits<float>::max());
  for (int c = 0; c < d; c += 16) {
    const __m512 a = _mm512_abs_ps(Load16(x + c));
    finite &= _mm512_cmp_ps_mask(a, big, _CMP_LE_OQ);
    m = _mm512_max_ps(m, a);
  }
  return finite == 0xffff ? _mm512_reduce_max_ps(m) : std::numeric_limits<float>::quiet_NaN();
}

// fp16 without widening: a finite half's magnitude bits order as its
// value, so the largest of 32 at a time is an unsigned 16-bit max; 0x7c00
// and above are infinities and NaNs.
template <>
KVCAST_AVX512 float AbsMaxAvx512(const uint16_t* x, int d) {
  const __m512i magnitude = _mm512_set1_epi16(0x7fff);
  __m512i m = _mm512_setzero_si512();
  int c = 0;
  for (; c + 32 <= d; c += 32) {
    m = _mm512_max_epu16(m, _mm512_and_si512(_mm512_loadu_si512(x + c), magnitude));
  }
  if (c < d) {  // d is a multiple of 16
    m = _mm512_max_epu16(m, _mm512_and_si512(_mm512_castsi256_si512(_mm256_loadu_si256(
                                                 reinterpret_cast<const __m256i*>(x + c))),
                                             magnitude));
  }
  __m256i h = _mm256_max_epu16(_mm512_castsi512_si256(m), _mm512_extracti64x4_epi64(m, 1));
  __m128i l = _mm_max_epu16(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
  // The largest of 8 as the smallest of their complements (phminposuw).
  const __m128i least = _mm_minpos_epu16(_mm_xor_si128(l, _mm_set1_epi16(-1)));
  const uint16_t top = uint16_t(~_mm_extract_epi16(least, 0));
  return top >= 0x7c00 ? std::numeric_limits<float>::quiet_NaN() : _cvtsh_ss(top);
}

// Up to 8 blocks of 16 channels (the unit's, or 128 of them at a time)
// down every token, so that the mode costs and the previous token's codes
// stay in registers instead of a load and a store per token. Each token's
// values are still read in one run: one block down every token, tried
// first, read a float unit 64 bytes at a time 256 KiB apart, which missed
// L1 at every token (quantizing took 1.8x as long).
template <int kBlocks, typename T>
KVCAST_AVX512 __attribute__((always_inline)) inline void QuantizeBlocks(
    const T* x, size_t stride, const float* inv, const uint8_t* same, int tokens, int d,
    int16_t* q, uint32_t* raw, uint32_t* delta) {
  const __m512 lo = _mm512_set1_ps(-32767.f), hi = _mm512_set1_ps(32767.f);
  __m512i raw_sum[kBlocks], delta_sum[kBlocks], prev[kBlocks];
  for (int b = 0; b < kBlocks; ++b) {
    raw_sum[b] = _mm512_loadu_si512(raw + 16 * b);
    delta_sum[b] = _mm512_loadu_si512(delta + 16 * b);
    prev[b] = _mm512_setzero_si512();
  }
  for (int t = 0; t < tokens; ++t) {
    const __m512 vinv = _mm512_set1_ps(inv[t]);
    const bool costs = same[t];
#pragma GCC unroll 8
    for (int b = 0; b < kBlocks; ++b) {
      const __m512 v =
          _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(Load16(x + t * stride + 16 * b), vinv), lo), hi);
      // cvtps rounds half to even (the default MXCSR mode), as the scalar code.
      const __m512i a = _mm512_cvtps_epi32(v);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + size_t(t) * d + 16 * b),
                          _mm512_cvtepi32_epi16(a));
      if (costs) {
        raw_sum[b] = _mm512_add_epi32(raw_sum[b], _mm512_abs_epi32(a));
        delta_sum[b] = _mm512_add_epi32(delta_sum[b], _mm512_abs_epi32(_mm512_sub_epi32(a, prev[b])));
      }
      prev[b] = a;
    }
  }
  for (int b = 0; b < kBlocks; ++b) {
    _mm512_storeu_si512(raw + 16 * b, raw_sum[b]);
    _mm512_storeu_si512(delta + 16 * b, delta_sum[b]);
  }
}

template <typename T>
KVCAST_AVX512 void QuantizeAvx512(const T* x, size_t stride, const float* inv,
                                  const uint8_t* same, int tokens, int d, int16_t* q,
                                  uint32_t* raw, uint32_t* delta) {
  for (int c = 0; c < d;) {
    const int left = (d - c) / 16;
    if (left >= 8) {
      QuantizeBlocks<8>(x + c, stride, inv, same, tokens, d, q + c, raw + c, delta + c);
      c += 128;
    } else if (left >= 4) {
      QuantizeBlocks<4>(x + c, stride, inv, same, tokens, d, q + c, raw + c, delta + c);
      c += 64;
    } else {
      QuantizeBlocks<1>(x + c, stride, inv, same, tokens, d, q + c, raw + c, delta + c);
      c += 16;
    }
  }
}

// A token's escapes go to room for d of them at the end of its list, made
// at the first one and cut to size after the last (a resize per block with
// escapes was 3% of encode time on KV with many).
class EscapeList {
 public:
  EscapeList(decltype(EncodeStream::escapes)* out, int d) : out_(out), had_(out->size()), d_(d) {}
  ~EscapeList() {
    if (e_ != nullptr) out_->resize(e_ - out_->data());
  }
  uint32_t* At() {
    if (e_ == nullptr) {
      out_->resize(had_ + d_);
      e_ = out_->data() + had_;
    }
    return e_;
  }
  void Advance(int n) { e_ += n; }

 private:
  decltype(EncodeStream::escapes)* out_;
  size_t had_;
  int d_;
  uint32_t* e_ = nullptr;
};

// Channels [c, c + 16) of token codes qt (the previous token's at qt - d)
// in 32-bit lanes, exact for any codes.
KVCAST_AVX512 __attribute__((always_inline)) inline void Symbolize16(const int16_t* qt, int d,
                                                                    int c, __mmask16 dm,
                                                                    uint16_t* st,
                                                                    EscapeList* escapes) {
  const __m512i kEsc = _mm512_set1_epi32(kEscape);
  __m512i r = _mm512_cvtepi16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qt + c)));
  if (dm) {
    r = _mm512_mask_sub_epi32(
        r, dm, r,
        _mm512_cvtepi16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qt + c - d))));
  }
  const __m512i z = _mm512_xor_si512(_mm512_slli_epi32(r, 1), _mm512_srai_epi32(r, 31));
  if (const __mmask16 esc = _mm512_cmpge_epu32_mask(z, kEsc)) {
    // z - 255 of the escapes from the last lane down: lanes reversed, then
    // compressed in a register and stored contiguously.
    const __m512i zr = _mm512_permutexvar_epi32(
        _mm512_set_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), z);
    const int count = _mm_popcnt_u32(esc);
    _mm512_mask_storeu_epi32(escapes->At(), (1u << count) - 1,
                             _mm512_maskz_compress_epi32(_mm512_cmpge_epu32_mask(zr, kEsc),
                                                         _mm512_sub_epi32(zr, kEsc)));
    escapes->Advance(count);
  }
  const __m512i sy = _mm512_min_epu32(z, kEsc);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(st + c),
                      _mm512_cvtepi32_epi16(_mm512_mask_add_epi32(
                          sy, dm, sy, _mm512_set1_epi32(kMaxSymbols))));
}

// Pairs of blocks (32 channels) in 16-bit lanes, half the operations of
// 32-bit ones: a raw code's zigzag fits 16 bits (|q| <= 32767), and so
// does a residual unless it overflows int16, which saturating and
// wrapping subtraction tell apart; such a pair takes the 32-bit path.
KVCAST_AVX512 void SymbolizeAvx512(const int16_t* q, const uint8_t* same, const uint16_t* masks,
                                   int tokens, int d, uint16_t* sym, uint32_t* counts,
                                   EncodeStream* streams) {
  const __m512i kEsc = _mm512_set1_epi16(kEscape);
  const __m512i kSyms = _mm512_set1_epi16(kMaxSymbols);
  __m512i reverse;
  {
    alignas(64) int16_t idx[32];
    for (int i = 0; i < 32; ++i) idx[i] = int16_t(31 - i);
    reverse = _mm512_load_si512(idx);
  }
  for (int t = 0; t < tokens; ++t) {
    const int16_t* qt = q + size_t(t) * d;
    uint16_t* st = sym + size_t(t) * d;
    EscapeList escapes(&streams[t].escapes, d);
    // From the last block down, so that escapes come out in coding order.
    int c = d - 16;
    if (d % 32 != 0) {
      Symbolize16(qt, d, c, same[t] ? masks[c / 16] : 0, st, &escapes);
      c -= 16;
    }
    for (c -= 16; c >= 0; c -= 32) {
      const __mmask32 dm = same[t] ? masks[c / 16] | uint32_t(masks[c / 16 + 1]) << 16 : 0;
      __m512i r = _mm512_loadu_si512(qt + c);
      if (dm) {
        const __m512i prev = _mm512_loadu_si512(qt + c - d);
        const __m512i wrapped = _mm512_mask_sub_epi16(r, dm, r, prev);
        r = _mm512_mask_subs_epi16(r, dm, r, prev);
        if (_mm512_cmpneq_epi16_mask(r, wrapped) != 0) {
          Symbolize16(qt, d, c + 16, __mmask16(dm >> 16), st, &escapes);
          Symbolize16(qt, d, c, __mmask16(dm), st, &escapes);
          continue;
        }
      }
      const __m512i z = _mm512_xor_si512(_mm512_slli_epi16(r, 1), _mm512_srai_epi16(r, 15));
      if (const __mmask32 esc = _mm512_cmpge_epu16_mask(z, kEsc)) {
        // z - 255 (below 2^16) of the escapes from the last lane down,
        // compressed in 16-bit lanes and widened as they are stored.
        const __m512i zr = _mm512_permutexvar_epi16(reverse, z);
        const __m512i packed = _mm512_maskz_compress_epi16(_mm512_cmpge_epu16_mask(zr, kEsc),
                                                           _mm512_sub_epi16(zr, kEsc));
        const int count = _mm_popcnt_u32(esc);
        uint32_t* e = escapes.At();
        _mm512_storeu_si512(e, _mm512_cvtepu16_epi32(_mm512_castsi512_si256(packed)));
        if (count > 16) {
          _mm512_storeu_si512(e + 16, _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(packed, 1)));
        }
        escapes.Advance(count);
      }
      const __m512i sy = _mm512_min_epu16(z, kEsc);
      _mm512_storeu_si512(st + c, _mm512_mask_add_epi16(sy, dm, sy, kSyms));
    }
  }
  CountSymbolsAvx2(sym, size_t(tokens) * d, counts);  // AVX-512 CPUs have AVX2
}

// floor(x / f) and x mod f for x < f 2^20, f = 1 .. 4096. A float quotient
// from rcp14 and one Newton step is within 2^-21.9 of x / f relatively
// (rcp14's 2^-14 squares away; four roundings of 2^-24 remain), so under
// 0.27 from it for quotients below 2^20. Lowered by 0.3 and truncated (to
// 0 when negative) it is floor(x / f) or one less, which one correction
// fixes. Exact, so the bytes are the scalar coder's (its double reciprocal
// is exact too).
KVCAST_AVX512 __attribute__((always_inline)) inline __m512i DivideAvx512(__m512i x, __m512i f,
                                                                        __m512i* rem) {
  const __m512 ff = _mm512_cvtepi32_ps(f);
  const __m512 r0 = _mm512_rcp14_ps(ff);
  const __m512 r1 = _mm512_mul_ps(r0, _mm512_fnmadd_ps(ff, r0, _mm512_set1_ps(2.f)));
  __m512i quot = _mm512_cvttps_epi32(
      _mm512_fmsub_ps(_mm512_cvtepu32_ps(x), r1, _mm512_set1_ps(0.3f)));
  __m512i m = _mm512_sub_epi32(x, _mm512_mullo_epi32(quot, f));  // in [0, 2f)
  const __mmask16 high = _mm512_cmpge_epu32_mask(m, f);
  quot = _mm512_mask_sub_epi32(quot, high, quot, _mm512_set1_epi32(-1));
  *rem = _mm512_mask_sub_epi32(m, high, m, f);
  return quot;
}

// One block of 16 symbols (table entries `entry`) into the lanes x of a
// stream whose words end at *w.
KVCAST_AVX512 __attribute__((always_inline)) inline void EncodeBlockAvx512(__m512i* x,
                                                                          __m512i entry,
                                                                          uint8_t** w) {
  const __m512i f = _mm512_srli_epi32(entry, 16);
  __m512i v = *x;
  // x >= f 2^20, as x / 2^20 >= f (also for f = 4096, which never needs it).
  const __mmask16 need = _mm512_cmpge_epu32_mask(_mm512_srli_epi32(v, 20), f);
  // Branch-free (most blocks emit words): compress in a register, then a
  // contiguous masked store of `count` words (a compressing store to memory
  // is microcoded and slow; an empty mask stores nothing).
  const int count = _mm_popcnt_u32(need);
  *w -= 2 * count;
  _mm512_mask_storeu_epi16(*w, (1u << count) - 1,
                           _mm512_maskz_compress_epi16(_pdep_u32(need, 0x55555555), v));
  v = _mm512_mask_srli_epi32(v, need, v, 16);
  __m512i rem;
  const __m512i quot = DivideAvx512(v, f, &rem);
  *x = _mm512_add_epi32(_mm512_add_epi32(_mm512_slli_epi32(quot, kProbBits), rem),
                        _mm512_and_si512(entry, _mm512_set1_epi32(0xffff)));
}

// N tokens' chains side by side (independent gathers and divisions in
// flight), states in registers.
template <int N>
KVCAST_AVX512 void EncodeTokensAvx512(EncodeStream* streams, const uint16_t* sym, int d,
                                      const uint32_t* fc, LinePrefetch* prefetch) {
  __m512i x[N];
  uint8_t* w[N];
  LinePrefetch pf = *prefetch;  // in registers
#pragma GCC unroll 8
  for (int k = 0; k < N; ++k) {
    x[k] = _mm512_loadu_si512(streams[k].state);
    w[k] = streams[k].w;
  }
  for (int c = d - 16; c >= 0; c -= 16) {
#pragma GCC unroll 8
    for (int k = 0; k < N; ++k) {
      const __m512i idx = _mm512_cvtepu16_epi32(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sym + size_t(k) * d + c)));
      EncodeBlockAvx512(&x[k], _mm512_i32gather_epi32(idx, fc, 4), &w[k]);
    }
    // The round's prefetches after its blocks, not between them: there the
    // prefetcher's state went in and out of vector registers (no general
    // ones were left), and encode ran 2-3% slower.
    for (int k = 0; k < N; ++k) pf.Next();
  }
  *prefetch = pf;
#pragma GCC unroll 8
  for (int k = 0; k < N; ++k) {
    _mm512_storeu_si512(streams[k].state, x[k]);
    streams[k].w = w[k];
  }
}

KVCAST_AVX512 void EncodeAvx512(EncodeStream* streams, const uint16_t* sym, int tokens, int d,
                                const uint32_t* fc, const double* /*rcp*/, LinePrefetch* pf) {
  constexpr int kBatch = 8;
  int t = 0;
  for (; t + kBatch <= tokens; t += kBatch) {
    EncodeTokensAvx512<kBatch>(streams + t, sym + size_t(t) * d, d, fc, pf);
  }
  for (; t + 2 <= tokens; t += 2) EncodeTokensAvx512<2>(streams + t, sym + size_t(t) * d, d, fc, pf);
  if (t < tokens) EncodeTokensAvx512<1>(streams + t, sym + size_t(t) * d, d, fc, pf);
}

// 16 values below 2^14 (lanes in the order written) as varints at p, 16
// to 32 bytes: each lane's two bytes side by side, the second kept where
// the value needs it, packed by a byte compress. Returns the bytes written.
KVCAST_AVX512 __attribute__((always_inline)) inline int PackSmallVarints(__m512i v, uint8_t* p) {
  const __m512i low7 = _mm512_set1_epi32(0x7f);
  const __mmask16 two = _mm512_cmpgt_epu32_mask(v, low7);
  const __m512i first = _mm512_mask_or_epi32(_mm512_and_si512(v, low7), two,
                                             _mm512_and_si512(v, low7), _mm512_set1_epi32(0x80));
  const __m512i pair = _mm512_or_si512(first, _mm512_slli_epi32(_mm512_srli_epi32(v, 7), 8));
  const __mmask64 keep = 0x1111111111111111ull | _pdep_u64(two, 0x2222222222222222ull);
  const int count = 16 + _mm_popcnt_u32(two);
  _mm512_mask_storeu_epi8(p, (1ull << count) - 1, _mm512_maskz_compress_epi8(keep, pair));
  return count;
}

// PutEscapesScalar 16 escapes at a time while they are below 2^14 (one or
// two bytes each).
KVCAST_AVX512 uint8_t* PutEscapesAvx512(const uint32_t* escapes, size_t n, uint8_t* p) {
  const __m512i reverse = _mm512_set_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i small = _mm512_set1_epi32(1 << 14);
  while (n >= 16) {
    const __m512i v = _mm512_permutexvar_epi32(reverse, _mm512_loadu_si512(escapes + n - 16));
    if (_mm512_cmpge_epu32_mask(v, small) != 0) {
      for (int i = 0; i < 16; ++i) p = PutVarint(escapes[--n], p);
      continue;
    }
    p += PackSmallVarints(v, p);
    n -= 16;
  }
  return PutEscapesScalar(escapes, n, p);
}

// PutVarintsScalar 16 values at a time while they are below 2^14 (a
// table's frequencies always are).
KVCAST_AVX512 uint8_t* PutVarintsAvx512(const uint16_t* v, size_t n, uint8_t* p) {
  const __m512i small = _mm512_set1_epi32(1 << 14);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i x = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + i)));
    if (_mm512_cmpge_epu32_mask(x, small) != 0) {
      for (int k = 0; k < 16; ++k) p = PutVarint(v[i + k], p);
      continue;
    }
    p += PackSmallVarints(x, p);
  }
  return PutVarintsScalar(v + i, n - i, p);
}

// Index of the first largest of freqs[0, n) (n >= 1), as std::max_element.
KVCAST_AVX512 int FirstLargestAvx512(const uint16_t* freqs, int n) {
  __m512i top = _mm512_setzero_si512();
  for (int s = 0; s < n; s += 32) {
    const __mmask32 live = n - s >= 32 ? ~0u : (1u << (n - s)) - 1;
    top = _mm512_max_epu16(top, _mm512_maskz_loadu_epi16(live, freqs + s));
  }
  const int largest = _mm512_reduce_max_epi32(
      _mm512_max_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(top)),
                       _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(top, 1))));
  const __m512i want = _mm512_set1_epi16(int16_t(largest));
  for (int s = 0;; s += 32) {
    const __mmask32 live = n - s >= 32 ? ~0u : (1u << (n - s)) - 1;
    const __mmask32 hit = _mm512_mask_cmpeq_epi16_mask(live, _mm512_maskz_loadu_epi16(live, freqs + s), want);
    if (hit) return s + __builtin_ctz(hit);
  }
}

// One table's frequencies: rans.cc's NormalizeFrequencies, the same
// arithmetic 8 symbols at a time in doubles. Its products and sums are
// integers below 2^53 (a = count * M < 2^44, (q + 1) * total < 2^53), so
// exact in doubles, and the quotient is the same double product truncated:
// the same frequencies. A scalar symbol took about 20 instructions (two
// 64-bit multiplies and conversions, a compare, selects), a tenth of the
// encoder's time on SmolLM2's shape.
KVCAST_AVX512 void NormalizeAvx512(const uint32_t* counts, int n, uint16_t* freqs) {
  uint64_t total = 0;
  for (int s = 0; s < n; ++s) total += counts[s];
  if (total == 0) {
    std::fill(freqs, freqs + n, 0);
    return;
  }
  const __m512d one = _mm512_set1_pd(1.0), scale = _mm512_set1_pd(kProbScale);
  const __m512d dtotal = _mm512_set1_pd(double(total)), rcp = _mm512_set1_pd(1.0 / double(total));
  __m512i sum = _mm512_setzero_si512();
  for (int s = 0; s < n; s += 16) {
    const __mmask16 live = n - s >= 16 ? 0xffff : (1u << (n - s)) - 1;
    const __m512i c = _mm512_maskz_loadu_epi32(live, counts + s);
    __m256i half[2];
    for (int h = 0; h < 2; ++h) {
      const __m512d a = _mm512_mul_pd(
          _mm512_cvtepu32_pd(h ? _mm512_extracti64x4_epi64(c, 1) : _mm512_castsi512_si256(c)), scale);
      __m512d q = _mm512_roundscale_pd(_mm512_mul_pd(a, rcp), _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
      const __mmask8 low = _mm512_cmp_pd_mask(_mm512_mul_pd(_mm512_add_pd(q, one), dtotal), a, _CMP_LE_OQ);
      q = _mm512_mask_add_pd(q, low, q, one);
      half[h] = _mm512_cvttpd_epi32(_mm512_max_pd(q, one));
    }
    const __m512i f = _mm512_maskz_mov_epi32(
        _mm512_test_epi32_mask(c, c),
        _mm512_inserti64x4(_mm512_castsi256_si512(half[0]), half[1], 1));
    sum = _mm512_add_epi32(sum, f);
    _mm512_mask_cvtepi32_storeu_epi16(freqs + s, live, f);
  }
  SettleSurplus(int32_t(kProbScale) - _mm512_reduce_add_epi32(sum), freqs, n, FirstLargestAvx512);
}

KVCAST_AVX512 void WidenHalfAvx512(const uint16_t* in, size_t n, float* out) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, Load16(in + i));
  WidenHalfScalar(in + i, n - i, out + i);
}

KVCAST_AVX512 void DivideForTestAvx512(const uint32_t* x, const uint32_t* f, uint32_t* quot,
                                       uint32_t* rem) {
  __m512i r;
  _mm512_storeu_si512(quot, DivideAvx512(_mm512_loadu_si512(x), _mm512_loadu_si512(f), &r));
  _mm512_storeu_si512(rem, r);
}

}  // namespace

EncoderKernels SelectEncoderKernels() {
  if (ActiveKernelSet() == KernelSet::kAvx512) {
    return {AbsMaxAvx512<float>,   AbsMaxAvx512<uint16_t>, QuantizeAvx512<float>,
            QuantizeAvx512<uint16_t>, SymbolizeAvx512,     NormalizeAvx512,
            EncodeAvx512,          PutEscapesAvx512,       PutVarintsAvx512,
            WidenHalfAvx512};
  }
  EncoderKernels k = {AbsMaxScalar<float>,   AbsMaxScalar<uint16_t>, QuantizeScalar<float>,
                      QuantizeScalar<uint16_t>, SymbolizeScalar,     NormalizeScalar,
                      EncodeScalar,          PutEscapesScalar,       PutVarintsScalar,
                      WidenHalfScalar};
  if (ActiveKernelSet() == KernelSet::kAvx2) UseAvx2EncoderKernels(&k);
  return k;
}

bool DivideForTest(KernelSet set, const uint32_t* x, const uint32_t* f, uint32_t* quot,
                   uint32_t* rem) {
  if (set == KernelSet::kScalar || !KernelSetAvailable(set)) return false;
  if (set == KernelSet::kAvx2) {
    DivideAvx2ForTest(x, f, quot, rem);
  } else {
    DivideForTestAvx512(x, f, quot, rem);
  }
  return true;
}

}  // namespace kvcast::kvcache::ac::internal
