// KV wire codecs: the per-value formats of KVCache-over-MoQT payloads
// (docs/kvcache-wire-format.md), from and to the engine's float32 KV.
//
// One *row* is one token's K (or V) of one layer: num_heads * head_dim
// float32 values, heads in order. Encoded, a row is
//
//   [scales: num_blocks x fp16, little-endian][values, packed]
//
// where a *block* is `block` consecutive values of the row sharing one scale
// (block divides head_dim, so no block spans two heads); unscaled formats
// (fp16, bf16) have no scales. Values are packed little-endian (2-byte
// formats), one per byte (8-bit formats) or two per byte (4-bit formats:
// element 2i in the low nibble, 2i+1 in the high nibble).
//
// Quantization of a block with largest magnitude amax, for a format whose
// largest code magnitude is qmax (int8 127, int4 7, fp8-e4m3 448,
// fp4-e2m1 6): scale = amax / qmax rounded *up* to fp16 (so no value clips),
// q = round_to_nearest_even(x / scale) in the format (integers, or the
// nearest representable fp8/fp4 value), decoded x' = q * scale. A block of
// zeros has scale 0 and decodes to zeros. Non-finite input makes the block's
// scale non-finite; its values then decode to NaN, as exact KV would poison
// the attention. fp16 and bf16 are plain round-to-nearest-even conversions.
//
// Details every implementation matches (kv_codec_test, and
// kv_codec_oracle_test against numpy and ml_dtypes):
//  - A block holding a NaN gets scale 0x7e00, one holding +-inf (and no NaN)
//    0x7c00; its codes are all 0. A decoder gives NaN for every value of a
//    block whose scale is inf or NaN, whatever its codes.
//  - A finite block too large for fp16 scales (amax / qmax > 65504) gets
//    scale 65504 (0x7bff) and its values saturate at +-qmax: encoding never
//    turns finite KV into NaN.
//  - Scales are never negative; -0.0 keeps its sign in fp8 (0x80) and fp4
//    (0x8), and becomes 0 in int8/int4.
//  - Standalone fp8: +-inf -> 0x7f / 0xff (NaN; E4M3FN has no inf), any NaN
//    -> 0x7f. Standalone fp4: +-inf saturates to +-6, NaN -> 0.
//  - fp16/bf16 rows keep NaN a NaN (quiet, top payload bits kept).
//
// Pure functions; thread-safe.
#ifndef KVCAST_KERNELS_KV_CODEC_H_
#define KVCAST_KERNELS_KV_CODEC_H_

#include <cstddef>
#include <cstdint>

#include "common/dtype.h"

namespace kvcast {

enum class KvFormat : uint8_t { kFp16, kBf16, kFp8E4M3, kInt8, kFp4E2M1, kInt4 };

inline constexpr KvFormat kAllKvFormats[] = {KvFormat::kFp16,   KvFormat::kBf16,
                                             KvFormat::kFp8E4M3, KvFormat::kInt8,
                                             KvFormat::kFp4E2M1, KvFormat::kInt4};

// Bits per value: 16, 8 or 4.
int KvFormatBits(KvFormat format);
// Whether values carry per-block scales (every format but fp16 and bf16).
bool KvFormatScaled(KvFormat format);

// Bytes of one encoded row of num_heads * head_dim values with scale blocks
// of `block` values (ignored for unscaled formats). Requires head_dim %
// block == 0 and, for 4-bit formats, an even head_dim.
size_t KvRowBytes(KvFormat format, int num_heads, int head_dim, int block);

// Reference row codecs, the ground truth every backend matches.
void EncodeKvRow(KvFormat format, const float* in, int num_heads, int head_dim,
                 int block, uint8_t* out);
void DecodeKvRow(KvFormat format, const uint8_t* in, int num_heads, int head_dim,
                 int block, float* out);

// Scalar conversions (round to nearest even), exposed for tests and tools;
// fp16 and bf16 ones are common/dtype.h's FloatToHalf / HalfToFloat
// and FloatToBFloat16 / BFloat16ToFloat.
uint8_t FloatToFp8E4M3(float x);  // saturates to +-448; NaN -> 0x7f
float Fp8E4M3ToFloat(uint8_t v);
uint8_t FloatToFp4E2M1(float x);  // 4-bit code in the low nibble; saturates to +-6
float Fp4E2M1ToFloat(uint8_t v);

}  // namespace kvcast

#endif  // KVCAST_KERNELS_KV_CODEC_H_
