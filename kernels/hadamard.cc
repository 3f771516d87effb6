// The head rotation: see hadamard.h.
#include "kernels/hadamard.h"

#include <immintrin.h>

#include <cstdint>

namespace kvcast {
namespace {

float SignOf(int c) {
  uint64_t z = uint64_t(c) + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return ((z ^ (z >> 31)) & 1) ? -1.f : 1.f;
}

// H y in place, the butterflies in hadamard.h's order.
void Butterflies(float* y, int d) {
  for (int h = 1; h < d; h *= 2) {
    for (int i = 0; i < d; i += 2 * h) {
      for (int j = i; j < i + h; ++j) {
        const float a = y[j], b = y[j + h];
        y[j] = a + b;
        y[j + h] = a - b;
      }
    }
  }
}

// s_c for c < 1024, computed once.
struct SignTable {
  float s[1024];
  SignTable() {
    for (int c = 0; c < 1024; ++c) s[c] = SignOf(c);
  }
};
const float* Signs() {
  static const SignTable table;
  return table.s;
}

// The same butterflies 8 values a register (AVX2; d >= 8): the stages h =
// 1, 2, 4 inside each register (the partner lanes swapped in by a permute;
// the lower lane of each pair takes a + b, the upper b - a, the same sums),
// then h = 8, 16, ... between registers. Every output is the scalar
// code's sum of the same two values: the same floats.
#define KVCAST_AVX2 __attribute__((target("avx2")))

KVCAST_AVX2 inline __m256 Stage(__m256 x, __m256 partner, int upper_lanes) {
  const __m256 sum = _mm256_add_ps(x, partner), diff = _mm256_sub_ps(partner, x);
  switch (upper_lanes) {
    case 0xaa: return _mm256_blend_ps(sum, diff, 0xaa);
    case 0xcc: return _mm256_blend_ps(sum, diff, 0xcc);
    default: return _mm256_blend_ps(sum, diff, 0xf0);
  }
}

KVCAST_AVX2 void ButterfliesAvx2(float* y, int d) {
  for (int i = 0; i < d; i += 8) {
    __m256 x = _mm256_loadu_ps(y + i);
    x = Stage(x, _mm256_permute_ps(x, 0xb1), 0xaa);             // h = 1
    x = Stage(x, _mm256_permute_ps(x, 0x4e), 0xcc);             // h = 2
    x = Stage(x, _mm256_permute2f128_ps(x, x, 0x01), 0xf0);     // h = 4
    _mm256_storeu_ps(y + i, x);
  }
  for (int h = 8; h < d; h *= 2) {
    for (int i = 0; i < d; i += 2 * h) {
      for (int j = i; j < i + h; j += 8) {
        const __m256 a = _mm256_loadu_ps(y + j), b = _mm256_loadu_ps(y + j + h);
        _mm256_storeu_ps(y + j, _mm256_add_ps(a, b));
        _mm256_storeu_ps(y + j + h, _mm256_sub_ps(a, b));
      }
    }
  }
}

KVCAST_AVX2 void ScaleAvx2(float* y, const float* s, float k, int d) {
  const __m256 kk = _mm256_set1_ps(k);
  for (int c = 0; c < d; c += 8) {
    _mm256_storeu_ps(y + c, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(y + c),
                                                        _mm256_loadu_ps(s + c)), kk));
  }
}

bool UseAvx2(int d) {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  return avx2 && d >= 8;
}

}  // namespace

bool HadamardDim(int d) { return d >= 2 && d <= 1024 && (d & (d - 1)) == 0; }

float HadamardSign(int c) { return SignOf(c); }

void RotateHead(float* x, int d) {
  const float* s = Signs();
  if (UseAvx2(d)) {
    ScaleAvx2(x, s, 1.f, d);  // x * s * 1: the signs alone
    ButterfliesAvx2(x, d);
    return;
  }
  for (int c = 0; c < d; ++c) x[c] *= s[c];
  Butterflies(x, d);
}

void UnrotateHead(float* y, int d) {
  const float* s = Signs();
  const float inv = 1.f / float(d);  // a power of two: exact
  if (UseAvx2(d)) {
    ButterfliesAvx2(y, d);
    ScaleAvx2(y, s, inv, d);
    return;
  }
  Butterflies(y, d);
  for (int c = 0; c < d; ++c) y[c] = y[c] * s[c] * inv;
}

void RotateHeads(float* x, int values, int d, bool inverse) {
  for (float* head = x; head < x + values; head += d) {
    inverse ? UnrotateHead(head, d) : RotateHead(head, d);
  }
}

}  // namespace kvcast
