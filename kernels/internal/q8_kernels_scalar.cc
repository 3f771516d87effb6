// The portable reference of the Q8 kernels (q8_kernels.h).
#include <cmath>

#include "kernels/internal/q8_kernels.h"

namespace kvcast {
namespace q8_internal {

float QuantizeBlock(const float* x, int8_t* q) {
  float amax = 0.0f;
  for (int i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  const float scale = amax / 127.0f;
  const float inv = scale != 0.0f ? 1.0f / scale : 0.0f;
  for (int i = 0; i < 32; ++i) {
    const float v = std::nearbyint(x[i] * inv);
    q[i] = int8_t(std::fmin(127.0f, std::fmax(-127.0f, v)));
  }
  return scale;
}

void QuantizeBlocksScalar(const float* x, int64_t blocks, int8_t* q, float* s, int32_t* c) {
  for (int64_t b = 0; b < blocks; ++b) {
    s[b] = QuantizeBlock(x + b * 32, q + b * 32);
    int32_t sum = 0;
    for (int e = 0; e < 32; ++e) sum += q[b * 32 + e];
    c[b] = 128 * sum;
  }
}

namespace {

void DotScalar(const Q8Rows& x, int rows, const uint8_t* w, const float* ws, int64_t panels,
               int64_t cols, float* out, int64_t out_stride) {
  const int64_t blocks = x.blocks;
  for (int64_t j = 0; j < cols; ++j) {
    const int64_t p = j / kPanelRows, i = j % kPanelRows;
    for (int r = 0; r < rows; ++r) {
      float acc = 0.0f;
      for (int64_t b = 0; b < blocks; ++b) {
        const int8_t* xb = x.q + (r * blocks + b) * 32;
        const uint8_t* wb = w + (p * blocks + b) * kPanelBlockBytes;
        int32_t sum = 0;
        for (int e = 0; e < 32; ++e) {
          sum += int32_t(xb[e]) * (int32_t(wb[PanelByte(int(i), e)]) - 128);
        }
        const float s = x.s[r * blocks + b] * ws[(p * blocks + b) * kPanelRows + i];
        acc = std::fma(s, float(sum), acc);
      }
      out[r * out_stride + j] = acc;
    }
  }
  (void)panels;
}

}  // namespace

const Q8Kernels& ScalarQ8Kernels() {
  static const Q8Kernels kernels{"scalar", &DotScalar, &QuantizeBlocksScalar, 1};
  return kernels;
}

}  // namespace q8_internal
}  // namespace kvcast
