#include "kernels/cpu/attention.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "engine/model/dtype.h"
#include "kernels/cpu/simd_exp.h"
#include "kernels/cpu/tiled_attention.h"

namespace kvcast {
namespace {

#define KVCAST_AVX2 __attribute__((target("avx2,fma,f16c")))

bool HasAvx2() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
  }();
  return has;
}

using cpu_simd::Exp8;

KVCAST_AVX2 inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Eight K/V values as floats, from float32 or fp16 pages.
KVCAST_AVX2 inline __m256 Load8(const float* p) { return _mm256_loadu_ps(p); }
KVCAST_AVX2 inline __m256 Load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline float ToFloat(float x) { return x; }
inline float ToFloat(uint16_t x) { return HalfToFloat(x); }

// One query row against `visible` keys of one KV head: out[hd]. T is how
// the pages keep values (float, or uint16_t fp16 bits).
template <typename T>
struct RowArgs {
  const float* q;
  const T* const* keys;    // keys[t]: token t's key for this head
  const T* const* values;  // likewise
  int visible, hd;
  float scale;
  float* scores;  // scratch[visible]
  float* out;
  bool prefetch;  // the group's first query head, first row: K/V come from memory
};

constexpr int kAhead = 8;  // keys prefetched ahead of the one in use

template <typename T>
KVCAST_AVX2 void RowAvx2(const RowArgs<T>& a) {
  const int hd = a.hd;
  float max_score = -INFINITY;
  for (int t = 0; t < a.visible; ++t) {
    const T* k = a.keys[t];
    if (a.prefetch && t + kAhead < a.visible) {
      // The keys' and values' rows are 4-line runs scattered over pages:
      // ask for them ahead (the values for the pass after this one).
      for (int l = 0; l < hd; l += 64 / int(sizeof(T))) {
        _mm_prefetch(reinterpret_cast<const char*>(a.keys[t + kAhead] + l), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(a.values[t + kAhead] + l), _MM_HINT_T1);
      }
    }
    __m256 acc = _mm256_setzero_ps();
    for (int d = 0; d < hd; d += 8) {
      acc = _mm256_fmadd_ps(_mm256_loadu_ps(a.q + d), Load8(k + d), acc);
    }
    const float sc = HorizontalSum(acc) * a.scale;
    a.scores[t] = sc;
    max_score = std::max(max_score, sc);
  }
  const __m256 mx = _mm256_set1_ps(max_score);
  __m256 sum = _mm256_setzero_ps();
  int t = 0;
  for (; t + 8 <= a.visible; t += 8) {
    const __m256 e = Exp8(_mm256_sub_ps(_mm256_loadu_ps(a.scores + t), mx));
    _mm256_storeu_ps(a.scores + t, e);
    sum = _mm256_add_ps(sum, e);
  }
  float denom = HorizontalSum(sum);
  for (; t < a.visible; ++t) denom += (a.scores[t] = std::exp(a.scores[t] - max_score));
  const float inv = 1.0f / denom;
  // hd <= 256: up to 32 accumulators of 8.
  __m256 acc[32];
  const int vecs = hd / 8;
  for (int i = 0; i < vecs; ++i) acc[i] = _mm256_setzero_ps();
  for (int t2 = 0; t2 < a.visible; ++t2) {
    const T* v = a.values[t2];
    const __m256 p = _mm256_set1_ps(a.scores[t2]);
    for (int i = 0; i < vecs; ++i) acc[i] = _mm256_fmadd_ps(p, Load8(v + 8 * i), acc[i]);
  }
  const __m256 vinv = _mm256_set1_ps(inv);
  for (int i = 0; i < vecs; ++i) _mm256_storeu_ps(a.out + 8 * i, _mm256_mul_ps(acc[i], vinv));
}

template <typename T>
void RowScalar(const RowArgs<T>& a) {
  float max_score = -INFINITY;
  for (int t = 0; t < a.visible; ++t) {
    const T* k = a.keys[t];
    float dot = 0;
    for (int d = 0; d < a.hd; ++d) dot += a.q[d] * ToFloat(k[d]);
    a.scores[t] = dot * a.scale;
    max_score = std::max(max_score, a.scores[t]);
  }
  float denom = 0;
  for (int t = 0; t < a.visible; ++t) denom += (a.scores[t] = std::exp(a.scores[t] - max_score));
  const float inv = 1.0f / denom;
  std::fill(a.out, a.out + a.hd, 0.0f);
  for (int t = 0; t < a.visible; ++t) {
    const T* v = a.values[t];
    for (int d = 0; d < a.hd; ++d) a.out[d] += a.scores[t] * ToFloat(v[d]);
  }
  for (int d = 0; d < a.hd; ++d) a.out[d] *= inv;
}

}  // namespace

bool CpuAttentionVectorized() { return HasAvx2(); }
void CpuAttentionAvx2OnlyForTesting(bool on) { cpu_attention::TiledAvx2OnlyForTesting(on); }

