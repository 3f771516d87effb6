// The portable reference of the Q4 kernels (q4_kernels.h).
#include <cmath>
#include <cstring>

#include "common/dtype.h"
#include "kernels/internal/q4_kernels.h"

namespace kvcast {
namespace q4_internal {
namespace {

template <PanelFormat S>
float Scale(const uint8_t* p) {
  if (ScaleBytes(S) == 4) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return HalfToFloat(h);
}

template <PanelFormat S>
void DotScalar(const q8_internal::Q8Rows& x, int rows, const uint8_t* w, int64_t panels,
               int64_t cols, float* out, int64_t out_stride) {
  const int64_t blocks = x.blocks;
  for (int64_t j = 0; j < cols; ++j) {
    const int64_t p = j / kPanelRows, i = j % kPanelRows;
    for (int r = 0; r < rows; ++r) {
      float acc = 0.0f;
      for (int64_t b = 0; b < blocks; ++b) {
        const int8_t* xb = x.q + (r * blocks + b) * 32;
        const uint8_t* wb = w + (p * blocks + b) * PanelBlockBytes(S);
        int32_t dot = 0;
        for (int e = 0; e < 32; ++e) {
          const uint8_t byte = wb[NibbleByte(int(i), e)];
          int v = HighNibble(e) ? byte >> 4 : byte & 15;
          if (FifthBit(S)) {
            v |= ((wb[kFifthBitOffset + FifthBitByte(int(i), e)] >> FifthBitShift(e)) & 1) << 4;
          }
          dot += int32_t(xb[e]) * v;
        }
        const float s = x.s[r * blocks + b];
        const float sum = float(x.c[r * blocks + b] / 128);
        acc = std::fma(Scale<S>(wb + ScaleOffset(S) + ScaleBytes(S) * i) * s, float(dot), acc);
        acc = std::fma(Scale<S>(wb + MinOffset(S) + ScaleBytes(S) * i), s * sum, acc);
      }
      out[r * out_stride + j] = acc;
    }
  }
  (void)panels;
}

}  // namespace

const Q4Kernels& ScalarQ4Kernels() {
  static const Q4Kernels kernels{"scalar",
                                 {&DotScalar<PanelFormat::kQ4F16>, &DotScalar<PanelFormat::kQ4F32>,
                                  &DotScalar<PanelFormat::kQ5F32>}};
  return kernels;
}

}  // namespace q4_internal
}  // namespace kvcast
