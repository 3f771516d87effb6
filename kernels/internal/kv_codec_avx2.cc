// AVX2 + F16C kernels of the KV wire codecs, compiled for those extensions
// function by function (the build targets x86-64-v2) and used only when the
// CPU reports them. Each kernel computes exactly what its scalar twin in
// kv_codec_scalar.cc computes: the same quotients x / scale, the same
// round-to-nearest-even, the same bit tricks; scale products are exact.
// Leftovers shorter than a vector use the same inline conversions.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "kernels/internal/kv_codec_kernels.h"

#define KV_AVX2 __attribute__((target("avx2,f16c")))

namespace kvcast {
namespace kv_internal {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

KV_AVX2 inline __m256 Load(const float* p) { return _mm256_loadu_ps(p); }
KV_AVX2 inline __m256i Set(int32_t v) { return _mm256_set1_epi32(v); }
KV_AVX2 inline __m256i AsInt(__m256 v) { return _mm256_castps_si256(v); }

KV_AVX2 inline void StoreLe16(uint8_t* out, uint16_t v) {
  out[0] = static_cast<uint8_t>(v);
  out[1] = static_cast<uint8_t>(v >> 8);
}

KV_AVX2 void EncodeFp16(const float* in, size_t n, uint8_t* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(Load(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i), h);
  }
  for (; i < n; ++i) StoreLe16(out + 2 * i, EncodeHalf(in[i]));
}

KV_AVX2 void DecodeFp16(const uint8_t* in, size_t n, float* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) out[i] = DecodeHalf(in[2 * i] | in[2 * i + 1] << 8);
}

// EncodeBf16 on 8 lanes; the result sits in the low 16 bits of each lane.
KV_AVX2 inline __m256i Bf16Lanes(__m256i b) {
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), Set(1));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(b, Set(0x7fff)), lsb), 16);
  const __m256i nan = _mm256_or_si256(_mm256_srli_epi32(b, 16), Set(0x40));
  const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(b, Set(0x7fffffff)), Set(0x7f800000));
  return _mm256_blendv_epi8(rounded, nan, is_nan);
}

KV_AVX2 void EncodeBf16Row(const float* in, size_t n, uint8_t* out) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i a = Bf16Lanes(AsInt(Load(in + i)));
    const __m256i b = Bf16Lanes(AsInt(Load(in + i + 8)));
    // packus interleaves 128-bit lanes; the permute restores value order.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 2 * i), packed);
  }
  for (; i < n; ++i) StoreLe16(out + 2 * i, EncodeBf16(in[i]));
}

KV_AVX2 void DecodeBf16Row(const uint8_t* in, size_t n, float* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i));
    const __m256i bits = _mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), bits);
  }
  for (; i < n; ++i) out[i] = DecodeBf16(in[2 * i] | in[2 * i + 1] << 8);
}

KV_AVX2 void BlockAmax(const float* in, size_t n, size_t block, uint32_t* amax_bits) {
  const __m256i abs_mask = Set(0x7fffffff);
  for (size_t b = 0; b * block < n; ++b) {
    const float* x = in + b * block;
    __m256i m0 = _mm256_setzero_si256(), m1 = m0;
    size_t i = 0;
    for (; i + 16 <= block; i += 16) {
      m0 = _mm256_max_epu32(m0, _mm256_and_si256(AsInt(Load(x + i)), abs_mask));
      m1 = _mm256_max_epu32(m1, _mm256_and_si256(AsInt(Load(x + i + 8)), abs_mask));
    }
    for (; i + 8 <= block; i += 8) {
      m0 = _mm256_max_epu32(m0, _mm256_and_si256(AsInt(Load(x + i)), abs_mask));
    }
    m0 = _mm256_max_epu32(m0, m1);
    __m128i m = _mm_max_epu32(_mm256_castsi256_si128(m0), _mm256_extracti128_si256(m0, 1));
    m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0x4e));
    m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0xb1));
    uint32_t r = static_cast<uint32_t>(_mm_cvtsi128_si32(m));
    for (; i < block; ++i) r = std::max(r, Bits(x[i]) & 0x7fffffffu);
    amax_bits[b] = r;
  }
}

