// The randomized Hadamard rotation: see rotation.h.
#include "tools/kvquality/rotation.h"

#include <cmath>
#include <cstdint>

namespace kvcast::kvquality {
namespace {

// The fixed sign of channel i (splitmix64 of i: the same on every machine).
float Sign(int i) {
  uint64_t z = uint64_t(i) + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return ((z ^ (z >> 31)) & 1) ? -1.f : 1.f;
}

// In-place fast Walsh-Hadamard transform of x[0, d), scaled by 1/sqrt(d)
// (so it is its own inverse).
void Hadamard(float* x, int d) {
  for (int h = 1; h < d; h *= 2) {
    for (int i = 0; i < d; i += 2 * h) {
      for (int j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
    }
  }
  const float scale = 1.f / std::sqrt(float(d));
  for (int i = 0; i < d; ++i) x[i] *= scale;
}

}  // namespace

bool RotatableHeadDim(int head_dim) { return head_dim >= 2 && (head_dim & (head_dim - 1)) == 0; }

void RotateHeads(float* x, int values, int head_dim, bool inverse) {
  // Forward: H (D x); inverse: D (H x), as H and D are their own inverses.
  for (float* head = x; head < x + values; head += head_dim) {
    if (!inverse) {
      for (int i = 0; i < head_dim; ++i) head[i] *= Sign(i);
    }
    Hadamard(head, head_dim);
    if (inverse) {
      for (int i = 0; i < head_dim; ++i) head[i] *= Sign(i);
    }
  }
}

}  // namespace kvcast::kvquality
