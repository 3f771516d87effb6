#include "kernels/bf16_matmul.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu_features.h"

namespace kvcast {
namespace bf16_internal {
namespace {

inline float Widen(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float Reduce16(const float* lane) {
  float s[8];
  for (int i = 0; i < 8; ++i) s[i] = lane[i] + lane[i + 8];
  return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
}

void DotScalar(const float* x, int rows, const uint16_t* w, int64_t n, int64_t k, float* out,
               int64_t out_stride) {
  for (int64_t j = 0; j < n; ++j) {
    for (int r = 0; r < rows; ++r) {
      float lane[16] = {};
      for (int64_t e = 0; e < k; ++e) {
        lane[e % 16] = std::fma(x[r * k + e], Widen(w[j * k + e]), lane[e % 16]);
      }
      out[r * out_stride + j] = Reduce16(lane);
    }
  }
}

#define KVCAST_AVX2 __attribute__((target("avx2,fma")))
#define KVCAST_AVX512 __attribute__((target("avx512f,avx2,fma")))

KVCAST_AVX2 inline __m256 WidenAvx2(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

template <int R>
KVCAST_AVX2 void DotAvx2Rows(const float* x, const uint16_t* w, int64_t n, int64_t k, float* out,
                             int64_t out_stride) {
  for (int64_t j = 0; j < n; ++j) {
    __m256 lo[R], hi[R];
    for (int r = 0; r < R; ++r) lo[r] = hi[r] = _mm256_setzero_ps();
    const uint16_t* wr = w + j * k;
    for (int64_t e = 0; e < k; e += 16) {
      const __m256 w0 = WidenAvx2(wr + e), w1 = WidenAvx2(wr + e + 8);
      for (int r = 0; r < R; ++r) {
        lo[r] = _mm256_fmadd_ps(_mm256_loadu_ps(x + r * k + e), w0, lo[r]);
        hi[r] = _mm256_fmadd_ps(_mm256_loadu_ps(x + r * k + e + 8), w1, hi[r]);
      }
    }
    for (int r = 0; r < R; ++r) {
      alignas(32) float lane[16];
      _mm256_store_ps(lane, lo[r]);
      _mm256_store_ps(lane + 8, hi[r]);
      out[r * out_stride + j] = Reduce16(lane);
    }
  }
}

template <int R>
KVCAST_AVX512 void DotAvx512Rows(const float* x, const uint16_t* w, int64_t n, int64_t k,
                                 float* out, int64_t out_stride) {
  for (int64_t j = 0; j < n; ++j) {
    __m512 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
    const uint16_t* wr = w + j * k;
    for (int64_t e = 0; e < k; e += 16) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr + e));
      const __m512 wv = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
      for (int r = 0; r < R; ++r) acc[r] = _mm512_fmadd_ps(_mm512_loadu_ps(x + r * k + e), wv, acc[r]);
    }
    for (int r = 0; r < R; ++r) {
      alignas(64) float lane[16];
      _mm512_store_ps(lane, acc[r]);
      out[r * out_stride + j] = Reduce16(lane);
    }
  }
}

#define KVCAST_ROWS_SWITCH(FN)                                                  \
  switch (rows) {                                                               \
    case 1: return FN<1>(x, w, n, k, out, out_stride);                          \
    case 2: return FN<2>(x, w, n, k, out, out_stride);                          \
    case 3: return FN<3>(x, w, n, k, out, out_stride);                          \
    default: return FN<4>(x, w, n, k, out, out_stride);                         \
  }

KVCAST_AVX2 void DotAvx2(const float* x, int rows, const uint16_t* w, int64_t n, int64_t k,
                         float* out, int64_t out_stride) {
  KVCAST_ROWS_SWITCH(DotAvx2Rows)
}

KVCAST_AVX512 void DotAvx512(const float* x, int rows, const uint16_t* w, int64_t n, int64_t k,
                             float* out, int64_t out_stride) {
  KVCAST_ROWS_SWITCH(DotAvx512Rows)
}

}  // namespace

int AvailableBf16Kernels(const Bf16Kernel** out, int max) {
  static const Bf16Kernel kScalar{"scalar", &DotScalar}, kAvx2{"avx2", &DotAvx2},
      kAvx512{"avx512", &DotAvx512};
  const bool avx2 = CpuHas(CpuIsa::kAvx2);
  const bool avx512 = CpuHas(CpuIsa::kAvx512);
  int count = 0;
  for (const Bf16Kernel* k : {&kScalar, avx2 ? &kAvx2 : nullptr, avx512 ? &kAvx512 : nullptr}) {
    if (k != nullptr && count < max) out[count++] = k;
  }
  return count;
}

}  // namespace bf16_internal

namespace {

const bf16_internal::Bf16Kernel& Active() {
  static const bf16_internal::Bf16Kernel* active = [] {
    const bf16_internal::Bf16Kernel* all[3];
    const int n = bf16_internal::AvailableBf16Kernels(all, 3);
    return all[n - 1];
  }();
  return *active;
}

}  // namespace

void Bf16Linear(const float* x, int m, int64_t k, const uint16_t* w, int64_t n, float* y) {
  const bf16_internal::DotFn dot = Active().dot;
  constexpr int64_t kTile = 32;
  const int64_t tiles = (n + kTile - 1) / kTile;
#pragma omp parallel for schedule(static) if (int64_t(m) * n * k > (1 << 16))
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t j0 = t * kTile, nj = std::min(kTile, n - j0);
    for (int r = 0; r < m; r += 4) {
      dot(x + int64_t(r) * k, std::min(4, m - r), w + j0 * k, nj, k, y + int64_t(r) * n + j0, n);
    }
  }
}

std::string_view Bf16KernelName() { return Active().name; }

}  // namespace kvcast
