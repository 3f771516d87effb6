#include "kernels/cpu/attention.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/dtype.h"
#include "kernels/cpu/simd_exp.h"
#include "kernels/cpu/tiled_attention.h"

namespace kvcast {
namespace {

#define KVCAST_AVX2 __attribute__((target("avx2,fma,f16c")))

using cpu_attention::HasAvx2;
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
  float* stats = nullptr;  // when set: {max score, sum of exp(score - max)}
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
  if (a.stats != nullptr) {
    a.stats[0] = max_score;
    a.stats[1] = denom;
  }
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
  if (a.stats != nullptr) {
    a.stats[0] = max_score;
    a.stats[1] = denom;
  }
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

// One unit of work: rows [row_begin, row_end) of a sequence for one KV head
// (tiled), all its rows (rows), or its one row against keys [key_begin,
// key_end) (a split of a decode row; `part` indexes its partial results).
struct Task {
  int seq, kv_head, row_begin, row_end;
  bool tiled;
  int key_begin = 0, key_end = 0, part = -1;
};

// Decode rows of long contexts are split over keys when the batch has too
// few (sequence, KV head) tasks to keep every thread busy: parts of at
// least this many keys, merged after (flash-decoding's split-K).
constexpr int kMinSplitKeys = 512;

// The query rows of one sequence for KV head g, one row at a time; with
// part >= 0 the one row against keys [key_begin, key_end) only, its
// per-head results and {max, sum} going to `partial` (merged later).
template <typename T>
void Rows(const float* q, int q_stride, const AttentionSeq& seq, const Task& task,
          const AttentionShape& s, const T* k_cache, const T* v_cache, float* out,
          float* partial) {
  const int g = task.kv_head;
  const int group = s.num_heads / s.num_kv_heads;
  const int hd = s.head_dim;
  const size_t token_row = size_t(s.num_kv_heads) * hd;
  const int out_stride = s.num_heads * hd;
  const bool vector = HasAvx2() && hd % 8 == 0 && hd <= 256;
  thread_local std::vector<float> scores;
  thread_local std::vector<const T*> keys, values;
  const bool split = task.part >= 0;
  const int first = split ? task.key_begin : 0;
  const int last = split ? task.key_end : seq.context_len;  // keys [first, last)
  scores.resize(size_t(last - first));
  keys.resize(size_t(last - first));
  values.resize(size_t(last - first));
  // Token addresses page by page (no division per key).
  for (int t = first, p = first / s.page_tokens; t < last; ++p) {
    size_t slot = size_t(seq.page_table[p]) * s.page_tokens + t % s.page_tokens;
    for (int o = t % s.page_tokens; o < s.page_tokens && t < last; ++o, ++t, ++slot) {
      keys[t - first] = k_cache + slot * token_row + size_t(g) * hd;
      values[t - first] = v_cache + slot * token_row + size_t(g) * hd;
    }
  }
  RowArgs<T> a;
  a.keys = keys.data();
  a.values = values.data();
  a.hd = hd;
  a.scale = s.scale;
  a.scores = scores.data();
  for (int j = 0; j < seq.num_queries; ++j) {
    a.visible = split ? last - first : seq.context_len - seq.num_queries + j + 1;
    const size_t row = size_t(seq.query_offset + j);
    for (int h = g * group; h < (g + 1) * group; ++h) {
      a.prefetch = h == g * group && j == 0;
      a.q = q + row * q_stride + size_t(h) * hd;
      if (split) {
        float* mine = partial + (size_t(task.part) * group + (h - g * group)) * (hd + 2);
        a.out = mine;
        a.stats = mine + hd;
      } else {
        a.out = out + row * out_stride + size_t(h) * hd;
      }
      vector ? RowAvx2(a) : RowScalar(a);
    }
  }
}

// out for a split decode row: the parts' results weighted by their share of
// the softmax's sum.
void MergeParts(const float* partial, int first_part, int parts, int group, int hd, float* out) {
  for (int hi = 0; hi < group; ++hi) {
    auto part = [&](int p) { return partial + (size_t(first_part + p) * group + hi) * (hd + 2); };
    float mx = -INFINITY;
    for (int p = 0; p < parts; ++p) mx = std::max(mx, part(p)[hd]);
    float total = 0;
    float* o = out + size_t(hi) * hd;
    std::fill(o, o + hd, 0.0f);
    for (int p = 0; p < parts; ++p) {
      const float w = std::exp(part(p)[hd] - mx) * part(p)[hd + 1];
      total += w;
      for (int d = 0; d < hd; ++d) o[d] += w * part(p)[d];
    }
    for (int d = 0; d < hd; ++d) o[d] /= total;
  }
}

template <typename T>
void PagedAttention(const float* q, int q_stride, const AttentionSeq* seqs, int num_seqs,
                    const AttentionShape& s, const T* k_cache, const T* v_cache, float* out,
                    bool parallel, CpuAttentionKernel kernel) {
  const int group = s.num_heads / s.num_kv_heads;
  const int tile_rows = cpu_attention::TiledRowsPerTile(group);
  const int threads = parallel ? omp_get_max_threads() : 1;
  // Whole-sequence row tasks if none were split: split decode rows only
  // when the batch has fewer than 2 per thread.
  const bool split_decode = num_seqs * s.num_kv_heads < 2 * threads;
  thread_local std::vector<Task> tasks;
  thread_local std::vector<float> partial;
  tasks.clear();
  int64_t work = 0;
  int parts_total = 0;
  for (int b = 0; b < num_seqs; ++b) {
    const AttentionSeq& seq = seqs[b];
    work += int64_t(seq.num_queries) * seq.context_len;
    const bool tiled = KernelFor(seq, s, kernel) == CpuAttentionKernel::kTiled;
    // Parts per decode row: enough tasks for 2 per thread, each of at least
    // kMinSplitKeys keys.
    int parts = 1;
    if (!tiled && split_decode && seq.num_queries == 1) {
      const int want = (2 * threads + num_seqs * s.num_kv_heads - 1) / (num_seqs * s.num_kv_heads);
      parts = std::max(1, std::min(want, seq.context_len / kMinSplitKeys));
    }
    for (int g = 0; g < s.num_kv_heads; ++g) {
      if (tiled) {
        for (int r = 0; r < seq.num_queries; r += tile_rows) {
          tasks.push_back({b, g, r, std::min(seq.num_queries, r + tile_rows), true});
        }
      } else if (parts == 1) {
        tasks.push_back({b, g, 0, seq.num_queries, false});
      } else {
        for (int p = 0; p < parts; ++p) {
          tasks.push_back({b, g, 0, 1, false, int(int64_t(seq.context_len) * p / parts),
                           int(int64_t(seq.context_len) * (p + 1) / parts), parts_total++});
        }
      }
    }
  }
  partial.resize(size_t(parts_total) * group * (s.head_dim + 2));
  const int n = int(tasks.size());
  const Task* all = tasks.data();
  float* parts_out = partial.data();
#pragma omp parallel for schedule(dynamic, 1) if (parallel && work * s.num_heads * s.head_dim > (1 << 17))
  for (int i = n - 1; i >= 0; --i) {  // the last tiles see the most keys: first
    const Task& t = all[i];
    if (t.tiled) {
      cpu_attention::TiledAttention(q, q_stride, seqs[t.seq], t.kv_head, t.row_begin, t.row_end,
                                    s, k_cache, v_cache, out);
    } else {
      Rows(q, q_stride, seqs[t.seq], t, s, k_cache, v_cache, out, parts_out);
    }
  }
  // Merge the split rows: a (sequence, KV head)'s parts are consecutive.
  for (int i = 0; i < n;) {
    const Task& t = all[i];
    if (t.part < 0) {
      ++i;
      continue;
    }
    int parts = 1;
    while (i + parts < n && all[i + parts].part >= 0 && all[i + parts].seq == t.seq &&
           all[i + parts].kv_head == t.kv_head) {
      ++parts;
    }
    const AttentionSeq& seq = seqs[t.seq];
    MergeParts(parts_out, t.part, parts, group, s.head_dim,
               out + size_t(seq.query_offset) * s.num_heads * s.head_dim +
                   size_t(t.kv_head) * group * s.head_dim);
    i += parts;
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
