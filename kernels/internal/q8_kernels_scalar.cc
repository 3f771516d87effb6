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

namespace {

void DotScalar(const int8_t* xq, const float* xs, int rows, const int8_t* wq, const float* ws,
               int64_t n, int64_t blocks, float* out, int64_t out_stride) {
  for (int64_t j = 0; j < n; ++j) {
    for (int r = 0; r < rows; ++r) {
      float acc[2][8] = {};  // Even blocks, odd blocks.
      for (int64_t b = 0; b < blocks; ++b) {
        const int8_t* x = xq + (r * blocks + b) * 32;
        const int8_t* w = wq + (j * blocks + b) * 32;
        const float s = xs[r * blocks + b] * ws[j * blocks + b];
        for (int lane = 0; lane < 8; ++lane) {
          int32_t sum = 0;
          for (int e = 4 * lane; e < 4 * lane + 4; ++e) sum += int32_t(x[e]) * int32_t(w[e]);
          acc[b % 2][lane] = std::fma(s, float(sum), acc[b % 2][lane]);
        }
      }
      float lanes[8];
      for (int lane = 0; lane < 8; ++lane) lanes[lane] = acc[0][lane] + acc[1][lane];
      out[r * out_stride + j] = SumLanes(lanes);
    }
  }
}

}  // namespace

const Q8Kernels& ScalarQ8Kernels() {
  static const Q8Kernels kernels{"scalar", &DotScalar};
  return kernels;
}

}  // namespace q8_internal
}  // namespace kvcast
