// Internal to //kernels:kv_codec (and its test and benchmark): the per-value
// conversions behind kv_codec.h and the table of bulk kernels that the row
// codecs call, in a portable scalar version and an AVX2+F16C version picked
// at run time. Both versions produce bit-identical output for every input;
// kv_codec_test checks that on random and adversarial rows.
//
// The inline conversions are written without branches so that loops over
// them vectorize. Stateless and thread-safe.
#ifndef KVCAST_KERNELS_INTERNAL_KV_CODEC_KERNELS_H_
#define KVCAST_KERNELS_INTERNAL_KV_CODEC_KERNELS_H_

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/kv_codec.h"

namespace kvcast {
namespace kv_internal {

inline uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// IEEE half, round to nearest even; overflow -> inf; NaN -> quiet NaN with
// the top payload bits kept (what F16C's vcvtps2ph does).
inline uint16_t EncodeHalf(float x) {
  const uint32_t b = Bits(x), m = b & 0x7fffffffu, sign = (b >> 16) & 0x8000u;
  // Normal halves: rebias 127 -> 15, round the 13 dropped bits to even.
  const uint32_t normal = (m + 0xfffu + ((m >> 13) & 1) - 0x38000000u) >> 13;
  // Below 2^-14: adding 0.5 puts the float's ulp at 2^-24, the half
  // subnormal step, so the FPU's own rounding is the half's.
  const uint32_t subnormal = Bits(FromBits(m) + 0.5f) - 0x3f000000u;
  const uint32_t nan = 0x7e00u | ((m >> 13) & 0x3ffu);
  uint32_t r = m < 0x38800000u ? subnormal : normal;
  r = m >= 0x477ff000u ? 0x7c00u : r;  // >= 65520 rounds to inf
  r = m > 0x7f800000u ? nan : r;
  return static_cast<uint16_t>(sign | r);
}

// Exact; a NaN comes back quiet (as F16C's vcvtph2ps returns it).
inline float DecodeHalf(uint16_t h) {
  const uint32_t a = h & 0x7fffu, sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t normal = (a << 13) + 0x38000000u;
  const uint32_t subnormal = Bits(static_cast<float>(static_cast<int32_t>(a)) * 0x1p-24f);
  const uint32_t special = (a << 13) | 0x7f800000u | (a > 0x7c00u ? 0x400000u : 0u);
  uint32_t r = a < 0x400u ? subnormal : normal;
  r = a >= 0x7c00u ? special : r;
  return FromBits(sign | r);
}

// bfloat16, round to nearest even; NaN -> quiet NaN (top payload kept).
inline uint16_t EncodeBf16(float x) {
  const uint32_t b = Bits(x);
  const uint32_t rounded = (b + 0x7fffu + ((b >> 16) & 1)) >> 16;  // inf on overflow
  const uint32_t nan = (b >> 16) | 0x40u;
  return static_cast<uint16_t>((b & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

inline float DecodeBf16(uint16_t v) { return FromBits(static_cast<uint32_t>(v) << 16); }

// OCP FP8 E4M3FN: bias 7, no inf, 0x7f/0xff NaN, largest finite 448.
// Round to nearest even, finite values saturate to +-448, NaN -> 0x7f,
// +-inf -> NaN of the same sign (0x7f, 0xff).
inline uint8_t EncodeFp8E4M3(float x) {
  const uint32_t b = Bits(x), m = b & 0x7fffffffu;
  uint32_t sign = (b >> 24) & 0x80u;
  // Normal range (>= 2^-6): rebias 127 -> 7, round the 20 dropped bits.
  uint32_t normal = ((m + 0x7ffffu + ((m >> 20) & 1)) >> 20) - (120u << 3);
  normal = normal < 0x7eu ? normal : 0x7eu;
  // Below 2^-6: the ulp of 2^14 is 2^-9, the fp8 subnormal step.
  const uint32_t subnormal = Bits(FromBits(m) + 16384.f) - 0x46800000u;
  uint32_t r = m < 0x3c800000u ? subnormal : normal;
  r = m >= 0x7f800000u ? 0x7fu : r;
  sign = m > 0x7f800000u ? 0u : sign;
  return static_cast<uint8_t>(r | sign);
}

inline float DecodeFp8E4M3(uint8_t c) {
  const uint32_t a = c & 0x7fu, sign = static_cast<uint32_t>(c & 0x80u) << 24;
  const uint32_t normal = (a << 20) + (120u << 23);
  const uint32_t subnormal = Bits(static_cast<float>(static_cast<int32_t>(a)) * 0x1p-9f);
  uint32_t r = a < 8u ? subnormal : normal;
  r = a == 0x7fu ? 0x7fc00000u : r;
  return FromBits(sign | r);
}

// OCP FP4 E2M1: magnitudes 0, .5, 1, 1.5, 2, 3, 4, 6, sign in bit 3.
// Round to nearest even (ties go to the code with an even mantissa bit),
// saturate to +-6 (inf included), NaN -> 0.
inline uint8_t EncodeFp4E2M1(float x) {
  const float a = std::fabs(x);
  const uint32_t code = (a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) +
                        (a >= 3.5f) + (a > 5.f);
  const uint32_t sign = x == x ? (Bits(x) >> 28) & 8u : 0u;
  return static_cast<uint8_t>(code | sign);
}

inline constexpr float kFp4Magnitudes[8] = {0.f, .5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};

inline float DecodeFp4E2M1(uint8_t c) {  // the code in the low nibble
  return FromBits(Bits(kFp4Magnitudes[c & 7u]) | ((c & 8u) << 28));
}

// round_to_nearest_even(clamp(v, -qmax, qmax)) for a finite v and qmax < 2^22:
// adding 1.5 * 2^23 leaves the integer in the low mantissa bits.
inline int32_t RoundToInt(float v, float qmax) {
  v = v < -qmax ? -qmax : v;
  v = v > qmax ? qmax : v;
  return static_cast<int32_t>(Bits(v + 12582912.f)) - 0x4b400000;
}

// Whether a block with this scale is quantized (finite and > 0); other
// blocks get all-zero codes.
inline bool QuantizableScale(float scale) { return scale > 0.f && scale <= 0x1.fffffep127f; }
// Whether a block with this scale decodes to numbers; others decode to NaN.
inline bool FiniteScale(float scale) { return std::fabs(scale) <= 0x1.fffffep127f; }

// The fp16 scale of a block whose largest |x| has float bits `amax_bits`
// (NaN bits order above inf, inf above every finite value): amax / qmax
// rounded up to fp16, so that |x / scale| <= qmax. 0 for an all-zero block,
// inf (0x7c00) or NaN (0x7e00) for a block holding one. A finite block too
// large for fp16 scales (amax / qmax > 65504) gets 65504 and its values
// saturate at +-qmax.
uint16_t ScaleForBlock(uint32_t amax_bits, float qmax);

// Largest code magnitude of a scaled format (127, 7, 448, 6).
float KvFormatQmax(KvFormat format);

// Bulk kernels. n counts values. The scaled kernels see n / block blocks;
// value i belongs to block i / block and scales[i / block] (the fp16 scale as
// a float). quantize writes q = round(x / scale) as codes (int8: one byte,
// two's complement; int4: nibbles, two's complement; fp8/fp4: the format's
// codes); a block whose scale is 0 or non-finite gets all-zero codes.
// dequantize writes q * scale, and NaN for a block whose scale is not finite.
// 4-bit kernels need an even n; they pack value 2i in the low nibble.
using CodecFn = void (*)(const float* in, size_t n, uint8_t* out);
using DecodeFn = void (*)(const uint8_t* in, size_t n, float* out);
using QuantizeFn = void (*)(const float* in, size_t n, size_t block, const float* scales,
                            uint8_t* out);
using DequantizeFn = void (*)(const uint8_t* in, size_t n, size_t block, const float* scales,
                              float* out);

struct KvKernels {
  CodecFn encode_fp16, encode_bf16;  // 2 bytes per value, little-endian
  DecodeFn decode_fp16, decode_bf16;
  // amax_bits[b] = max over block b of Bits(|x|): the largest magnitude,
  // NaN if the block holds one, else inf if it holds one.
  void (*block_amax)(const float* in, size_t n, size_t block, uint32_t* amax_bits);
  // Indexed by KvFormat; null for fp16 and bf16.
  QuantizeFn quantize[6];
  DequantizeFn dequantize[6];
};

const KvKernels& ScalarKvKernels();
// Null unless the CPU runs AVX2 and F16C.
const KvKernels* Avx2KvKernels();
// The AVX2 table where the CPU allows, else the scalar one; chosen once.
const KvKernels& ActiveKvKernels();

// kv_codec.h's row codecs with a given kernel table.
void EncodeKvRowWith(const KvKernels& kernels, KvFormat format, const float* in, int num_heads,
                     int head_dim, int block, uint8_t* out);
void DecodeKvRowWith(const KvKernels& kernels, KvFormat format, const uint8_t* in, int num_heads,
                     int head_dim, int block, float* out);

}  // namespace kv_internal
}  // namespace kvcast

#endif  // KVCAST_KERNELS_INTERNAL_KV_CODEC_KERNELS_H_
