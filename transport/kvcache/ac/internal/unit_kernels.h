// The ac decoder's inner loops: one unit (head_dim values: one layer's K or
// V of one KV head) of a few tokens through rANS, scalar, AVX2 and AVX-512.
// All give the same floats (ac_codec_test compares them). The encoder's:
// encode_kernels.h.
//
// Channel modes come as one 16-bit mask per block of 16 channels (bit j:
// channel 16 b + j is a delta channel), which is also the header's byte
// layout read little-endian. Tables: the unit's raw then delta table, as
// rans.h lays them out (decoder slots: 2 x kProbScale).
#ifndef KVCAST_TRANSPORT_KVCACHE_AC_INTERNAL_UNIT_KERNELS_H_
#define KVCAST_TRANSPORT_KVCACHE_AC_INTERNAL_UNIT_KERNELS_H_

#include <cstdint>
#include <vector>

#include "transport/kvcache/ac/rans.h"

namespace kvcast::kvcache::ac::internal {

inline constexpr uint32_t kEscape = kMaxSymbols - 1;  // z >= 255; z - 255 follows as a varint
inline constexpr int32_t kMaxCode = 1 << 24;           // |q| a decoder accepts
inline constexpr uint32_t kMaxEscape = 4u * kMaxCode;  // largest z - 255 a decoder accepts
inline constexpr int kMaxShift = 15;  // a token's step is the unit's over 2^shift
// 2^-shift, exact: a step times it rounds as ldexp(step, -shift) does
// (a libm call per token and unit was a visible cost on both sides).
inline constexpr float kInversePowersOfTwo[kMaxShift + 1] = {
    0x1p0f, 0x1p-1f, 0x1p-2f, 0x1p-3f, 0x1p-4f, 0x1p-5f, 0x1p-6f, 0x1p-7f,
    0x1p-8f, 0x1p-9f, 0x1p-10f, 0x1p-11f, 0x1p-12f, 0x1p-13f, 0x1p-14f, 0x1p-15f};

// Kernels take up to this many tokens per call: independent rANS chains
// in flight hide the latency of each one's gathers and multiplies.
inline constexpr int kMaxTokensPerCall = 8;

// Where one token's section is being read.
struct DecodeCursor {
  uint32_t state[kLanes];
  const uint8_t* w;  // next word
  const uint8_t* words_end;
  const uint8_t* esc;  // next escape varint
  const uint8_t* end;
  bool overrun;  // a word was needed past words_end
};

// Decodes `d` values (d % 16 == 0) of one unit for `count` (1 ..
// kMaxTokensPerCall) consecutive tokens k = 0 .. count-1 of a group, each
// from its cursor curs[k]: codes into prev (holding the codes of the token
// before the first; delta channels add to them when same[k]), values
// q * steps[k] into outs[k][0, d). Returns null, or what was wrong (a bad escape, a
// code out of range).

using DecodeUnitFn = const char* (*)(DecodeCursor* const* curs, int count, const uint32_t* slots,
                                     const uint16_t* masks, const bool* same, int32_t* prev,
                                     const float* steps, int d, float* const* outs);
// The same with the values narrowed to fp16 (IEEE binary16 bits, rounded
// to nearest even, as FloatToHalf) as they are stored.
using DecodeUnitHalfFn = const char* (*)(DecodeCursor* const* curs, int count,
                                         const uint32_t* slots, const uint16_t* masks,
                                         const bool* same, int32_t* prev, const float* steps,
                                         int d, uint16_t* const* outs);

// out[i] = FloatToHalf(in[i]), i < n (rotated groups' values, narrowed
// after the inverse rotation).
using NarrowHalfFn = void (*)(const float* in, int n, uint16_t* out);

// A decoder table (rans.h) into slots[0, kProbScale) from nsym frequencies
// that ValidFrequencies accepts (the scalar kernel is BuildDecodeTable).
using BuildTableFn = void (*)(const uint16_t* freqs, int nsym, uint32_t* slots);

// The kernel sets, each giving the same bytes and floats: the scalar
// reference, AVX2 (with BMI2, F16C, FMA: every x86-64 server CPU since
// 2013, AMD's included) and AVX-512 (F, BW, VBMI, VBMI2: Ice Lake, Zen 4
// and later; Skylake-X and Cascade Lake lack VBMI and take AVX2).
enum class KernelSet { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };
const char* KernelSetName(KernelSet set);  // "scalar", "avx2", "avx512"
// Whether this CPU runs the set (scalar: always).
bool KernelSetAvailable(KernelSet set);
// The set encoders and decoders made from now on use: the best this CPU
// runs, unless capped.
KernelSet ActiveKernelSet();
// For tests and benchmarks: encoders and decoders made after this call use
// at most `most` (as a CPU without the better sets would); kAvx512 lifts
// the cap.
void CapKernelSet(KernelSet most);

// Kernels of the active set (the encoder's: encode_kernels.h).
DecodeUnitFn SelectDecodeUnit();
DecodeUnitHalfFn SelectDecodeUnitHalf();
BuildTableFn SelectBuildTable();
NarrowHalfFn SelectNarrowHalf();

bool GetVarint(const uint8_t** p, const uint8_t* end, uint32_t* v);

inline int32_t UnZigZag(uint32_t z) { return int32_t(z >> 1) ^ -int32_t(z & 1); }
inline uint32_t ZigZag(int32_t r) { return (uint32_t(r) << 1) ^ uint32_t(r >> 31); }

// z of an escape symbol: 255 + the next varint, or false.
inline bool ReadEscape(DecodeCursor* cur, uint32_t* z) {
  uint32_t extra;
  if (!GetVarint(&cur->esc, cur->end, &extra) || extra > kMaxEscape) return false;
  *z = kEscape + extra;
  return true;
}

// The AVX2 kernels (unit_kernels_avx2.cc), for the selectors.
const char* DecodeUnitAvx2(DecodeCursor* const* curs, int count, const uint32_t* slots,
                           const uint16_t* masks, const bool* same, int32_t* prev,
                           const float* steps, int d, float* const* outs);
const char* DecodeUnitHalfAvx2(DecodeCursor* const* curs, int count, const uint32_t* slots,
                               const uint16_t* masks, const bool* same, int32_t* prev,
                               const float* steps, int d, uint16_t* const* outs);
void BuildTableAvx2(const uint16_t* freqs, int nsym, uint32_t* slots);
void NarrowHalfAvx2(const float* in, int n, uint16_t* out);

}  // namespace kvcast::kvcache::ac::internal

#endif  // KVCAST_TRANSPORT_KVCACHE_AC_INTERNAL_UNIT_KERNELS_H_
