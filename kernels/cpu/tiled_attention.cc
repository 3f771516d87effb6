#include "kernels/cpu/tiled_attention.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/simd_exp.h"
#include "kernels/cpu_features.h"

namespace kvcast::cpu_attention {

bool HasAvx2() {
  return CpuHas(CpuIsa::kAvx2);
}

namespace {

std::atomic<bool> avx2_only{false};

bool HasAvx512() {
  return CpuHas(CpuIsa::kAvx512) && !avx2_only.load(std::memory_order_relaxed);
}

}  // namespace

void TiledAvx2OnlyForTesting(bool on) { avx2_only.store(on); }

#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma,f16c")
// GCC 12's avx512fintrin.h trips this on its own _mm512_undefined_ps().
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
namespace avx512 {
namespace {
struct V {
  using R = __m512;
  static constexpr int N = 16;
  static R Zero() { return _mm512_setzero_ps(); }
  static R Set1(float x) { return _mm512_set1_ps(x); }
  static R Load(const float* p) { return _mm512_loadu_ps(p); }
  static void Store(float* p, R v) { _mm512_storeu_ps(p, v); }
  static R Fmadd(R a, R b, R c) { return _mm512_fmadd_ps(a, b, c); }
  static R Add(R a, R b) { return _mm512_add_ps(a, b); }
  static R Sub(R a, R b) { return _mm512_sub_ps(a, b); }
  static R Mul(R a, R b) { return _mm512_mul_ps(a, b); }
  static R Max(R a, R b) { return _mm512_max_ps(a, b); }
  static R Exp(R x) { return cpu_simd::Exp16(x); }
  static R MaskAfter(R s, R pos, float t) {
    return _mm512_mask_mov_ps(s, _mm512_cmp_ps_mask(pos, _mm512_set1_ps(t), _CMP_LT_OQ),
                              _mm512_set1_ps(-INFINITY));
  }
  static void Widen(const float* src, float* dst, int n) { std::memcpy(dst, src, n * 4); }
  static void Widen(const uint16_t* src, float* dst, int n) {
    int i = 0;
    for (; i + 16 <= n; i += 16) {
      _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(
                                    reinterpret_cast<const __m256i*>(src + i))));
    }
    for (; i < n; i += 8) {
      _mm256_storeu_ps(dst + i,
                       _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
    }
  }
};
#include "kernels/cpu/tiled_attention_impl.inc"
}  // namespace
template <typename T>
void Run(const float* q, int q_stride, const AttentionSeq& seq, int g, int b, int e,
         const AttentionShape& s, const T* k, const T* v, float* out) {
  Tile(q, q_stride, seq, g, b, e, s, k, v, out);
}
}  // namespace avx512
#pragma GCC diagnostic pop
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace avx2 {
namespace {
struct V {
  using R = __m256;
  static constexpr int N = 8;
  static R Zero() { return _mm256_setzero_ps(); }
  static R Set1(float x) { return _mm256_set1_ps(x); }
  static R Load(const float* p) { return _mm256_loadu_ps(p); }
  static void Store(float* p, R v) { _mm256_storeu_ps(p, v); }
  static R Fmadd(R a, R b, R c) { return _mm256_fmadd_ps(a, b, c); }
  static R Add(R a, R b) { return _mm256_add_ps(a, b); }
  static R Sub(R a, R b) { return _mm256_sub_ps(a, b); }
  static R Mul(R a, R b) { return _mm256_mul_ps(a, b); }
  static R Max(R a, R b) { return _mm256_max_ps(a, b); }
  static R Exp(R x) { return cpu_simd::Exp8(x); }
  static R MaskAfter(R s, R pos, float t) {
    return _mm256_blendv_ps(s, _mm256_set1_ps(-INFINITY),
                            _mm256_cmp_ps(pos, _mm256_set1_ps(t), _CMP_LT_OQ));
  }
  static void Widen(const float* src, float* dst, int n) { std::memcpy(dst, src, n * 4); }
  static void Widen(const uint16_t* src, float* dst, int n) {
    for (int i = 0; i < n; i += 8) {
      _mm256_storeu_ps(dst + i,
                       _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
    }
  }
};
#include "kernels/cpu/tiled_attention_impl.inc"
}  // namespace
template <typename T>
void Run(const float* q, int q_stride, const AttentionSeq& seq, int g, int b, int e,
         const AttentionShape& s, const T* k, const T* v, float* out) {
  Tile(q, q_stride, seq, g, b, e, s, k, v, out);
}
}  // namespace avx2
#pragma GCC pop_options

bool TiledAvailable(int head_dim) {
  return HasAvx2() && head_dim % 8 == 0 && head_dim <= 256;
}

int TiledRowsPerTile(int group) { return std::max(1, 64 / std::max(1, group)); }

template <typename T>
void TiledAttention(const float* q, int q_stride, const AttentionSeq& seq, int kv_head,
                    int row_begin, int row_end, const AttentionShape& s, const T* k_cache,
                    const T* v_cache, float* out) {
  if (HasAvx512()) {
    avx512::Run(q, q_stride, seq, kv_head, row_begin, row_end, s, k_cache, v_cache, out);
  } else {
    avx2::Run(q, q_stride, seq, kv_head, row_begin, row_end, s, k_cache, v_cache, out);
  }
}

template void TiledAttention<float>(const float*, int, const AttentionSeq&, int, int, int,
                                    const AttentionShape&, const float*, const float*, float*);
template void TiledAttention<uint16_t>(const float*, int, const AttentionSeq&, int, int, int,
                                       const AttentionShape&, const uint16_t*, const uint16_t*,
                                       float*);

}  // namespace kvcast::cpu_attention
