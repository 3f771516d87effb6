#include "common/dtype.h"

#include <cstring>

namespace kvcast {
namespace {

uint32_t FloatBits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
}

float BitsToFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

}  // namespace

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
      return 2;
  }
  return 0;
}

std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
  }
  return "?";
}

std::optional<DType> DTypeFromName(std::string_view name) {
  if (name == "F32") return DType::kF32;
  if (name == "F16") return DType::kF16;
  if (name == "BF16") return DType::kBF16;
  return std::nullopt;
}

float HalfToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1f;
  const uint32_t mantissa = bits & 0x3ff;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in float.
    const float magnitude = static_cast<float>(mantissa) * (1.0f / 16777216.0f);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return BitsToFloat(sign | 0x7f800000u | (mantissa << 13));
  return BitsToFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

float BFloat16ToFloat(uint16_t bits) {
  return BitsToFloat(static_cast<uint32_t>(bits) << 16);
}

uint16_t FloatToHalf(float value) {
  const uint32_t bits = FloatBits(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) {  // NaN: keep the top payload bits, force quiet.
    return sign | 0x7e00 | static_cast<uint16_t>((magnitude >> 13) & 0x3ff);
  }
  if (magnitude >= 0x477ff000u) return sign | 0x7c00;  // >= 65520 (or inf).
  if (magnitude < 0x38800000u) {  // Below 2^-14: half subnormal or zero.
    if (magnitude < 0x33000000u) return sign;  // Below 2^-25 rounds to zero.
    const uint32_t exponent = magnitude >> 23;
    const uint32_t significand = (magnitude & 0x7fffffu) | 0x800000u;
    // value = significand * 2^(exponent-150); half units are 2^-24.
    const uint32_t shift = 126 - exponent;
    uint32_t quotient = significand >> shift;
    const uint32_t remainder = significand & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (remainder > halfway || (remainder == halfway && (quotient & 1))) ++quotient;
    return sign | static_cast<uint16_t>(quotient);  // 0x400 is the smallest normal.
  }
  // Normal: rebias the exponent (127 -> 15) and round the low 13 bits to even.
  const uint32_t rounded = magnitude + 0xfffu + ((magnitude >> 13) & 1);
  return sign | static_cast<uint16_t>((rounded - 0x38000000u) >> 13);
}

uint16_t FloatToBFloat16(float value) {
  const uint32_t bits = FloatBits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((bits >> 16) | 0x0040);  // Quiet NaN.
  }
  // Overflow carries into the exponent and yields infinity, as it should.
  const uint32_t rounded = bits + 0x7fffu + ((bits >> 16) & 1);
  return static_cast<uint16_t>(rounded >> 16);
}

}  // namespace kvcast