namespace {

// Sequences with at least this many query rows (prefill chunks) take the
// tiled kernel; fewer (decode) the row kernel.
constexpr int kTiledMinQueries = 16;

// Which kernel a sequence's rows take.
CpuAttentionKernel KernelFor(const AttentionSeq& seq, const AttentionShape& s,
                             CpuAttentionKernel asked) {
  if (!cpu_attention::TiledAvailable(s.head_dim)) return CpuAttentionKernel::kRows;
  if (asked == CpuAttentionKernel::kAuto) {
    return seq.num_queries >= kTiledMinQueries ? CpuAttentionKernel::kTiled
                                               : CpuAttentionKernel::kRows;
  }
  return asked;
}

// One unit of work: rows [row_begin, row_end) of a sequence for one KV head.
struct Task {
  int seq, kv_head, row_begin, row_end;
  bool tiled;
};

// The query rows of every KV head of one sequence, one row at a time.
template <typename T>
void Rows(const float* q, int q_stride, const AttentionSeq& seq, int g, const AttentionShape& s,
          const T* k_cache, const T* v_cache, float* out) {
  const int group = s.num_heads / s.num_kv_heads;
  const int hd = s.head_dim;
  const size_t token_row = size_t(s.num_kv_heads) * hd;
  const int out_stride = s.num_heads * hd;
  const bool vector = HasAvx2() && hd % 8 == 0 && hd <= 256;
  thread_local std::vector<float> scores;
  thread_local std::vector<const T*> keys, values;
  const int ctx = seq.context_len;
  scores.resize(size_t(ctx));
  keys.resize(size_t(ctx));
  values.resize(size_t(ctx));
  // Token addresses page by page (no division per key).
  for (int t = 0, p = 0; t < ctx; ++p) {
    size_t slot = size_t(seq.page_table[p]) * s.page_tokens;
    for (int o = 0; o < s.page_tokens && t < ctx; ++o, ++t, ++slot) {
      keys[t] = k_cache + slot * token_row + size_t(g) * hd;
      values[t] = v_cache + slot * token_row + size_t(g) * hd;
    }
  }
  RowArgs<T> a;
  a.keys = keys.data();
  a.values = values.data();
  a.hd = hd;
  a.scale = s.scale;
  a.scores = scores.data();
  for (int j = 0; j < seq.num_queries; ++j) {
    a.visible = seq.context_len - seq.num_queries + j + 1;
    const size_t row = size_t(seq.query_offset + j);
    for (int h = g * group; h < (g + 1) * group; ++h) {
      a.prefetch = h == g * group && j == 0;
      a.q = q + row * q_stride + size_t(h) * hd;
      a.out = out + row * out_stride + size_t(h) * hd;
      vector ? RowAvx2(a) : RowScalar(a);
    }
  }
}

template <typename T>
void PagedAttention(const float* q, int q_stride, const AttentionSeq* seqs, int num_seqs,
                    const AttentionShape& s, const T* k_cache, const T* v_cache, float* out,
                    bool parallel, CpuAttentionKernel kernel) {
  const int group = s.num_heads / s.num_kv_heads;
  const int tile_rows = cpu_attention::TiledRowsPerTile(group);
  thread_local std::vector<Task> tasks;
  tasks.clear();
  int64_t work = 0;
  for (int b = 0; b < num_seqs; ++b) {
    const AttentionSeq& seq = seqs[b];
    work += int64_t(seq.num_queries) * seq.context_len;
    const bool tiled = KernelFor(seq, s, kernel) == CpuAttentionKernel::kTiled;
    for (int g = 0; g < s.num_kv_heads; ++g) {
      if (!tiled) {
        tasks.push_back({b, g, 0, seq.num_queries, false});
        continue;
      }
      for (int r = 0; r < seq.num_queries; r += tile_rows) {
        tasks.push_back({b, g, r, std::min(seq.num_queries, r + tile_rows), true});
      }
    }
  }
  const int n = int(tasks.size());
  const Task* all = tasks.data();
#pragma omp parallel for schedule(dynamic, 1) if (parallel && work * s.num_heads * s.head_dim > (1 << 17))
  for (int i = n - 1; i >= 0; --i) {  // the last tiles see the most keys: first
    const Task& t = all[i];
    if (t.tiled) {
      cpu_attention::TiledAttention(q, q_stride, seqs[t.seq], t.kv_head, t.row_begin, t.row_end,
                                    s, k_cache, v_cache, out);
    } else {
      Rows(q, q_stride, seqs[t.seq], t.kv_head, s, k_cache, v_cache, out);
    }
  }
}

}  // namespace

CpuAttentionKernel CpuAttentionKernelFromEnv() {
  static const CpuAttentionKernel k = [] {
    const char* mode = std::getenv("KVCAST_CPU_ATTENTION");
    if (mode != nullptr && std::strcmp(mode, "rows") == 0) return CpuAttentionKernel::kRows;
    if (mode != nullptr && std::strcmp(mode, "tiled") == 0) return CpuAttentionKernel::kTiled;
    return CpuAttentionKernel::kAuto;
  }();
  return k;
}

void CpuPagedAttention(const float* q, int q_stride, const AttentionSeq* seqs, int num_seqs,
                       const AttentionShape& s, const void* k_cache, const void* v_cache,
                       float* out, bool parallel, CpuAttentionKernel kernel) {
  if (s.storage == KvStorage::kF16) {
    PagedAttention(q, q_stride, seqs, num_seqs, s, static_cast<const uint16_t*>(k_cache),
                   static_cast<const uint16_t*>(v_cache), out, parallel, kernel);
  } else {
    PagedAttention(q, q_stride, seqs, num_seqs, s, static_cast<const float*>(k_cache),
                   static_cast<const float*>(v_cache), out, parallel, kernel);
  }
}

}  // namespace kvcast
