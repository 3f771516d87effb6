// The ac codec's unit kernels: see unit_kernels.h.
#include "transport/kvcache/ac/internal/unit_kernels.h"

// GCC 12's avx512fintrin.h trips -Wmaybe-uninitialized on its own
// _mm512_undefined operands (a known false positive of those headers).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace kvcast::kvcache::ac::internal {
namespace {

std::atomic<bool> g_force_scalar{false};

inline uint32_t ZigZag(int32_t r) { return (uint32_t(r) << 1) ^ uint32_t(r >> 31); }
inline int32_t UnZigZag(uint32_t z) { return int32_t(z >> 1) ^ -int32_t(z & 1); }

// z of an escape symbol: 255 + the next varint, or false.
inline bool ReadEscape(DecodeCursor* cur, uint32_t* z) {
  uint32_t extra;
  if (!GetVarint(&cur->esc, cur->end, &extra) || extra > kMaxEscape) return false;
  *z = kEscape + extra;
  return true;
}

const char* DecodeOneScalar(DecodeCursor* cur, const uint32_t* slots, const uint16_t* masks,
                            bool same, int32_t* prev, float step, int d, float* out) {
  for (int b = 0; b < d / 16; ++b) {
    const uint32_t m = same ? masks[b] : 0;
    for (int j = 0; j < 16; ++j) {
      const int c = b * 16 + j;
      const bool delta = (m >> j) & 1;
      uint32_t z = RansDecode(&cur->state[j], slots + (delta ? kProbScale : 0), &cur->w,
                              cur->words_end, &cur->overrun);
      if (z == kEscape && !ReadEscape(cur, &z)) return "bad escape";
      const int64_t q = int64_t(UnZigZag(z)) + (delta ? prev[c] : 0);
      if (q > kMaxCode || q < -kMaxCode) return "a code out of range";
      prev[c] = int32_t(q);
      out[c] = float(int32_t(q)) * step;
    }
  }
  return nullptr;
}

// z - 255 of an escaped symbol c.
inline uint32_t EscapeOf(const uint16_t* sym, const int16_t* q, const int16_t* q_prev, int c) {
  const bool delta = sym[c] >= kMaxSymbols;
  return ZigZag(delta ? int32_t(q[c]) - q_prev[c] : q[c]) - kEscape;
}

const char* DecodeUnitScalar(DecodeCursor* const* curs, int count, const uint32_t* slots,
                             const uint16_t* masks, const bool* same, int32_t* prev,
                             const float* steps, int d, float* const* outs) {
  for (int k = 0; k < count; ++k) {
    if (const char* why = DecodeOneScalar(curs[k], slots, masks, same[k], prev, steps[k], d, outs[k])) {
      return why;
    }
  }
  return nullptr;
}

void EncodeUnitScalar(EncodeStream* const* streams, const EncodeUnitInput* in, int count,
                      const uint32_t* fc, const double* rcp, int d) {
  for (int k = 0; k < count; ++k) {
    EncodeStream& st = *streams[k];
    const uint16_t* sym = in[k].sym;
    for (int c = d - 1; c >= 0; --c) {
      if ((sym[c] & (kMaxSymbols - 1)) == kEscape) {
        st.escapes.push_back(EscapeOf(sym, in[k].q, in[k].q_prev, c));
      }
      RansEncode(&st.state[c % kLanes], fc[sym[c]], rcp[sym[c]], &st.w);
    }
  }
}

void SymbolizeScalar(const int16_t* q, const int16_t* prev, const uint16_t* masks, int d,
                     uint16_t* sym) {
  for (int c = 0; c < d; ++c) {
    const bool delta = masks && ((masks[c / 16] >> (c % 16)) & 1);
    const uint32_t z = ZigZag(delta ? int32_t(q[c]) - prev[c] : q[c]);
    sym[c] = uint16_t(std::min(z, kEscape) + (delta ? kMaxSymbols : 0));
  }
}

#define KVCAST_AVX512 __attribute__((target("avx512f,avx512bw,avx512vbmi2,bmi2,popcnt")))

// One block of 16 values of one token: the rANS step on the lanes x,
// then the codes (into *q, from *prev_q for delta lanes dm).
KVCAST_AVX512 __attribute__((always_inline)) inline const char* DecodeBlockAvx512(DecodeCursor* cur, __m512i* x,
                                                   const uint32_t* slots, __mmask16 dm,
                                                   __m512i* q) {
  const __m512i k4095 = _mm512_set1_epi32(kProbScale - 1);
  const __m512i k1 = _mm512_set1_epi32(1);
  const __m512i slot = _mm512_and_si512(*x, k4095);
  const __m512i e = _mm512_i32gather_epi32(
      _mm512_mask_add_epi32(slot, dm, slot, _mm512_set1_epi32(kProbScale)), slots, 4);
  const __m512i f = _mm512_add_epi32(_mm512_and_si512(_mm512_srli_epi32(e, 12), k4095), k1);
  __m512i v = _mm512_add_epi32(_mm512_mullo_epi32(f, _mm512_srli_epi32(*x, kProbBits)),
                               _mm512_sub_epi32(slot, _mm512_and_si512(e, k4095)));
  alignas(64) uint32_t lanes[16];
  if (const __mmask16 need = _mm512_cmplt_epu32_mask(v, _mm512_set1_epi32(kStateLow))) {
    const int count = _mm_popcnt_u32(need);
    if (cur->words_end - cur->w >= 2 * count) {
      const __m512i words = _mm512_maskz_expandloadu_epi16(_pdep_u32(need, 0x55555555), cur->w);
      v = _mm512_mask_or_epi32(v, need, _mm512_slli_epi32(v, 16), words);
      cur->w += 2 * count;
    } else {  // the stream runs out in this block: lane by lane, as the scalar code
      _mm512_store_si512(lanes, v);
      for (int j = 0; j < 16; ++j) {
        if (!((need >> j) & 1)) continue;
        if (cur->words_end - cur->w >= 2) {
          uint16_t word;
          std::memcpy(&word, cur->w, 2);
          lanes[j] = (lanes[j] << 16) | word;
          cur->w += 2;
        } else {
          cur->overrun = true;
        }
      }
      v = _mm512_load_si512(lanes);
    }
  }
  *x = v;
  __m512i z = _mm512_srli_epi32(e, 24);
  if (const __mmask16 esc = _mm512_cmpeq_epi32_mask(z, _mm512_set1_epi32(kEscape))) {
    _mm512_store_si512(lanes, z);
    for (int j = 0; j < 16; ++j) {
      if (((esc >> j) & 1) && !ReadEscape(cur, &lanes[j])) return "bad escape";
    }
    z = _mm512_load_si512(lanes);
  }
  const __m512i r = _mm512_xor_si512(
      _mm512_srli_epi32(z, 1), _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_and_si512(z, k1)));
  *q = _mm512_mask_add_epi32(r, dm, r, *q);
  if (_mm512_cmpgt_epi32_mask(_mm512_abs_epi32(*q), _mm512_set1_epi32(kMaxCode))) {
    return "a code out of range";
  }
  return nullptr;
}