// 32 int32 lanes holding byte values -> 32 bytes in order. Signed
// saturation never triggers for int8 codes; fp8 codes (0..255) take the
// unsigned final pack.
KV_AVX2 inline __m256i PackBytes(__m256i q0, __m256i q1, __m256i q2, __m256i q3,
                                 bool unsigned_bytes) {
  const __m256i w01 = _mm256_packs_epi32(q0, q1), w23 = _mm256_packs_epi32(q2, q3);
  const __m256i b = unsigned_bytes ? _mm256_packus_epi16(w01, w23) : _mm256_packs_epi16(w01, w23);
  return _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// 32 bytes holding 4-bit codes -> 16 bytes, value 2i in the low nibble.
KV_AVX2 inline __m128i PackNibbles(__m256i bytes) {
  const __m256i t = _mm256_and_si256(bytes, _mm256_set1_epi16(0x0f0f));
  const __m256i w =
      _mm256_or_si256(_mm256_and_si256(t, _mm256_set1_epi16(0x000f)), _mm256_srli_epi16(t, 4));
  const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi16(w, w), 0x08);
  return _mm256_castsi256_si128(p);
}

// Per-format code of 8 values x / s, as int32 lanes.
struct Int8Codes {
  static constexpr float kQmax = 127.f;
  KV_AVX2 static __m256i Codes(__m256 v) {
    v = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(-kQmax)), _mm256_set1_ps(kQmax));
    return _mm256_cvtps_epi32(v);  // round to nearest even (default MXCSR)
  }
  static uint8_t Code(float v) { return static_cast<uint8_t>(RoundToInt(v, kQmax)); }
};
struct Int4Codes {
  static constexpr float kQmax = 7.f;
  KV_AVX2 static __m256i Codes(__m256 v) {
    v = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(-kQmax)), _mm256_set1_ps(kQmax));
    return _mm256_cvtps_epi32(v);
  }
  static uint8_t Code(float v) { return static_cast<uint8_t>(RoundToInt(v, kQmax)); }
};
struct Fp8Codes {
  KV_AVX2 static __m256i Codes(__m256 v) {
    const __m256i b = AsInt(v), m = _mm256_and_si256(b, Set(0x7fffffff));
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(m, 20), Set(1));
    __m256i normal =
        _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(m, Set(0x7ffff)), lsb), 20);
    normal = _mm256_min_epi32(_mm256_sub_epi32(normal, Set(120 << 3)), Set(0x7e));
    const __m256 shifted = _mm256_add_ps(_mm256_castsi256_ps(m), _mm256_set1_ps(16384.f));
    const __m256i subnormal = _mm256_sub_epi32(AsInt(shifted), Set(0x46800000));
    __m256i r = _mm256_blendv_epi8(normal, subnormal, _mm256_cmpgt_epi32(Set(0x3c800000), m));
    r = _mm256_blendv_epi8(r, Set(0x7f), _mm256_cmpgt_epi32(m, Set(0x7f7fffff)));
    __m256i sign = _mm256_and_si256(_mm256_srli_epi32(b, 24), Set(0x80));
    sign = _mm256_andnot_si256(_mm256_cmpgt_epi32(m, Set(0x7f800000)), sign);
    return _mm256_or_si256(r, sign);
  }
  static uint8_t Code(float v) { return EncodeFp8E4M3(v); }
};
struct Fp4Codes {
  KV_AVX2 static __m256i Codes(__m256 v) {
    const __m256 a = _mm256_andnot_ps(_mm256_set1_ps(-0.f), v);
    __m256i code = _mm256_setzero_si256();
    // Each comparison mask is -1 where true: subtracting counts thresholds
    // passed. Ordered compares are false for NaN, which stays code 0.
    code = _mm256_sub_epi32(code, AsInt(_mm256_cmp_ps(a, _mm256_set1_ps(0.25f), _CMP_GT_OQ)));
    code = _mm256_sub_epi32(code, AsInt(_mm256_cmp_ps(a, _mm256_set1_ps(0.75f), _CMP_GE_OQ)));
    code = _mm256_sub_epi32(code, AsInt(_mm256_cmp_ps(a, _mm256_set1_ps(1.25f), _CMP_GT_OQ)));
    code = _mm256_sub_epi32(code, AsInt(_mm256_cmp_ps(a, _mm256_set1_ps(1.75f), _CMP_GE_OQ)));
    code = _mm256_sub_epi32(code, AsInt(_mm256_cmp_ps(a, _mm256_set1_ps(2.5f), _CMP_GT_OQ)));
    code = _mm256_sub_epi32(code, AsInt(_mm256_cmp_ps(a, _mm256_set1_ps(3.5f), _CMP_GE_OQ)));
    code = _mm256_sub_epi32(code, AsInt(_mm256_cmp_ps(a, _mm256_set1_ps(5.f), _CMP_GT_OQ)));
    const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(AsInt(v), 28), Set(8));
    const __m256i ordered = AsInt(_mm256_cmp_ps(v, v, _CMP_ORD_Q));
    return _mm256_or_si256(code, _mm256_and_si256(sign, ordered));
  }
  static uint8_t Code(float v) { return EncodeFp4E2M1(v); }
};

