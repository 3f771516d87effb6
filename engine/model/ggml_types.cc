#include "engine/model/ggml_types.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"

namespace kvcast {
namespace {

constexpr GgmlTypeInfo kReadable[] = {
    {GgmlType::kF32, "F32", 1, 4},       {GgmlType::kF16, "F16", 1, 2},
    {GgmlType::kBF16, "BF16", 1, 2},     {GgmlType::kQ8_0, "Q8_0", 32, 34},
    {GgmlType::kQ4_0, "Q4_0", 32, 18},   {GgmlType::kQ4_1, "Q4_1", 32, 20},
    {GgmlType::kQ5_0, "Q5_0", 32, 22},   {GgmlType::kQ5_1, "Q5_1", 32, 24},
    {GgmlType::kQ4_K, "Q4_K", 256, 144}, {GgmlType::kQ5_K, "Q5_K", 256, 176},
    {GgmlType::kQ6_K, "Q6_K", 256, 210},
};

// Every id ggml has defined, readable or not, for error messages.
constexpr const char* kAllNames[] = {
    "F32",    "F16",     "Q4_0",    "Q4_1",  "Q4_2",   "Q4_3",  "Q5_0",  "Q5_1",
    "Q8_0",   "Q8_1",    "Q2_K",    "Q3_K",  "Q4_K",   "Q5_K",  "Q6_K",  "Q8_K",
    "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS",
    "I8",     "I16",     "I32",     "I64",   "F64",    "IQ1_M", "BF16",  "Q4_0_4_4",
    "Q4_0_4_8", "Q4_0_8_8", "TQ1_0", "TQ2_0", "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8",
    "MXFP4",
};

float Half(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return HalfToFloat(bits);
}

// Q4_0 / Q4_1 / Q5_0 / Q5_1: 32 values; `has_min` adds m, `high` bits come
// from qh (Q5), `offset` is subtracted from the integer (8 or 16, or 0 with a
// min). Blocks: d [m] [qh] qs.
template <bool kHasMin, bool kFiveBit>
void DequantizeSmallBlocks(const uint8_t* src, int64_t blocks, float* out) {
  constexpr int kBytes = 2 + (kHasMin ? 2 : 0) + (kFiveBit ? 4 : 0) + 16;
  constexpr int kOffset = kHasMin ? 0 : (kFiveBit ? 16 : 8);
  for (int64_t b = 0; b < blocks; ++b, src += kBytes, out += 32) {
    const float d = Half(src);
    const float m = kHasMin ? Half(src + 2) : 0.0f;
    uint32_t qh = 0;
    const uint8_t* qs = src + 2 + (kHasMin ? 2 : 0);
    if (kFiveBit) {
      std::memcpy(&qh, qs, 4);
      qs += 4;
    }
    for (int j = 0; j < 16; ++j) {
      int lo = qs[j] & 0x0F, hi = qs[j] >> 4;
      if (kFiveBit) {
        lo |= int((qh >> j) & 1) << 4;
        hi |= int((qh >> (j + 16)) & 1) << 4;
      }
      if (kHasMin) {
        out[j] = d * float(lo) + m;
        out[j + 16] = d * float(hi) + m;
      } else {
        out[j] = d * float(lo - kOffset);
        out[j + 16] = d * float(hi - kOffset);
      }
    }
  }
}

void DequantizeQ8_0(const uint8_t* src, int64_t blocks, float* out) {
  for (int64_t b = 0; b < blocks; ++b, src += 34, out += 32) {
    const float d = Half(src);
    for (int j = 0; j < 32; ++j) out[j] = d * float(int8_t(src[2 + j]));
  }
}

// Scale and min of sub-block j (0..7) from the 12 packed bytes of a
// Q4_K/Q5_K block: 6 bits each; sub-blocks 4..7 keep their top two bits in
// the spare bits of bytes 0..7.
void ScaleMinK4(int j, const uint8_t* q, int* scale, int* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
    *min = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Q4_K (kFiveBit false) and Q5_K: d, dmin, scales[12], [qh[32]], qs[128].
template <bool kFiveBit>
void DequantizeK4(const uint8_t* src, int64_t blocks, float* out) {
  constexpr int kBytes = kFiveBit ? 176 : 144;
  for (int64_t b = 0; b < blocks; ++b, src += kBytes) {
    const float d = Half(src), dmin = Half(src + 2);
    const uint8_t* scales = src + 4;
    const uint8_t* qh = src + 16;
    const uint8_t* qs = src + 16 + (kFiveBit ? 32 : 0);
    for (int chunk = 0; chunk < 4; ++chunk, qs += 32) {
      int s0, m0, s1, m1;
      ScaleMinK4(2 * chunk, scales, &s0, &m0);
      ScaleMinK4(2 * chunk + 1, scales, &s1, &m1);
      const float d0 = d * float(s0), min0 = dmin * float(m0);
      const float d1 = d * float(s1), min1 = dmin * float(m1);
      for (int l = 0; l < 32; ++l) {
        int lo = qs[l] & 0x0F, hi = qs[l] >> 4;
        if (kFiveBit) {
          lo += ((qh[l] >> (2 * chunk)) & 1) << 4;
          hi += ((qh[l] >> (2 * chunk + 1)) & 1) << 4;
        }
        out[l] = d0 * float(lo) - min0;
        out[l + 32] = d1 * float(hi) - min1;
      }
      out += 64;
    }
  }
}

void DequantizeQ6_K(const uint8_t* src, int64_t blocks, float* out) {
  for (int64_t b = 0; b < blocks; ++b, src += 210) {
    const uint8_t* ql = src;
    const uint8_t* qh = src + 128;
    const auto* sc = reinterpret_cast<const int8_t*>(src + 192);
    const float d = Half(src + 208);
    for (int half = 0; half < 2; ++half, ql += 64, qh += 32, sc += 8, out += 128) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        out[l] = (d * float(sc[is])) * float(q1);
        out[l + 32] = (d * float(sc[is + 2])) * float(q2);
        out[l + 64] = (d * float(sc[is + 4])) * float(q3);
        out[l + 96] = (d * float(sc[is + 6])) * float(q4);
      }
    }
  }
}

}  // namespace

