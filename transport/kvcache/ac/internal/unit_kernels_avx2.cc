// The ac decoder's AVX2 kernels (unit_kernels.h): the AVX-512 kernels'
// method in 8-lane halves. A block's 16 rANS lanes are two registers;
// what AVX-512 does with masks and expanding loads is done with lane masks
// made from bits and a table of permutations.
#include <immintrin.h>

#include <array>
#include <cstring>

#include "common/dtype.h"
#include "transport/kvcache/ac/internal/unit_kernels.h"

namespace kvcast::kvcache::ac::internal {
namespace {

#define KVCAST_AVX2 __attribute__((target("avx2,bmi2,popcnt,f16c,fma")))

// kExpand[m] lane j: how many lanes below j are in m, the index of the word
// lane j takes when the lanes m each take the next word in lane order.
struct ExpandTable {
  alignas(32) std::array<std::array<int32_t, 8>, 256> idx;
  constexpr ExpandTable() : idx() {
    for (int m = 0; m < 256; ++m) {
      int k = 0;
      for (int j = 0; j < 8; ++j) {
        idx[m][j] = k;
        if ((m >> j) & 1) ++k;
      }
    }
  }
};
constexpr ExpandTable kExpand;

// Lanes whose bit is set in m (bit j of the low 8 for lanes 0-7, of the high
// 8 for lanes 8-15), as all-ones lanes.
KVCAST_AVX2 inline __m256i LaneMask(uint32_t m, int half) {
  const __m256i bits = half == 0 ? _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128)
                                 : _mm256_setr_epi32(256, 512, 1024, 2048, 4096, 8192, 16384,
                                                     32768);
  return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(int(m)), bits), bits);
}

// Lanes of a 32-bit lane mask as 8 bits.
KVCAST_AVX2 inline uint32_t Bits(__m256i lanes) {
  return uint32_t(_mm256_movemask_ps(_mm256_castsi256_ps(lanes)));
}

// The renormalization of the lanes need (16 bits; needv: the same as lane
// masks) of the lanes v[0..1]: each takes the next word, in lane order.
KVCAST_AVX2 __attribute__((always_inline)) inline void RefillAvx2(DecodeCursor* cur, __m256i* v,
                                                                 const __m256i* needv,
                                                                 uint32_t need) {
  if (cur->words_end - cur->w >= 32) {
    // Each half's words: 8 of them widened to lanes, then moved to the
    // lanes that take them.
    for (int h = 0; h < 2; ++h) {
      const uint32_t m = (need >> (8 * h)) & 0xff;
      const __m256i words = _mm256_cvtepu16_epi32(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(cur->w)));
      const __m256i placed = _mm256_permutevar8x32_epi32(
          words, _mm256_load_si256(reinterpret_cast<const __m256i*>(kExpand.idx[m].data())));
      v[h] = _mm256_blendv_epi8(v[h], _mm256_or_si256(_mm256_slli_epi32(v[h], 16), placed),
                                needv[h]);
      cur->w += 2 * _mm_popcnt_u32(m);
    }
    return;
  }
  // The stream's last words: lane by lane, as the scalar code.
  alignas(32) uint32_t lanes[16];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), v[0]);
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes + 8), v[1]);
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
  v[0] = _mm256_load_si256(reinterpret_cast<const __m256i*>(lanes));
  v[1] = _mm256_load_si256(reinterpret_cast<const __m256i*>(lanes + 8));
}

