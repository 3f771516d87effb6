#include "kernels/cpu/swiglu.h"

#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "kernels/cpu_features.h"
#include "kernels/cpu/simd_exp.h"

namespace kvcast {
namespace {

inline float SiluScalar(float g) {
  const float e = std::exp(-std::fabs(g));
  return g * (g >= 0 ? 1.0f / (1.0f + e) : e / (1.0f + e));
}

void RowScalar(const float* g, const float* u, int dim, float* o, int from) {
  for (int i = from; i < dim; ++i) o[i] = SiluScalar(g[i]) * u[i];
}

__attribute__((target("avx512f"))) void RowAvx512(const float* g, const float* u, int dim,
                                                  float* o) {
  int i = 0;
  for (; i + 16 <= dim; i += 16) {
    const __m512 x = _mm512_loadu_ps(g + i);
    const __m512 e = cpu_simd::Exp16(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(x)));
    const __m512 one = _mm512_set1_ps(1.0f);
    const __m512 inv = _mm512_div_ps(one, _mm512_add_ps(one, e));
    const __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
    const __m512 sig = _mm512_mask_mul_ps(inv, neg, inv, e);
    _mm512_storeu_ps(o + i, _mm512_mul_ps(_mm512_mul_ps(x, sig), _mm512_loadu_ps(u + i)));
  }
  RowScalar(g, u, dim, o, i);
}

__attribute__((target("avx2,fma"))) void RowAvx2(const float* g, const float* u, int dim,
                                                 float* o) {
  int i = 0;
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (; i + 8 <= dim; i += 8) {
    const __m256 x = _mm256_loadu_ps(g + i);
    const __m256 e = cpu_simd::Exp8(_mm256_or_ps(x, sign));  // -|x|
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 inv = _mm256_div_ps(one, _mm256_add_ps(one, e));
    const __m256 neg = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ);
    const __m256 sig = _mm256_blendv_ps(inv, _mm256_mul_ps(inv, e), neg);
    _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_mul_ps(x, sig), _mm256_loadu_ps(u + i)));
  }
  RowScalar(g, u, dim, o, i);
}

}  // namespace

void CpuSwiGluScalar(const float* gate_up, int rows, int dim, float* out) {
  for (int r = 0; r < rows; ++r) {
    const float* g = gate_up + int64_t(r) * 2 * dim;
    RowScalar(g, g + dim, dim, out + int64_t(r) * dim, 0);
  }
}

void CpuSwiGlu(const float* gate_up, int rows, int dim, float* out, bool parallel) {
  const bool avx512 = CpuHas(CpuIsa::kAvx512), avx2 = CpuHas(CpuIsa::kAvx2);
#pragma omp parallel for schedule(static) if (parallel && int64_t(rows) * dim >= (1 << 16))
  for (int r = 0; r < rows; ++r) {
    const float* g = gate_up + int64_t(r) * 2 * dim;
    float* o = out + int64_t(r) * dim;
    if (avx512) {
      RowAvx512(g, g + dim, dim, o);
    } else if (avx2) {
      RowAvx2(g, g + dim, dim, o);
    } else {
      RowScalar(g, g + dim, dim, o, 0);
    }
  }
}

}  // namespace kvcast