std::optional<GgmlTypeInfo> GgmlTypeInfoOf(uint32_t id) {
  for (const GgmlTypeInfo& info : kReadable) {
    if (uint32_t(info.type) == id) return info;
  }
  return std::nullopt;
}

std::string GgmlTypeName(uint32_t id) {
  if (id < sizeof(kAllNames) / sizeof(kAllNames[0])) return kAllNames[id];
  return absl::StrCat("type ", id);
}

void DequantizeGgml(GgmlType type, const void* src_void, int64_t count, float* out) {
  const auto* src = static_cast<const uint8_t*>(src_void);
  switch (type) {
    case GgmlType::kF32:
      std::memcpy(out, src, size_t(count) * 4);
      return;
    case GgmlType::kF16:
    case GgmlType::kBF16:
      for (int64_t i = 0; i < count; ++i) {
        uint16_t bits;
        std::memcpy(&bits, src + 2 * i, 2);
        out[i] = type == GgmlType::kF16 ? HalfToFloat(bits) : BFloat16ToFloat(bits);
      }
      return;
    case GgmlType::kQ8_0: return DequantizeQ8_0(src, count / 32, out);
    case GgmlType::kQ4_0: return DequantizeSmallBlocks<false, false>(src, count / 32, out);
    case GgmlType::kQ4_1: return DequantizeSmallBlocks<true, false>(src, count / 32, out);
    case GgmlType::kQ5_0: return DequantizeSmallBlocks<false, true>(src, count / 32, out);
    case GgmlType::kQ5_1: return DequantizeSmallBlocks<true, true>(src, count / 32, out);
    case GgmlType::kQ4_K: return DequantizeK4<false>(src, count / 256, out);
    case GgmlType::kQ5_K: return DequantizeK4<true>(src, count / 256, out);
    case GgmlType::kQ6_K: return DequantizeQ6_K(src, count / 256, out);
  }
}

}  // namespace kvcast
