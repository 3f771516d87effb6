// The ac codec's unit kernels: see unit_kernels.h.
#include "transport/kvcache/ac/internal/unit_kernels.h"

// GCC 12's avx512fintrin.h trips -Wmaybe-uninitialized on its own
// _mm512_undefined operands (a known false positive of those headers).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "common/dtype.h"

namespace kvcast::kvcache::ac::internal {
namespace {

std::atomic<KernelSet> g_cap{KernelSet::kAvx512};

// A decoded value into float or fp16 output.
inline void Put(float v, float* out) { *out = v; }
inline void Put(float v, uint16_t* out) { *out = FloatToHalf(v); }

template <typename Out>
const char* DecodeOneScalar(DecodeCursor* cur, const uint32_t* slots, const uint16_t* masks,
                            bool same, int32_t* prev, float step, int d, Out* out) {
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
      Put(float(int32_t(q)) * step, out + c);
    }
  }
  return nullptr;
}

template <typename Out>
const char* DecodeUnitScalar(DecodeCursor* const* curs, int count, const uint32_t* slots,
                             const uint16_t* masks, const bool* same, int32_t* prev,
                             const float* steps, int d, Out* const* outs) {
  for (int k = 0; k < count; ++k) {
    if (const char* why = DecodeOneScalar(curs[k], slots, masks, same[k], prev, steps[k], d, outs[k])) {
      return why;
    }
  }
  return nullptr;
}

void NarrowHalfScalar(const float* in, int n, uint16_t* out) {
  for (int i = 0; i < n; ++i) out[i] = FloatToHalf(in[i]);
}

void BuildTableScalar(const uint16_t* freqs, int nsym, uint32_t* slots) {
  BuildDecodeTable(absl::MakeConstSpan(freqs, nsym), slots);
}

#define KVCAST_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512vbmi,avx512vbmi2,bmi2,popcnt")))

// The renormalization of the lanes `need` of v: each takes the next word
// of the stream, in lane order.
KVCAST_AVX512 __attribute__((always_inline)) inline __m512i RefillAvx512(DecodeCursor* cur,
                                                                        __m512i v,
                                                                        __mmask16 need) {
  const int count = _mm_popcnt_u32(need);
  const ptrdiff_t left = cur->words_end - cur->w;
  if (left >= 2 * count) {
    // The words' load waits only on the previous block's count, not on
    // this block's states (an expanding load from memory would): 16 words
    // when the stream has them, else the `count` it has.
    const __m256i raw = left >= 32
        ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(cur->w))
        : _mm512_castsi512_si256(_mm512_maskz_loadu_epi16((1u << count) - 1, cur->w));
    cur->w += 2 * count;
    return _mm512_mask_or_epi32(v, need, _mm512_slli_epi32(v, 16),
                                _mm512_maskz_expand_epi32(need, _mm512_cvtepu16_epi32(raw)));
  }
  // The stream runs out in this block: lane by lane, as the scalar code.
  alignas(64) uint32_t lanes[16];
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
  return _mm512_load_si512(lanes);
}