template <int N>
KVCAST_AVX512 const char* DecodeTokensAvx512(DecodeCursor* const* curs, const uint32_t* slots,
                                             const uint16_t* masks, const bool* same,
                                             int32_t* prev, const float* steps, int d,
                                             float* const* outs) {
  __m512i x[N];
  for (int k = 0; k < N; ++k) x[k] = _mm512_loadu_si512(curs[k]->state);
  for (int b = 0; b < d / 16; ++b) {
    // q carries the previous token's codes into each token's block.
    __m512i q = _mm512_loadu_si512(prev + b * 16);
    for (int k = 0; k < N; ++k) {
      if (const char* why = DecodeBlockAvx512(curs[k], &x[k], slots, same[k] ? masks[b] : 0, &q)) {
        return why;
      }
      _mm512_storeu_ps(outs[k] + b * 16,
                       _mm512_mul_ps(_mm512_cvtepi32_ps(q), _mm512_set1_ps(steps[k])));
    }
    _mm512_storeu_si512(prev + b * 16, q);
  }
  for (int k = 0; k < N; ++k) _mm512_storeu_si512(curs[k]->state, x[k]);
  return nullptr;
}

KVCAST_AVX512 const char* DecodeUnitAvx512(DecodeCursor* const* curs, int count,
                                           const uint32_t* slots, const uint16_t* masks,
                                           const bool* same, int32_t* prev, const float* steps,
                                           int d, float* const* outs) {
  switch (count) {
    case 1: return DecodeTokensAvx512<1>(curs, slots, masks, same, prev, steps, d, outs);
    case 2: return DecodeTokensAvx512<2>(curs, slots, masks, same, prev, steps, d, outs);
    case 3: return DecodeTokensAvx512<3>(curs, slots, masks, same, prev, steps, d, outs);
    default: return DecodeTokensAvx512<4>(curs, slots, masks, same, prev, steps, d, outs);
  }
}

