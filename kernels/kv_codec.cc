// KV wire codecs (kv_codec.h): the row layout, the block scales and the
// scalar conversions; the bulk work goes to the kernel table of
// internal/kv_codec_kernels.h (AVX2 where the CPU has it, else scalar).
//
// The fp16/bf16 scalar conversions are common/dtype.h's; the row
// codecs use the inline EncodeHalf/EncodeBf16 of the kernel header, which
// kv_codec_test checks against them.
#include "kernels/kv_codec.h"

#include <algorithm>
#include <cassert>

#include "kernels/internal/kv_codec_kernels.h"

namespace kvcast {

int KvFormatBits(KvFormat format) {
  switch (format) {
    case KvFormat::kFp16:
    case KvFormat::kBf16:
      return 16;
    case KvFormat::kFp8E4M3:
    case KvFormat::kInt8:
      return 8;
    case KvFormat::kFp4E2M1:
    case KvFormat::kInt4:
      return 4;
  }
  return 0;
}

bool KvFormatScaled(KvFormat format) {
  return format != KvFormat::kFp16 && format != KvFormat::kBf16;
}

size_t KvRowBytes(KvFormat format, int num_heads, int head_dim, int block) {
  const size_t n = static_cast<size_t>(num_heads) * head_dim;
  if (!KvFormatScaled(format)) return 2 * n;
  assert(block > 0 && head_dim % block == 0);
  assert(KvFormatBits(format) == 8 || head_dim % 2 == 0);
  return 2 * (n / block) + n * KvFormatBits(format) / 8;
}

void EncodeKvRow(KvFormat format, const float* in, int num_heads, int head_dim, int block,
                 uint8_t* out) {
  kv_internal::EncodeKvRowWith(kv_internal::ActiveKvKernels(), format, in, num_heads, head_dim,
                               block, out);
}

void DecodeKvRow(KvFormat format, const uint8_t* in, int num_heads, int head_dim, int block,
                 float* out) {
  kv_internal::DecodeKvRowWith(kv_internal::ActiveKvKernels(), format, in, num_heads, head_dim,
                               block, out);
}

uint8_t FloatToFp8E4M3(float x) { return kv_internal::EncodeFp8E4M3(x); }
float Fp8E4M3ToFloat(uint8_t v) { return kv_internal::DecodeFp8E4M3(v); }
uint8_t FloatToFp4E2M1(float x) { return kv_internal::EncodeFp4E2M1(x); }
float Fp4E2M1ToFloat(uint8_t v) { return kv_internal::DecodeFp4E2M1(v & 15); }

namespace kv_internal {
namespace {

// Blocks per kernel call: bounds the stack arrays of amax and scales. Even,
// so that a group of odd 4-bit blocks still starts on a byte.
constexpr size_t kGroupBlocks = 64;

}  // namespace

float KvFormatQmax(KvFormat format) {
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

uint16_t ScaleForBlock(uint32_t amax_bits, float qmax) {
  if (amax_bits == 0) return 0;
  if (amax_bits > 0x7f800000u) return 0x7e00;   // NaN
  if (amax_bits == 0x7f800000u) return 0x7c00;  // inf
  const float amax = FromBits(amax_bits);
  // The nearest fp16 to the quotient, then one up if it is below the exact
  // quotient. An fp16 times qmax (<= 9 significant bits) is exact in float,
  // so the comparison is exact too.
  uint32_t h = EncodeHalf(amax / qmax);
  if (h < 0x7c00u && DecodeHalf(h) * qmax < amax) ++h;
  return static_cast<uint16_t>(h < 0x7c00u ? h : 0x7bffu);
}

void EncodeKvRowWith(const KvKernels& k, KvFormat format, const float* in, int num_heads,
                     int head_dim, int block, uint8_t* out) {
  const size_t n = static_cast<size_t>(num_heads) * head_dim;
  if (format == KvFormat::kFp16) return k.encode_fp16(in, n, out);
  if (format == KvFormat::kBf16) return k.encode_bf16(in, n, out);
  const size_t bs = block, num_blocks = n / bs, bits = KvFormatBits(format);
  const float qmax = KvFormatQmax(format);
  uint8_t* values = out + 2 * num_blocks;
  uint32_t amax[kGroupBlocks];
  float scales[kGroupBlocks];
  for (size_t b0 = 0; b0 < num_blocks; b0 += kGroupBlocks) {
    const size_t g = std::min(kGroupBlocks, num_blocks - b0);
    const float* x = in + b0 * bs;
    k.block_amax(x, g * bs, bs, amax);
    for (size_t i = 0; i < g; ++i) {
      const uint16_t h = ScaleForBlock(amax[i], qmax);
      out[2 * (b0 + i)] = static_cast<uint8_t>(h);
      out[2 * (b0 + i) + 1] = static_cast<uint8_t>(h >> 8);
      scales[i] = DecodeHalf(h);
    }
    k.quantize[static_cast<int>(format)](x, g * bs, bs, scales, values + b0 * bs * bits / 8);
  }
}

void DecodeKvRowWith(const KvKernels& k, KvFormat format, const uint8_t* in, int num_heads,
                     int head_dim, int block, float* out) {
  const size_t n = static_cast<size_t>(num_heads) * head_dim;
  if (format == KvFormat::kFp16) return k.decode_fp16(in, n, out);
  if (format == KvFormat::kBf16) return k.decode_bf16(in, n, out);
  const size_t bs = block, num_blocks = n / bs, bits = KvFormatBits(format);
  const uint8_t* values = in + 2 * num_blocks;
  float scales[kGroupBlocks];
  for (size_t b0 = 0; b0 < num_blocks; b0 += kGroupBlocks) {
    const size_t g = std::min(kGroupBlocks, num_blocks - b0);
    for (size_t i = 0; i < g; ++i) {
      scales[i] = DecodeHalf(in[2 * (b0 + i)] | in[2 * (b0 + i) + 1] << 8);
    }
    k.dequantize[static_cast<int>(format)](values + b0 * bs * bits / 8, g * bs, bs, scales,
                                           out + b0 * bs);
  }
}

const KvKernels& ActiveKvKernels() {
  static const KvKernels* const kernels = [] {
    const KvKernels* avx2 = Avx2KvKernels();
    return avx2 != nullptr ? avx2 : &ScalarKvKernels();
  }();
  return *kernels;
}

}  // namespace kv_internal
}  // namespace kvcast
