// The head rotation: see hadamard.h.
#include "kernels/hadamard.h"

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

}  // namespace

bool HadamardDim(int d) { return d >= 2 && d <= 1024 && (d & (d - 1)) == 0; }

float HadamardSign(int c) { return SignOf(c); }

void RotateHead(float* x, int d) {
  const float* s = Signs();
  for (int c = 0; c < d; ++c) x[c] *= s[c];
  Butterflies(x, d);
}

void UnrotateHead(float* y, int d) {
  Butterflies(y, d);
  const float* s = Signs();
  const float inv = 1.f / float(d);  // a power of two: exact
  for (int c = 0; c < d; ++c) y[c] = y[c] * s[c] * inv;
}

void RotateHeads(float* x, int values, int d, bool inverse) {
  for (float* head = x; head < x + values; head += d) {
    inverse ? UnrotateHead(head, d) : RotateHead(head, d);
  }
}

}  // namespace kvcast
