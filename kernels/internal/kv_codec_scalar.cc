// Portable kernels of the KV wire codecs: plain loops over the inline
// conversions of kv_codec_kernels.h, the reference the AVX2 kernels match.
#include <algorithm>
#include <limits>

#include "kernels/internal/kv_codec_kernels.h"

namespace kvcast {
namespace kv_internal {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

void EncodeFp16(const float* in, size_t n, uint8_t* out) {
  for (size_t i = 0; i < n; ++i) {
    const uint16_t h = EncodeHalf(in[i]);
    out[2 * i] = static_cast<uint8_t>(h);
    out[2 * i + 1] = static_cast<uint8_t>(h >> 8);
  }
}

void DecodeFp16(const uint8_t* in, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = DecodeHalf(in[2 * i] | in[2 * i + 1] << 8);
}

void EncodeBf16Row(const float* in, size_t n, uint8_t* out) {
  for (size_t i = 0; i < n; ++i) {
    const uint16_t v = EncodeBf16(in[i]);
    out[2 * i] = static_cast<uint8_t>(v);
    out[2 * i + 1] = static_cast<uint8_t>(v >> 8);
  }
}

void DecodeBf16Row(const uint8_t* in, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = DecodeBf16(in[2 * i] | in[2 * i + 1] << 8);
}

void BlockAmax(const float* in, size_t n, size_t block, uint32_t* amax_bits) {
  for (size_t b = 0; b * block < n; ++b) {
    const float* x = in + b * block;
    uint32_t m = 0;
    for (size_t i = 0; i < block; ++i) m = std::max(m, Bits(x[i]) & 0x7fffffffu);
    amax_bits[b] = m;
  }
}

// One-byte formats: Code(x / scale) per value.
template <uint8_t (*Code)(float)>
void Quantize8(const float* in, size_t n, size_t block, const float* scales, uint8_t* out) {
  for (size_t b = 0; b * block < n; ++b) {
    const float s = scales[b];
    const float* x = in + b * block;
    uint8_t* o = out + b * block;
    if (!QuantizableScale(s)) {
      std::fill(o, o + block, 0);
      continue;
    }
    for (size_t i = 0; i < block; ++i) o[i] = Code(x[i] / s);
  }
}

template <float (*Value)(uint8_t)>
void Dequantize8(const uint8_t* in, size_t n, size_t block, const float* scales, float* out) {
  for (size_t b = 0; b * block < n; ++b) {
    const float s = scales[b];
    const uint8_t* c = in + b * block;
    float* o = out + b * block;
    if (!FiniteScale(s)) {
      std::fill(o, o + block, kNaN);
      continue;
    }
    for (size_t i = 0; i < block; ++i) o[i] = Value(c[i]) * s;
  }
}

// Four-bit formats. With an even block a byte never spans two blocks; an odd
// block (legal, if odd) takes the per-value path.
template <uint8_t (*Code)(float)>
void Quantize4(const float* in, size_t n, size_t block, const float* scales, uint8_t* out) {
  if (block % 2 != 0) {
    for (size_t i = 0; i < n; i += 2) {
      const float s0 = scales[i / block], s1 = scales[(i + 1) / block];
      const uint8_t lo = QuantizableScale(s0) ? Code(in[i] / s0) & 15 : 0;
      const uint8_t hi = QuantizableScale(s1) ? Code(in[i + 1] / s1) & 15 : 0;
      out[i / 2] = static_cast<uint8_t>(lo | hi << 4);
    }
    return;
  }
  for (size_t b = 0; b * block < n; ++b) {
    const float s = scales[b];
    const float* x = in + b * block;
    uint8_t* o = out + b * block / 2;
    if (!QuantizableScale(s)) {
      std::fill(o, o + block / 2, 0);
      continue;
    }
    for (size_t i = 0; i < block / 2; ++i) {
      o[i] = static_cast<uint8_t>((Code(x[2 * i] / s) & 15) | Code(x[2 * i + 1] / s) << 4);
    }
  }
}

template <float (*Value)(uint8_t)>
void Dequantize4(const uint8_t* in, size_t n, size_t block, const float* scales, float* out) {
  if (block % 2 != 0) {
    for (size_t i = 0; i < n; ++i) {
      const float s = scales[i / block];
      const uint8_t code = (in[i / 2] >> (4 * (i % 2))) & 15;
      out[i] = FiniteScale(s) ? Value(code) * s : kNaN;
    }
    return;
  }
  for (size_t b = 0; b * block < n; ++b) {
    const float s = scales[b];
    const uint8_t* c = in + b * block / 2;
    float* o = out + b * block;
    if (!FiniteScale(s)) {
      std::fill(o, o + block, kNaN);
      continue;
    }
    for (size_t i = 0; i < block / 2; ++i) {
      o[2 * i] = Value(c[i] & 15) * s;
      o[2 * i + 1] = Value(c[i] >> 4) * s;
    }
  }
}

uint8_t Int8Code(float v) { return static_cast<uint8_t>(RoundToInt(v, 127.f)); }
uint8_t Int4Code(float v) { return static_cast<uint8_t>(RoundToInt(v, 7.f)); }
float Int8Value(uint8_t c) { return static_cast<float>(static_cast<int8_t>(c)); }
float Int4Value(uint8_t c) {  // sign-extends the low nibble
  return static_cast<float>(static_cast<int8_t>(c << 4) >> 4);
}

}  // namespace

const KvKernels& ScalarKvKernels() {
  static const KvKernels kernels = {
      EncodeFp16,
      EncodeBf16Row,
      DecodeFp16,
      DecodeBf16Row,
      BlockAmax,
      {nullptr, nullptr, Quantize8<EncodeFp8E4M3>, Quantize8<Int8Code>, Quantize4<EncodeFp4E2M1>,
       Quantize4<Int4Code>},
      {nullptr, nullptr, Dequantize8<DecodeFp8E4M3>, Dequantize8<Int8Value>,
       Dequantize4<DecodeFp4E2M1>, Dequantize4<Int4Value>},
  };
  return kernels;
}

}  // namespace kv_internal
}  // namespace kvcast
