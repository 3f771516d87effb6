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

// Value e (< 32) of panel row i, 0..15, 0..31 or 0..63.
template <PanelFormat S>
int Value(const uint8_t* wb, int i, int e) {
  const uint8_t byte = wb[NibbleByte(i, e)];
  int v = HighNibble(e) ? byte >> 4 : byte & 15;
  if (FifthBit(S)) v |= ((wb[kFifthBitOffset + FifthBitByte(i, e)] >> FifthBitShift(e)) & 1) << 4;
  if (TopTwoBits(S)) v |= ((wb[kTopBitsOffset + TopBitsByte(i, e)] >> TopBitsShift(e)) & 3) << 4;
  return v;
}

// The widened block's value (q4_kernels.h).
int WideValue(const uint8_t* wb, int i, int e) { return wb[(e / 4) * 64 + 4 * i + e % 4]; }

template <PanelFormat S, bool W = false>
void DotScalar(const q8_internal::Q8Rows& x, int rows, const uint8_t* w, int64_t panels,
               int64_t cols, float* out, int64_t out_stride) {
  const int64_t blocks = x.blocks;
  for (int64_t j = 0; j < cols; ++j) {
    const int64_t p = j / kPanelRows, i = j % kPanelRows;
    for (int r = 0; r < rows; ++r) {
      float acc = 0.0f;
      for (int64_t b = 0; b < blocks; ++b) {
        const int8_t* xb = x.q + (r * blocks + b) * 32;
        const uint8_t* wb = w + (p * blocks + b) * BlockBytes(S, W);
        const uint8_t* scales = wb + ScalesAt(S, W);
        int32_t dot[2] = {0, 0};  // values 0-15, 16-31
        for (int e = 0; e < 32; ++e) {
          dot[e / 16] += int32_t(xb[e]) * (W ? WideValue(wb, int(i), e) : Value<S>(wb, int(i), e));
        }
        const float s = x.s[r * blocks + b];
        if (TopTwoBits(S)) {
          const float d = Scale<S>(scales + 2 * i);
          const int32_t first = x.h[r * blocks + b];
          const int32_t sums[2] = {first, x.c[r * blocks + b] / 128 - first};
          for (int h = 0; h < 2; ++h) {
            const int8_t sc = int8_t(scales[HalfScaleByte(h, int(i)) - ScaleOffset(S)]);
            acc = std::fma(d * float(sc) * s, float(dot[h] - 32 * sums[h]), acc);
          }
          continue;
        }
        const float sum = float(x.c[r * blocks + b] / 128);
        acc = std::fma(Scale<S>(scales + ScaleBytes(S) * i) * s, float(dot[0] + dot[1]), acc);
        acc = std::fma(Scale<S>(scales + 16 * ScaleBytes(S) + ScaleBytes(S) * i), s * sum, acc);
      }
      out[r * out_stride + j] = acc;
    }
  }
  (void)panels;
}

template <PanelFormat S>
void WidenScalar(const uint8_t* w, int64_t panels, int64_t blocks, uint8_t* out) {
  for (int64_t b = 0; b < panels * blocks; ++b) {
    const uint8_t* wb = w + b * PanelBlockBytes(S);
    uint8_t* ob = out + b * WideBlockBytes(S);
    for (int i = 0; i < kPanelRows; ++i) {
      for (int e = 0; e < 32; ++e) ob[(e / 4) * 64 + 4 * i + e % 4] = uint8_t(Value<S>(wb, i, e));
    }
    std::memcpy(ob + kWideValueBytes, wb + ScaleOffset(S), PanelBlockBytes(S) - ScaleOffset(S));
  }
}

}  // namespace

const Q4Kernels& ScalarQ4Kernels() {
  using F = PanelFormat;
  static const Q4Kernels kernels{
      "scalar",
      {&DotScalar<F::kQ4F16>, &DotScalar<F::kQ4F32>, &DotScalar<F::kQ5F32>, &DotScalar<F::kQ5F16>,
       &DotScalar<F::kQ6>},
      {&DotScalar<F::kQ4F16, true>, &DotScalar<F::kQ4F32, true>, &DotScalar<F::kQ5F32, true>,
       &DotScalar<F::kQ5F16, true>, &DotScalar<F::kQ6, true>},
      {&WidenScalar<F::kQ4F16>, &WidenScalar<F::kQ4F32>, &WidenScalar<F::kQ5F32>,
       &WidenScalar<F::kQ5F16>, &WidenScalar<F::kQ6>}};
  return kernels;
}

}  // namespace q4_internal
}  // namespace kvcast