// Codes of 32 values x / s (IEEE division, as the scalar kernels divide).
template <typename F>
KV_AVX2 inline __m256i Codes32(const float* x, __m256 s, bool unsigned_bytes) {
  return PackBytes(F::Codes(_mm256_div_ps(Load(x), s)), F::Codes(_mm256_div_ps(Load(x + 8), s)),
                   F::Codes(_mm256_div_ps(Load(x + 16), s)),
                   F::Codes(_mm256_div_ps(Load(x + 24), s)), unsigned_bytes);
}

template <typename F, bool kUnsigned>
KV_AVX2 void Quantize8(const float* in, size_t n, size_t block, const float* scales, uint8_t* out) {
  for (size_t b = 0; b * block < n; ++b) {
    const float s = scales[b];
    const float* x = in + b * block;
    uint8_t* o = out + b * block;
    if (!QuantizableScale(s)) {
      std::memset(o, 0, block);
      continue;
    }
    const __m256 vs = _mm256_set1_ps(s);
    size_t i = 0;
    for (; i + 32 <= block; i += 32) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + i), Codes32<F>(x + i, vs, kUnsigned));
    }
    for (; i < block; ++i) o[i] = F::Code(x[i] / s);
  }
}

// An odd block (bytes spanning two blocks) goes to the scalar kernel.
template <typename F, KvFormat kFormat>
KV_AVX2 void Quantize4(const float* in, size_t n, size_t block, const float* scales, uint8_t* out) {
  if (block % 2 != 0) {
    return ScalarKvKernels().quantize[static_cast<int>(kFormat)](in, n, block, scales, out);
  }
  for (size_t b = 0; b * block < n; ++b) {
    const float s = scales[b];
    const float* x = in + b * block;
    uint8_t* o = out + b * block / 2;
    if (!QuantizableScale(s)) {
      std::memset(o, 0, block / 2);
      continue;
    }
    const __m256 vs = _mm256_set1_ps(s);
    size_t i = 0;
    for (; i + 32 <= block; i += 32) {
      const __m128i packed = PackNibbles(Codes32<F>(x + i, vs, false));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o + i / 2), packed);
    }
    for (; i < block; i += 2) {
      o[i / 2] = static_cast<uint8_t>((F::Code(x[i] / s) & 15) | F::Code(x[i + 1] / s) << 4);
    }
  }
}

// Per-format value of 8 codes (int32 lanes), before the scale.
struct Int8Values {
  KV_AVX2 static __m256 Values(__m256i c) { return _mm256_cvtepi32_ps(c); }
  static float Value(uint8_t c) { return static_cast<float>(static_cast<int8_t>(c)); }
};
struct Fp8Values {
  KV_AVX2 static __m256 Values(__m256i c) {
    const __m256i a = _mm256_and_si256(c, Set(0x7f));
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(c, Set(0x80)), 24);
    const __m256i normal = _mm256_add_epi32(_mm256_slli_epi32(a, 20), Set(120 << 23));
    const __m256i subnormal = AsInt(_mm256_mul_ps(_mm256_cvtepi32_ps(a), _mm256_set1_ps(0x1p-9f)));
    __m256i r = _mm256_blendv_epi8(normal, subnormal, _mm256_cmpgt_epi32(Set(8), a));
    r = _mm256_blendv_epi8(r, Set(0x7fc00000), _mm256_cmpeq_epi32(a, Set(0x7f)));
    return _mm256_castsi256_ps(_mm256_or_si256(r, sign));
  }
  static float Value(uint8_t c) { return DecodeFp8E4M3(c); }
};
// 4-bit codes arrive as 0..15 (int4 already sign-extended to int8 lanes).
struct Int4Values {
  static constexpr bool kSignExtend = true;
  KV_AVX2 static __m256 Values(__m256i c) { return _mm256_cvtepi32_ps(c); }
  static float Value(uint8_t c) { return static_cast<float>(static_cast<int8_t>(c << 4) >> 4); }
};
struct Fp4Values {
  static constexpr bool kSignExtend = false;
  KV_AVX2 static __m256 Values(__m256i c) {
    const __m256 table = _mm256_setr_ps(0.f, .5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f);
    const __m256 magnitude = _mm256_permutevar8x32_ps(table, c);  // uses c & 7
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(c, Set(8)), 28);
    return _mm256_castsi256_ps(_mm256_or_si256(AsInt(magnitude), sign));
  }
  static float Value(uint8_t c) { return DecodeFp4E2M1(c); }
};