// One block of 16 symbols of one token into its lanes x.
KVCAST_AVX512 __attribute__((always_inline)) inline void EncodeBlockAvx512(EncodeStream* st, const EncodeUnitInput& in, int b,
                                            __m512i* x, const uint32_t* fc, const double* rcp) {
  const __m512i idx = _mm512_cvtepu16_epi32(
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in.sym + b * 16)));
  if (const __mmask16 esc = _mm512_cmpeq_epi32_mask(
          _mm512_and_si512(idx, _mm512_set1_epi32(kMaxSymbols - 1)), _mm512_set1_epi32(kEscape))) {
    for (int j = 15; j >= 0; --j) {
      if ((esc >> j) & 1) st->escapes.push_back(EscapeOf(in.sym, in.q, in.q_prev, b * 16 + j));
    }
  }
  const __m512i entry = _mm512_i32gather_epi32(idx, fc, 4);
  const __m512i f = _mm512_srli_epi32(entry, 16);
  __m512i v = *x;
  const __mmask16 need = _mm512_cmpge_epu32_mask(v, _mm512_slli_epi32(f, 20)) &
                         _mm512_cmplt_epu32_mask(f, _mm512_set1_epi32(kProbScale));
  if (need) {
    // Compress in a register, then a contiguous masked store (a compressing
    // store to memory is microcoded and slow).
    const int count = _mm_popcnt_u32(need);
    st->w -= 2 * count;
    _mm512_mask_storeu_epi16(st->w, (1u << count) - 1,
                             _mm512_maskz_compress_epi16(_pdep_u32(need, 0x55555555), v));
    v = _mm512_mask_srli_epi32(v, need, v, 16);
  }
  // x / f: a float quotient is within 1/8 of the true one (x < f 2^20, so
  // float(x) is off by less than f / 16), so floor it and correct once.
  const __m512i f_s = _mm512_cvttps_epu32(
      _mm512_div_ps(_mm512_cvtepu32_ps(v), _mm512_cvtepi32_ps(f)));
  __m512i quot = f_s;
  __m512i rem = _mm512_sub_epi32(v, _mm512_mullo_epi32(quot, f));
  const __mmask16 low = _mm512_cmplt_epi32_mask(rem, _mm512_setzero_si512());
  quot = _mm512_mask_sub_epi32(quot, low, quot, _mm512_set1_epi32(1));
  rem = _mm512_mask_add_epi32(rem, low, rem, f);
  const __mmask16 high = _mm512_cmpge_epi32_mask(rem, f);
  quot = _mm512_mask_add_epi32(quot, high, quot, _mm512_set1_epi32(1));
  rem = _mm512_mask_sub_epi32(rem, high, rem, f);
  *x = _mm512_add_epi32(_mm512_add_epi32(_mm512_slli_epi32(quot, kProbBits), rem),
                        _mm512_and_si512(entry, _mm512_set1_epi32(0xffff)));
  (void)rcp;
}

template <int N>
KVCAST_AVX512 void EncodeTokensAvx512(EncodeStream* const* streams, const EncodeUnitInput* in,
                                      const uint32_t* fc, const double* rcp, int d) {
  __m512i x[N];
  for (int k = 0; k < N; ++k) x[k] = _mm512_loadu_si512(streams[k]->state);
  for (int b = d / 16 - 1; b >= 0; --b) {
    for (int k = 0; k < N; ++k) EncodeBlockAvx512(streams[k], in[k], b, &x[k], fc, rcp);
  }
  for (int k = 0; k < N; ++k) _mm512_storeu_si512(streams[k]->state, x[k]);
}

KVCAST_AVX512 void EncodeUnitAvx512(EncodeStream* const* streams, const EncodeUnitInput* in,
                                    int count, const uint32_t* fc, const double* rcp, int d) {
  switch (count) {
    case 1: return EncodeTokensAvx512<1>(streams, in, fc, rcp, d);
    case 2: return EncodeTokensAvx512<2>(streams, in, fc, rcp, d);
    case 3: return EncodeTokensAvx512<3>(streams, in, fc, rcp, d);
    default: return EncodeTokensAvx512<4>(streams, in, fc, rcp, d);
  }
}

KVCAST_AVX512 void SymbolizeAvx512(const int16_t* q, const int16_t* prev, const uint16_t* masks,
                                   int d, uint16_t* sym) {
  const __m512i kEsc = _mm512_set1_epi32(kEscape);
  const __m512i kSyms = _mm512_set1_epi32(kMaxSymbols);
  for (int c = 0; c < d; c += 16) {
    const __mmask16 dm = masks ? masks[c / 16] : 0;
    __m512i r = _mm512_cvtepi16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + c)));
    if (dm) {
      r = _mm512_mask_sub_epi32(
          r, dm, r,
          _mm512_cvtepi16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(prev + c))));
    }
    const __m512i z = _mm512_xor_si512(_mm512_slli_epi32(r, 1), _mm512_srai_epi32(r, 31));
    const __m512i s = _mm512_min_epu32(z, kEsc);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(sym + c),
                        _mm512_cvtepi32_epi16(_mm512_mask_add_epi32(s, dm, s, kSyms)));
  }
}