// One block of 16 values of one token: the rANS step on the lanes x[0..1],
// then the codes (into q[0..1], from the previous token's in q for the
// delta lanes dm).
KVCAST_AVX2 __attribute__((always_inline)) inline const char* DecodeBlockAvx2(
    DecodeCursor* cur, __m256i* x, const uint32_t* slots, uint32_t dm, __m256i* q) {
  const __m256i k4095 = _mm256_set1_epi32(kProbScale - 1);
  const __m256i k1 = _mm256_set1_epi32(1);
  __m256i v[2], e[2], delta[2], needv[2];
  uint32_t need = 0;
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    delta[h] = LaneMask(dm, h);
    const __m256i slot = _mm256_and_si256(x[h], k4095);
    e[h] = _mm256_i32gather_epi32(
        reinterpret_cast<const int*>(slots),
        _mm256_add_epi32(slot, _mm256_and_si256(delta[h], _mm256_set1_epi32(kProbScale))), 4);
    const __m256i f =
        _mm256_add_epi32(_mm256_and_si256(_mm256_srli_epi32(e[h], 12), k4095), k1);
    v[h] = _mm256_add_epi32(_mm256_mullo_epi32(f, _mm256_srli_epi32(x[h], kProbBits)),
                            _mm256_sub_epi32(slot, _mm256_and_si256(e[h], k4095)));
    needv[h] = _mm256_cmpeq_epi32(_mm256_srli_epi32(v[h], 16), _mm256_setzero_si256());
    need |= Bits(needv[h]) << (8 * h);
  }
  if (need != 0) RefillAvx2(cur, v, needv, need);
  x[0] = v[0];
  x[1] = v[1];
  __m256i z[2];
  uint32_t esc = 0;
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    z[h] = _mm256_srli_epi32(e[h], 24);
    esc |= Bits(_mm256_cmpeq_epi32(z[h], _mm256_set1_epi32(kEscape))) << (8 * h);
  }
  // Escapes lane by lane, in lane order; most are one-byte varints (a
  // residual below 383), read inline. Each goes into its lane by a blend.
  for (uint32_t m = esc; m != 0; m &= m - 1) {
    uint32_t zj;
    if (cur->esc < cur->end && *cur->esc < 0x80) {
      zj = kEscape + *cur->esc++;
    } else if (!ReadEscape(cur, &zj)) {
      return "bad escape";
    }
    const int j = __builtin_ctz(m);
    z[j / 8] = _mm256_blendv_epi8(z[j / 8], _mm256_set1_epi32(int(zj)),
                                  LaneMask(1u << j, j / 8));
  }
  __m256i out_of_range = _mm256_setzero_si256();
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const __m256i r = _mm256_xor_si256(_mm256_srli_epi32(z[h], 1),
                                       _mm256_sub_epi32(_mm256_setzero_si256(),
                                                        _mm256_and_si256(z[h], k1)));
    q[h] = _mm256_add_epi32(r, _mm256_and_si256(q[h], delta[h]));
    out_of_range = _mm256_or_si256(
        out_of_range, _mm256_cmpgt_epi32(_mm256_abs_epi32(q[h]), _mm256_set1_epi32(kMaxCode)));
  }
  if (!_mm256_testz_si256(out_of_range, out_of_range)) return "a code out of range";
  return nullptr;
}

KVCAST_AVX2 inline void Store8(__m256 v, float* out) { _mm256_storeu_ps(out, v); }
KVCAST_AVX2 inline void Store8(__m256 v, uint16_t* out) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out),
                   _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// N tokens' chains side by side (independent gathers and multiplies in
// flight), states in registers.
template <int N, typename Out>
KVCAST_AVX2 const char* DecodeTokensAvx2(DecodeCursor* const* curs, const uint32_t* slots,
                                         const uint16_t* masks, const bool* same, int32_t* prev,
                                         const float* steps, int d, Out* const* outs) {
  __m256i x[N][2];
#pragma GCC unroll 8
  for (int k = 0; k < N; ++k) {
    x[k][0] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(curs[k]->state));
    x[k][1] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(curs[k]->state + 8));
  }
  for (int b = 0; b < d / 16; ++b) {
    // q carries the previous token's codes into each token's block.
    __m256i q[2] = {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(prev + b * 16)),
                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(prev + b * 16 + 8))};