template <typename F>
KV_AVX2 inline void Store8(float* o, __m128i bytes, bool sign_extend, __m256 s) {
  const __m256i c = sign_extend ? _mm256_cvtepi8_epi32(bytes) : _mm256_cvtepu8_epi32(bytes);
  _mm256_storeu_ps(o, _mm256_mul_ps(F::Values(c), s));
}

template <typename F, bool kSigned>
KV_AVX2 void Dequantize8(const uint8_t* in, size_t n, size_t block, const float* scales,
                         float* out) {
  for (size_t b = 0; b * block < n; ++b) {
    const float s = scales[b];
    const uint8_t* c = in + b * block;
    float* o = out + b * block;
    if (!FiniteScale(s)) {
      std::fill(o, o + block, kNaN);
      continue;
    }
    const __m256 vs = _mm256_set1_ps(s);
    size_t i = 0;
    for (; i + 8 <= block; i += 8) {
      Store8<F>(o + i, _mm_loadl_epi64(reinterpret_cast<const __m128i*>(c + i)), kSigned, vs);
    }
    for (; i < block; ++i) o[i] = F::Value(c[i]) * s;
  }
}

template <typename F, KvFormat kFormat>
KV_AVX2 void Dequantize4(const uint8_t* in, size_t n, size_t block, const float* scales,
                         float* out) {
  if (block % 2 != 0) {
    return ScalarKvKernels().dequantize[static_cast<int>(kFormat)](in, n, block, scales, out);
  }
  // Nibble -> byte: int4 sign-extends, fp4 keeps the code.
  const __m128i table = F::kSignExtend
                            ? _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4, -3, -2, -1)
                            : _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m128i nibble = _mm_set1_epi8(0x0f);
  for (size_t b = 0; b * block < n; ++b) {
    const float s = scales[b];
    const uint8_t* c = in + b * block / 2;
    float* o = out + b * block;
    if (!FiniteScale(s)) {
      std::fill(o, o + block, kNaN);
      continue;
    }
    const __m256 vs = _mm256_set1_ps(s);
    size_t i = 0;
    for (; i + 32 <= block; i += 32) {
      const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(c + i / 2));
      const __m128i lo = _mm_shuffle_epi8(table, _mm_and_si128(raw, nibble));
      const __m128i hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(raw, 4), nibble));
      const __m128i first = _mm_unpacklo_epi8(lo, hi), second = _mm_unpackhi_epi8(lo, hi);
      Store8<F>(o + i, first, F::kSignExtend, vs);
      Store8<F>(o + i + 8, _mm_srli_si128(first, 8), F::kSignExtend, vs);
      Store8<F>(o + i + 16, second, F::kSignExtend, vs);
      Store8<F>(o + i + 24, _mm_srli_si128(second, 8), F::kSignExtend, vs);
    }
    for (; i < block; i += 2) {
      o[i] = F::Value(c[i / 2] & 15) * s;
      o[i + 1] = F::Value(c[i / 2] >> 4) * s;
    }
  }
}

const KvKernels& Table() {
  static const KvKernels kernels = {
      EncodeFp16,
      EncodeBf16Row,
      DecodeFp16,
      DecodeBf16Row,
      BlockAmax,
      {nullptr, nullptr, Quantize8<Fp8Codes, true>, Quantize8<Int8Codes, false>,
       Quantize4<Fp4Codes, KvFormat::kFp4E2M1>, Quantize4<Int4Codes, KvFormat::kInt4>},
      {nullptr, nullptr, Dequantize8<Fp8Values, false>, Dequantize8<Int8Values, true>,
       Dequantize4<Fp4Values, KvFormat::kFp4E2M1>, Dequantize4<Int4Values, KvFormat::kInt4>},
  };
  return kernels;
}

}  // namespace

const KvKernels* Avx2KvKernels() {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("f16c")) {
    return nullptr;
  }
  return &Table();
}

}  // namespace kv_internal
}  // namespace kvcast
