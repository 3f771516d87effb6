// The per-value and per-block math of the KV wire codecs (kernels/kv_codec.h),
// written once for host C++ and CUDA device code so that the GPU kernels of
// kv_codec_kernels.cu and the host test kv_codec_math_test.cc run the same
// source. Every function reproduces, bit for bit, its twin in
// kernels/internal/kv_codec_kernels.h and kernels/kv_codec.cc (the CPU
// reference, which is private to //kernels:kv_codec).
//
// Why this is bit-exact on the device: the conversions are integer bit
// manipulation plus a few float operations that are exact or correctly
// rounded in IEEE single precision (add, multiply, divide, int -> float).
// On the device those go through __fadd_rn / __fmul_rn / __fdiv_rn, which
// round to nearest even and are never contracted into an FMA, and no path
// depends on subnormal flushing (the build uses neither --use_fast_math nor
// -ftz=true; the one comparison a flushed subnormal could flip is done on
// bits). The host path uses the plain operators, as the reference does.
//
// Internal to the CUDA kernels and their tests. Stateless; thread-safe.
#ifndef KVCAST_KERNELS_CUDA_KV_CODEC_MATH_H_
#define KVCAST_KERNELS_CUDA_KV_CODEC_MATH_H_

#if defined(__CUDACC__)
#define KVCAST_HD __host__ __device__
#else
#define KVCAST_HD
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/kv_codec.h"