float AbsMaxScalar(const float* x, int d) {
  float m = 0, probe = 0;
  for (int c = 0; c < d; ++c) {
    m = std::max(m, std::fabs(x[c]));
    probe += x[c] * 0.f;  // NaN once any x is inf or NaN
  }
  return probe == 0 ? m : std::numeric_limits<float>::quiet_NaN();
}

void QuantizeScalar(const float* x, int d, float inv, int16_t* q) {
  constexpr float kRound = 12582912.f;  // 1.5 * 2^23: adding it rounds half to even
  for (int c = 0; c < d; ++c) {
    const float v = std::clamp(x[c] * inv, -32767.f, 32767.f);
    q[c] = int16_t((v + kRound) - kRound);
  }
}

void ModeCostsScalar(const int16_t* q, const int16_t* prev, int d, uint32_t* raw,
                     uint32_t* delta) {
  for (int c = 0; c < d; ++c) {
    raw[c] += std::abs(int32_t(q[c]));
    delta[c] += std::abs(int32_t(q[c]) - prev[c]);
  }
}

KVCAST_AVX512 float AbsMaxAvx512(const float* x, int d) {
  __m512 m = _mm512_setzero_ps();
  __mmask16 finite = 0xffff;
  const __m512 big = _mm512_set1_ps(std::numeric_limits<float>::max());
  for (int c = 0; c < d; c += 16) {
    const __m512 a = _mm512_abs_ps(_mm512_loadu_ps(x + c));
    finite &= _mm512_cmp_ps_mask(a, big, _CMP_LE_OQ);
    m = _mm512_max_ps(m, a);
  }
  return finite == 0xffff ? _mm512_reduce_max_ps(m) : std::numeric_limits<float>::quiet_NaN();
}

KVCAST_AVX512 void QuantizeAvx512(const float* x, int d, float inv, int16_t* q) {
  const __m512 vinv = _mm512_set1_ps(inv), lo = _mm512_set1_ps(-32767.f),
               hi = _mm512_set1_ps(32767.f);
  for (int c = 0; c < d; c += 16) {
    const __m512 v = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(_mm512_loadu_ps(x + c), vinv), lo), hi);
    // cvtps rounds half to even (the default MXCSR mode), as the scalar code.
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + c),
                        _mm512_cvtepi32_epi16(_mm512_cvtps_epi32(v)));
  }
}

KVCAST_AVX512 void ModeCostsAvx512(const int16_t* q, const int16_t* prev, int d, uint32_t* raw,
                                   uint32_t* delta) {
  for (int c = 0; c < d; c += 16) {
    const __m512i a = _mm512_cvtepi16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + c)));
    const __m512i b =
        _mm512_cvtepi16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(prev + c)));
    _mm512_storeu_si512(raw + c, _mm512_add_epi32(_mm512_loadu_si512(raw + c), _mm512_abs_epi32(a)));
    _mm512_storeu_si512(delta + c, _mm512_add_epi32(_mm512_loadu_si512(delta + c),
                                                    _mm512_abs_epi32(_mm512_sub_epi32(a, b))));
  }
}

}  // namespace

bool GetVarint(const uint8_t** p, const uint8_t* end, uint32_t* v) {
  uint64_t r = 0;
  for (int shift = 0; shift < 35; shift += 7) {
    if (*p >= end) return false;
    const uint8_t b = *(*p)++;
    r |= uint64_t(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      if (r > std::numeric_limits<uint32_t>::max()) return false;
      *v = uint32_t(r);
      return true;
    }
  }
  return false;
}

bool SimdKernelsAvailable() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vbmi2") && __builtin_cpu_supports("bmi2");
  return ok;
}

void ForceScalarKernels(bool force) { g_force_scalar = force; }

DecodeUnitFn SelectDecodeUnit() {
  return SimdKernelsAvailable() && !g_force_scalar ? DecodeUnitAvx512 : DecodeUnitScalar;
}

EncodeUnitFn SelectEncodeUnit() {
  return SimdKernelsAvailable() && !g_force_scalar ? EncodeUnitAvx512 : EncodeUnitScalar;
}

EncoderPasses SelectEncoderPasses() {
  if (SimdKernelsAvailable() && !g_force_scalar) {
    return {AbsMaxAvx512, QuantizeAvx512, ModeCostsAvx512, SymbolizeAvx512};
  }
  return {AbsMaxScalar, QuantizeScalar, ModeCostsScalar, SymbolizeScalar};
}

}  // namespace kvcast::kvcache::ac::internal