// The escapes of the lanes `esc` (z = 255 + each lane's varint, in lane
// order) into z at once, when each of them is one or two bytes long and
// all are in the section (almost always); false (nothing read) otherwise.
// The varints' ends are the bytes without a high bit: the first ends at
// the first of them, the next starts after it, and so on; each start's
// byte and the one after it, picked by byte permutes, make the value.
KVCAST_AVX512 __attribute__((always_inline)) inline bool ReadEscapesAvx512(DecodeCursor* cur,
                                                                          __mmask16 esc,
                                                                          __m512i* z) {
  const ptrdiff_t avail = cur->end - cur->esc;
  const uint64_t loaded = avail >= 64 ? ~0ull : (1ull << avail) - 1;
  const __m512i bytes = _mm512_maskz_loadu_epi8(loaded, cur->esc);
  const uint64_t cont = _mm512_movepi8_mask(bytes) & loaded;
  const uint64_t ends = ~cont & loaded;
  const uint64_t last = _pdep_u64(1ull << (_mm_popcnt_u32(esc) - 1), ends);
  if (last == 0 || last > (1ull << 62)) return false;  // not all in the section
  const uint64_t region = (last << 1) - 1;
  if (cont & (cont << 1) & region) return false;  // a varint of three bytes or more
  const uint64_t starts = ((ends << 1) | 1) & region;
  const __m512i iota = _mm512_set_epi8(
      63, 62, 61, 60, 59, 58, 57, 56, 55, 54, 53, 52, 51, 50, 49, 48, 47, 46, 45, 44, 43, 42,
      41, 40, 39, 38, 37, 36, 35, 34, 33, 32, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20,
      19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const __m512i at = _mm512_maskz_compress_epi8(starts, iota);
  const __m512i b0 = _mm512_cvtepu8_epi32(
      _mm512_castsi512_si128(_mm512_permutexvar_epi8(at, bytes)));
  const __m512i b1 = _mm512_cvtepu8_epi32(_mm512_castsi512_si128(
      _mm512_permutexvar_epi8(_mm512_add_epi8(at, _mm512_set1_epi8(1)), bytes)));
  const __m512i low = _mm512_set1_epi32(0x7f);
  const __mmask16 two = _mm512_cmpgt_epu32_mask(b0, low);
  __m512i v = _mm512_and_si512(b0, low);
  v = _mm512_mask_or_epi32(v, two, v, _mm512_slli_epi32(b1, 7));
  *z = _mm512_mask_expand_epi32(*z, esc, _mm512_add_epi32(v, _mm512_set1_epi32(kEscape)));
  cur->esc += _mm_popcnt_u64(region);
  return true;
}

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
  if (const __mmask16 need = _mm512_cmplt_epu32_mask(v, _mm512_set1_epi32(kStateLow))) {
    v = RefillAvx512(cur, v, need);
  }
  *x = v;
  __m512i z = _mm512_srli_epi32(e, 24);
  const __mmask16 esc = _mm512_cmpeq_epi32_mask(z, _mm512_set1_epi32(kEscape));
  // A lone escape is read inline below (cheaper than the vector path).
  if (esc != 0 && ((esc & (esc - 1)) == 0 || !ReadEscapesAvx512(cur, esc, &z))) {
    // Lane by lane, as the scalar code (also after a long varint, a
    // damaged or short section); most escapes are one-byte varints (a
    // residual below 383), read inline. Each goes into its lane by a
    // masked broadcast: lanes stored and reloaded as a vector would stall
    // on store forwarding (the load spans several narrower stores).
    for (uint32_t m = esc; m != 0; m &= m - 1) {
      uint32_t zj;
      if (cur->esc < cur->end && *cur->esc < 0x80) {
        zj = kEscape + *cur->esc++;
      } else if (!ReadEscape(cur, &zj)) {
        return "bad escape";
      }
      z = _mm512_mask_set1_epi32(z, __mmask16(m & -m), int(zj));
    }
  }
  const __m512i r = _mm512_xor_si512(
      _mm512_srli_epi32(z, 1), _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_and_si512(z, k1)));
  *q = _mm512_mask_add_epi32(r, dm, r, *q);
  if (_mm512_cmpgt_epi32_mask(_mm512_abs_epi32(*q), _mm512_set1_epi32(kMaxCode))) {
    return "a code out of range";
  }
  return nullptr;
}

// N tokens' chains side by side (independent gathers and multiplies in
// flight), states in registers.
KVCAST_AVX512 inline void Store16(__m512 v, float* out) { _mm512_storeu_ps(out, v); }
KVCAST_AVX512 inline void Store16(__m512 v, uint16_t* out) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out),
                      _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

template <int N, typename Out>
KVCAST_AVX512 const char* DecodeTokensAvx512(DecodeCursor* const* curs, const uint32_t* slots,
                                             const uint16_t* masks, const bool* same,
                                             int32_t* prev, const float* steps, int d,
                                             Out* const* outs) {
  __m512i x[N];
#pragma GCC unroll 8
  for (int k = 0; k < N; ++k) x[k] = _mm512_loadu_si512(curs[k]->state);
  for (int b = 0; b < d / 16; ++b) {
    // q carries the previous token's codes into each token's block.
    __m512i q = _mm512_loadu_si512(prev + b * 16);
#pragma GCC unroll 8
    for (int k = 0; k < N; ++k) {
      if (const char* why = DecodeBlockAvx512(curs[k], &x[k], slots, same[k] ? masks[b] : 0, &q)) {
        return why;
      }
      Store16(_mm512_mul_ps(_mm512_cvtepi32_ps(q), _mm512_set1_ps(steps[k])), outs[k] + b * 16);
    }
    _mm512_storeu_si512(prev + b * 16, q);
  }
#pragma GCC unroll 8
  for (int k = 0; k < N; ++k) _mm512_storeu_si512(curs[k]->state, x[k]);
  return nullptr;
}