#pragma GCC unroll 8
    for (int k = 0; k < N; ++k) {
      if (const char* why = DecodeBlockAvx2(curs[k], x[k], slots, same[k] ? masks[b] : 0, q)) {
        return why;
      }
      const __m256 step = _mm256_set1_ps(steps[k]);
      Store8(_mm256_mul_ps(_mm256_cvtepi32_ps(q[0]), step), outs[k] + b * 16);
      Store8(_mm256_mul_ps(_mm256_cvtepi32_ps(q[1]), step), outs[k] + b * 16 + 8);
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(prev + b * 16), q[0]);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(prev + b * 16 + 8), q[1]);
  }
#pragma GCC unroll 8
  for (int k = 0; k < N; ++k) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(curs[k]->state), x[k][0]);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(curs[k]->state + 8), x[k][1]);
  }
  return nullptr;
}

// Tokens in order, up to 4 at a time (two registers of state each; prev
// carries the codes from one call to the next).
template <typename Out>
KVCAST_AVX2 const char* DecodeUnitTokensAvx2(DecodeCursor* const* curs, int count,
                                             const uint32_t* slots, const uint16_t* masks,
                                             const bool* same, int32_t* prev,
                                             const float* steps, int d, Out* const* outs) {
  for (int k = 0; k < count;) {
    const char* why;
    if (count - k >= 4) {
      why = DecodeTokensAvx2<4, Out>(curs + k, slots, masks, same + k, prev, steps + k, d,
                                     outs + k);
      k += 4;
    } else if (count - k >= 2) {
      why = DecodeTokensAvx2<2, Out>(curs + k, slots, masks, same + k, prev, steps + k, d,
                                     outs + k);
      k += 2;
    } else {
      why = DecodeTokensAvx2<1, Out>(curs + k, slots, masks, same + k, prev, steps + k, d,
                                     outs + k);
      k += 1;
    }
    if (why) return why;
  }
  return nullptr;
}

// 8 entries a store (the tail of a symbol's run under a lane mask), as the
// AVX-512 kernel.
KVCAST_AVX2 void BuildTableImpl(const uint16_t* freqs, int nsym, uint32_t* slots) {
  const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  uint32_t c = 0;
  for (int s = 0; s < nsym; ++s) {
    const uint32_t f = freqs[s];
    if (f == 0) continue;
    const __m256i e = _mm256_set1_epi32(int((uint32_t(s) << 24) | ((f - 1) << 12) | c));
    uint32_t* p = slots + c;
    uint32_t i = 0;
    for (; i + 8 <= f; i += 8) _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + i), e);
    if (i < f) {
      _mm256_maskstore_epi32(reinterpret_cast<int*>(p + i),
                             _mm256_cmpgt_epi32(_mm256_set1_epi32(int(f - i)), iota), e);
    }
    c += f;
  }
}

KVCAST_AVX2 void NarrowHalfImpl(const float* in, int n, uint16_t* out) {
  int i = 0;
  for (; i + 8 <= n; i += 8) Store8(_mm256_loadu_ps(in + i), out + i);
  for (; i < n; ++i) out[i] = FloatToHalf(in[i]);
}

}  // namespace

const char* DecodeUnitAvx2(DecodeCursor* const* curs, int count, const uint32_t* slots,
                           const uint16_t* masks, const bool* same, int32_t* prev,
                           const float* steps, int d, float* const* outs) {
  return DecodeUnitTokensAvx2<float>(curs, count, slots, masks, same, prev, steps, d, outs);
}

const char* DecodeUnitHalfAvx2(DecodeCursor* const* curs, int count, const uint32_t* slots,
                               const uint16_t* masks, const bool* same, int32_t* prev,
                               const float* steps, int d, uint16_t* const* outs) {
  return DecodeUnitTokensAvx2<uint16_t>(curs, count, slots, masks, same, prev, steps, d, outs);
}

void BuildTableAvx2(const uint16_t* freqs, int nsym, uint32_t* slots) {
  BuildTableImpl(freqs, nsym, slots);
}

void NarrowHalfAvx2(const float* in, int n, uint16_t* out) { NarrowHalfImpl(in, n, out); }

}  // namespace kvcast::kvcache::ac::internal
