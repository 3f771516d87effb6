// The portable reference of the Q4 kernels (q4_kernels.h).
#include <cmath>
#include <cstring>

#include "common/dtype.h"
#include "kernels/internal/q4_kernels.h"

namespace kvcast {
namespace q4_internal {
namespace {

template <Q4Scales S>
float Scale(const uint8_t* p) {
  if (S == Q4Scales::kF32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return HalfToFloat(h);
}

template <Q4Scales S>
void DotScalar(const q8_internal::Q8Rows& x, int rows, const uint8_t* w, int64_t panels,
               int64_t cols, float* out, int64_t out_stride) {
  const int64_t blocks = x.blocks;
  const int width = S == Q4Scales::kF16 ? 2 : 4;
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
          dot += int32_t(xb[e]) * int32_t(HighNibble(e) ? byte >> 4 : byte & 15);
        }
        const float s = x.s[r * blocks + b];
        const float sum = float(x.c[r * blocks + b] / 128);
        acc = std::fma(Scale<S>(wb + kScaleOffset + width * i) * s, float(dot), acc);
        acc = std::fma(Scale<S>(wb + MinOffset(S) + width * i), s * sum, acc);
      }
      out[r * out_stride + j] = acc;
    }
  }
  (void)panels;
}

}  // namespace

const Q4Kernels& ScalarQ4Kernels() {
  static const Q4Kernels kernels{"scalar", {&DotScalar<Q4Scales::kF16>, &DotScalar<Q4Scales::kF32>}};
  return kernels;
}

}  // namespace q4_internal
}  // namespace kvcast