// Tokens in order, up to 8 at a time (prev carries the codes from one
// call to the next).
template <typename Out>
KVCAST_AVX512 const char* DecodeUnitAvx512(DecodeCursor* const* curs, int count,
                                           const uint32_t* slots, const uint16_t* masks,
                                           const bool* same, int32_t* prev, const float* steps,
                                           int d, Out* const* outs) {
  for (int k = 0; k < count;) {
    const char* why;
    if (count - k >= 8) {
      why = DecodeTokensAvx512<8, Out>(curs + k, slots, masks, same + k, prev, steps + k, d,
                                       outs + k);
      k += 8;
    } else if (count - k >= 4) {
      why = DecodeTokensAvx512<4, Out>(curs + k, slots, masks, same + k, prev, steps + k, d,
                                       outs + k);
      k += 4;
    } else if (count - k >= 2) {
      why = DecodeTokensAvx512<2, Out>(curs + k, slots, masks, same + k, prev, steps + k, d,
                                       outs + k);
      k += 2;
    } else {
      why = DecodeTokensAvx512<1, Out>(curs + k, slots, masks, same + k, prev, steps + k, d,
                                       outs + k);
      k += 1;
    }
    if (why) return why;
  }
  return nullptr;
}

// 16 entries a store (the tail of a symbol's run under a mask): a run of
// std::fill per symbol was a tenth of the decoder's time on Llama-3-8B's
// shape, where a unit's 2 x 4096 entries serve 16K values.
KVCAST_AVX512 void BuildTableAvx512(const uint16_t* freqs, int nsym, uint32_t* slots) {
  uint32_t c = 0;
  for (int s = 0; s < nsym; ++s) {
    const uint32_t f = freqs[s];
    if (f == 0) continue;
    const __m512i e = _mm512_set1_epi32(int((uint32_t(s) << 24) | ((f - 1) << 12) | c));
    uint32_t* p = slots + c;
    uint32_t i = 0;
    for (; i + 16 <= f; i += 16) _mm512_storeu_si512(p + i, e);
    if (i < f) _mm512_mask_storeu_epi32(p + i, __mmask16((1u << (f - i)) - 1), e);
    c += f;
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

const char* KernelSetName(KernelSet set) {
  switch (set) {
    case KernelSet::kScalar: return "scalar";
    case KernelSet::kAvx2: return "avx2";
    case KernelSet::kAvx512: return "avx512";
  }
  return "?";
}

// F16C (CPUID leaf 1, ECX bit 29): not every compiler's
// __builtin_cpu_supports knows its name.
bool HasF16c() {
  unsigned eax, ebx, ecx, edx;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && ((ecx >> 29) & 1);
}

bool KernelSetAvailable(KernelSet set) {
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi2") &&
                           __builtin_cpu_supports("fma") && __builtin_cpu_supports("popcnt") &&
                           HasF16c();
  static const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                             __builtin_cpu_supports("avx512bw") &&
                             __builtin_cpu_supports("avx512vbmi") &&
                             __builtin_cpu_supports("avx512vbmi2");
  switch (set) {
    case KernelSet::kScalar: return true;
    case KernelSet::kAvx2: return avx2;
    case KernelSet::kAvx512: return avx512;
  }
  return false;
}

KernelSet ActiveKernelSet() {
  for (KernelSet s : {KernelSet::kAvx512, KernelSet::kAvx2}) {
    if (s <= g_cap.load() && KernelSetAvailable(s)) return s;
  }
  return KernelSet::kScalar;
}

void CapKernelSet(KernelSet most) { g_cap = most; }

BuildTableFn SelectBuildTable() {
  switch (ActiveKernelSet()) {
    case KernelSet::kAvx512: return BuildTableAvx512;
    case KernelSet::kAvx2: return BuildTableAvx2;
    case KernelSet::kScalar: break;
  }
  return BuildTableScalar;
}

NarrowHalfFn SelectNarrowHalf() {
  // AVX-512 CPUs have F16C too.
  return ActiveKernelSet() == KernelSet::kScalar ? NarrowHalfScalar : NarrowHalfAvx2;
}

DecodeUnitFn SelectDecodeUnit() {
  switch (ActiveKernelSet()) {
    case KernelSet::kAvx512: return DecodeUnitAvx512<float>;
    case KernelSet::kAvx2: return DecodeUnitAvx2;
    case KernelSet::kScalar: break;
  }
  return DecodeUnitScalar<float>;
}

DecodeUnitHalfFn SelectDecodeUnitHalf() {
  switch (ActiveKernelSet()) {
    case KernelSet::kAvx512: return DecodeUnitAvx512<uint16_t>;
    case KernelSet::kAvx2: return DecodeUnitHalfAvx2;
    case KernelSet::kScalar: break;
  }
  return DecodeUnitScalar<uint16_t>;
}

}  // namespace kvcast::kvcache::ac::internal