namespace kvcast {
namespace cuda {
namespace kv_math {

// ---------------------------------------------------------------------------
// Bit casts and correctly rounded float operations.

KVCAST_HD inline uint32_t Bits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

KVCAST_HD inline float FromBits(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

KVCAST_HD inline float Add(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

KVCAST_HD inline float Mul(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

// IEEE division: nvcc's default x / y is already correctly rounded
// (-prec-div=true), but the intrinsic keeps it so under any flags.
KVCAST_HD inline float Div(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

// float(i) for |i| < 2^24: exact either way.
KVCAST_HD inline float IntToFloat(int32_t i) {
#ifdef __CUDA_ARCH__
  return __int2float_rn(i);
#else
  return static_cast<float>(i);
#endif
}

// The quiet NaN the reference writes for values of non-finite blocks
// (std::numeric_limits<float>::quiet_NaN()).
KVCAST_HD inline float QuietNaN() { return FromBits(0x7fc00000u); }

// |x| as float bits (sign cleared); NaN bits order above inf.
KVCAST_HD inline uint32_t AbsBits(float x) { return Bits(x) & 0x7fffffffu; }

// ---------------------------------------------------------------------------
// Scalar conversions (kv_internal::EncodeHalf and friends).

// IEEE half, round to nearest even; overflow -> inf; NaN -> quiet NaN with
// the top payload bits kept (vcvtps2ph's result).
KVCAST_HD inline uint16_t EncodeHalf(float x) {
  const uint32_t b = Bits(x), m = b & 0x7fffffffu, sign = (b >> 16) & 0x8000u;
  const uint32_t normal = (m + 0xfffu + ((m >> 13) & 1) - 0x38000000u) >> 13;
  // Below 2^-14 the float's ulp after adding 0.5 is 2^-24, the half
  // subnormal step: the float adder does the rounding.
  const uint32_t subnormal = Bits(Add(FromBits(m), 0.5f)) - 0x3f000000u;
  const uint32_t nan = 0x7e00u | ((m >> 13) & 0x3ffu);
  uint32_t r = m < 0x38800000u ? subnormal : normal;
  r = m >= 0x477ff000u ? 0x7c00u : r;  // >= 65520 rounds to inf
  r = m > 0x7f800000u ? nan : r;
  return static_cast<uint16_t>(sign | r);
}

// Exact; a NaN comes back quiet with its payload (vcvtph2ps's result).
KVCAST_HD inline float DecodeHalf(uint16_t h) {
  const uint32_t a = h & 0x7fffu, sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t normal = (a << 13) + 0x38000000u;
  const uint32_t subnormal = Bits(Mul(IntToFloat(static_cast<int32_t>(a)), 0x1p-24f));
  const uint32_t special = (a << 13) | 0x7f800000u | (a > 0x7c00u ? 0x400000u : 0u);
  uint32_t r = a < 0x400u ? subnormal : normal;
  r = a >= 0x7c00u ? special : r;
  return FromBits(sign | r);
}

// bfloat16, round to nearest even; NaN -> quiet NaN (top payload kept).
KVCAST_HD inline uint16_t EncodeBf16(float x) {
  const uint32_t b = Bits(x);
  const uint32_t rounded = (b + 0x7fffu + ((b >> 16) & 1)) >> 16;
  const uint32_t nan = (b >> 16) | 0x40u;
  return static_cast<uint16_t>((b & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

KVCAST_HD inline float DecodeBf16(uint16_t v) { return FromBits(static_cast<uint32_t>(v) << 16); }

// OCP FP8 E4M3FN, round to nearest even, saturating to +-448; NaN -> 0x7f,
// +-inf -> 0x7f / 0xff.
KVCAST_HD inline uint8_t EncodeFp8E4M3(float x) {
  const uint32_t b = Bits(x), m = b & 0x7fffffffu;
  uint32_t sign = (b >> 24) & 0x80u;
  uint32_t normal = ((m + 0x7ffffu + ((m >> 20) & 1)) >> 20) - (120u << 3);
  normal = normal < 0x7eu ? normal : 0x7eu;
  // Below 2^-6: the ulp of 2^14 is 2^-9, the fp8 subnormal step.
  const uint32_t subnormal = Bits(Add(FromBits(m), 16384.f)) - 0x46800000u;
  uint32_t r = m < 0x3c800000u ? subnormal : normal;
  r = m >= 0x7f800000u ? 0x7fu : r;
  sign = m > 0x7f800000u ? 0u : sign;
  return static_cast<uint8_t>(r | sign);
}

KVCAST_HD inline float DecodeFp8E4M3(uint8_t c) {
  const uint32_t a = c & 0x7fu, sign = static_cast<uint32_t>(c & 0x80u) << 24;
  const uint32_t normal = (a << 20) + (120u << 23);
  const uint32_t subnormal = Bits(Mul(IntToFloat(static_cast<int32_t>(a)), 0x1p-9f));
  uint32_t r = a < 8u ? subnormal : normal;
  r = a == 0x7fu ? 0x7fc00000u : r;
  return FromBits(sign | r);
}

// OCP FP4 E2M1 (magnitudes 0 .5 1 1.5 2 3 4 6, sign in bit 3), round to
// nearest even, saturating to +-6 (inf included); NaN -> 0.
KVCAST_HD inline uint8_t EncodeFp4E2M1(float x) {
  const float a = FromBits(AbsBits(x));
  const uint32_t code = (a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) +
                        (a >= 3.5f) + (a > 5.f);
  const uint32_t sign = x == x ? (Bits(x) >> 28) & 8u : 0u;
  return static_cast<uint8_t>(code | sign);
}

// The code in the low nibble.
KVCAST_HD inline float DecodeFp4E2M1(uint8_t c) {
  // Float bits of 0, .5, 1, 1.5, 2, 3, 4, 6 (a switch, not a table: no
  // __constant__ memory needed on the device).
  uint32_t m;
  switch (c & 7u) {
    case 0: m = 0x00000000u; break;
    case 1: m = 0x3f000000u; break;
    case 2: m = 0x3f800000u; break;
    case 3: m = 0x3fc00000u; break;
    case 4: m = 0x40000000u; break;
    case 5: m = 0x40400000u; break;
    case 6: m = 0x40800000u; break;
    default: m = 0x40c00000u; break;
  }
  return FromBits(m | (static_cast<uint32_t>(c & 8u) << 28));
}

// round_to_nearest_even(clamp(v, -qmax, qmax)) for finite v (the
// reference's RoundToInt): adding 1.5 * 2^23 leaves the integer in the low
// mantissa bits, rounded by the float adder.
KVCAST_HD inline int32_t RoundToInt(float v, float qmax) {
  v = v < -qmax ? -qmax : v;
  v = v > qmax ? qmax : v;
  return static_cast<int32_t>(Bits(Add(v, 12582912.f))) - 0x4b400000;
}

// A block with this scale is quantized (finite, > 0); others get codes 0.
KVCAST_HD inline bool QuantizableScale(float scale) {
  return scale > 0.f && scale <= 0x1.fffffep127f;
}
// A block with this scale decodes to numbers; others decode to NaN.
KVCAST_HD inline bool FiniteScale(float scale) { return AbsBits(scale) < 0x7f800000u; }

// ---------------------------------------------------------------------------
// Per-format facts and per-block math.

KVCAST_HD inline int FormatBits(KvFormat format) {
  switch (format) {
    case KvFormat::kFp16:
    case KvFormat::kBf16:
      return 16;
    case KvFormat::kFp8E4M3:
    case KvFormat::kInt8:
      return 8;
    default:
      return 4;
  }
}

KVCAST_HD inline bool FormatScaled(KvFormat format) {
  return format != KvFormat::kFp16 && format != KvFormat::kBf16;
}

// Largest code magnitude (kv_internal::KvFormatQmax).
KVCAST_HD inline float FormatQmax(KvFormat format) {
  switch (format) {
    case KvFormat::kFp8E4M3:
      return 448.f;
    case KvFormat::kInt8:
      return 127.f;
    case KvFormat::kFp4E2M1:
      return 6.f;
    case KvFormat::kInt4:
      return 7.f;
    default:
      return 0.f;
  }
}

// The fp16 scale of a block whose largest |x| has float bits `amax_bits`
// (the max of AbsBits over the block): amax / qmax rounded up to fp16; 0 for
// an all-zero block, 0x7e00 for one holding NaN, 0x7c00 for one holding inf,
// 0x7bff (65504) for a finite block too large for fp16 scales.
KVCAST_HD inline uint16_t ScaleForBlock(uint32_t amax_bits, float qmax) {
  if (amax_bits == 0) return 0;
  if (amax_bits > 0x7f800000u) return 0x7e00;
  if (amax_bits == 0x7f800000u) return 0x7c00;
  uint32_t h = EncodeHalf(Div(FromBits(amax_bits), qmax));
  // The reference compares DecodeHalf(h) * qmax < amax in float. The product
  // is exact and both sides are non-negative and finite, so comparing bit
  // patterns is the same test, and it stays right should subnormals ever be
  // flushed on the device.
  if (h < 0x7c00u && Bits(Mul(DecodeHalf(static_cast<uint16_t>(h)), qmax)) < amax_bits) ++h;
  return static_cast<uint16_t>(h < 0x7c00u ? h : 0x7bffu);
}

// Code of x in a block with fp16 scale `scale` (decoded to float): the
// format's code of x / scale, in the low 4 bits for 4-bit formats; 0 when
// the scale is 0 or not finite.
KVCAST_HD inline uint8_t QuantizeValue(KvFormat format, float x, float scale) {
  if (!QuantizableScale(scale)) return 0;
  const float v = Div(x, scale);
  switch (format) {
    case KvFormat::kFp8E4M3:
      return EncodeFp8E4M3(v);
    case KvFormat::kInt8:
      return static_cast<uint8_t>(RoundToInt(v, 127.f));
    case KvFormat::kFp4E2M1:
      return EncodeFp4E2M1(v) & 15u;
    case KvFormat::kInt4:
      return static_cast<uint8_t>(RoundToInt(v, 7.f)) & 15u;
    default:
      return 0;
  }
}

// Value of a code (low nibble for 4-bit formats) in a block with fp16 scale
// `scale`: code value * scale; NaN when the scale is inf or NaN.
KVCAST_HD inline float DequantizeValue(KvFormat format, uint8_t code, float scale) {
  if (!FiniteScale(scale)) return QuietNaN();
  float v;
  switch (format) {
    case KvFormat::kFp8E4M3:
      v = DecodeFp8E4M3(code);
      // The NaN codes 0x7f / 0xff: x86 (the reference) returns the NaN
      // operand of a product, sign kept, where the GPU would return its
      // canonical NaN; return the operand on both.
      if (v != v) return v;
      break;
    case KvFormat::kInt8:
      v = IntToFloat(static_cast<int8_t>(code));
      break;
    case KvFormat::kFp4E2M1:
      v = DecodeFp4E2M1(code);
      break;
    case KvFormat::kInt4:
      v = IntToFloat(static_cast<int8_t>(static_cast<uint8_t>(code << 4)) >> 4);
      break;
    default:
      return 0.f;
  }
  return Mul(v, scale);  // exact: <= 9 significant bits times an fp16
}

// ---------------------------------------------------------------------------
// Row layout: [scales: num_blocks x fp16 LE][values]. `n` counts the row's
// values, `block` the values per scale (scaled formats only).

// Bytes of one row (kvcast::KvRowBytes without the asserts).
KVCAST_HD inline size_t RowBytes(KvFormat format, size_t n, int block) {
  if (!FormatScaled(format)) return 2 * n;
  return 2 * (n / static_cast<size_t>(block)) + n * FormatBits(format) / 8;
}

// Bytes of the value area holding `values` values of a scaled format.
KVCAST_HD inline size_t ValueBytes(KvFormat format, size_t values) {
  return FormatBits(format) == 8 ? values : values / 2;
}

// Byte j of a scaled row's value area, given the row's float input `x` and
// `scale_of(b)`, the decoded fp16 scale of block b: value j for 8-bit
// formats; values 2j (low nibble) and 2j + 1 (high nibble) for 4-bit ones,
// which with an odd block may sit in two different blocks.
template <typename ScaleOf>
KVCAST_HD inline uint8_t EncodeValueByte(KvFormat format, const float* x, size_t j, int block,
                                         const ScaleOf& scale_of) {
  const size_t bs = static_cast<size_t>(block);
  if (FormatBits(format) == 8) return QuantizeValue(format, x[j], scale_of(j / bs));
  const uint8_t lo = QuantizeValue(format, x[2 * j], scale_of(2 * j / bs));
  const uint8_t hi = QuantizeValue(format, x[2 * j + 1], scale_of((2 * j + 1) / bs));
  return static_cast<uint8_t>(lo | hi << 4);
}

// Value i of a scaled row, given its value area `values` and `scale_of(b)`.
template <typename ScaleOf>
KVCAST_HD inline float DecodeValue(KvFormat format, const uint8_t* values, size_t i, int block,
                                   const ScaleOf& scale_of) {
  const float scale = scale_of(i / static_cast<size_t>(block));
  if (FormatBits(format) == 8) return DequantizeValue(format, values[i], scale);
  const uint8_t byte = values[i / 2];
  return DequantizeValue(format, static_cast<uint8_t>(i % 2 != 0 ? byte >> 4 : byte & 15u),
                         scale);
}

// The 16-bit code of an unscaled format (fp16 / bf16) and back.
KVCAST_HD inline uint16_t EncodeUnscaled(KvFormat format, float x) {
  return format == KvFormat::kBf16 ? EncodeBf16(x) : EncodeHalf(x);
}
KVCAST_HD inline float DecodeUnscaled(KvFormat format, uint16_t v) {
  return format == KvFormat::kBf16 ? DecodeBf16(v) : DecodeHalf(v);
}

}  // namespace kv_math
}  // namespace cuda
}  // namespace kvcast

#endif  // KVCAST_KERNELS_CUDA_KV_CODEC_MATH_H_
