// Tiled causal attention for prefill: a thread block computes one tile of
// kTileQ = 64 query rows of one sequence for one query head, streaming the
// sequence's keys kTileK = 64 at a time through shared memory (the
// FlashAttention-2 loop, on CUDA cores in float32). Each K/V row is read
// once per tile of 64 queries instead of once per query, which is what the
// one-warp-per-row kernel (paged_attention.cu) pays at long prompts.
//
// The block is written as a sequence of phases separated by barriers, in
// which a thread reads only shared memory written in earlier phases (or by
// itself): TiledAttentionBlock runs them through an executor, which on the
// GPU (paged_attention.cu) calls each phase once per thread and then
// __syncthreads(), and on the host (tiled_attention_test.cc) calls it for
// thread 0..255 in turn. The host run is the same arithmetic in the same
// order, so the test checks the tiling, paging and masking on any machine.
//
// Thread roles (256 threads): for the scores and the output a thread owns a
// 4 x 4 micro-tile, rows 4 * (tid / 16) .. + 3, columns (keys or head dims)
// 4 * (tid % 16) .. + 3 (and + 64 k for head dims past 64); for the softmax
// 4 threads share a row, tid / 4, each taking 16 of its keys.
//
// Internal to the CUDA kernels and their tests.
#ifndef KVCAST_KERNELS_CUDA_TILED_ATTENTION_H_
#define KVCAST_KERNELS_CUDA_TILED_ATTENTION_H_

#if defined(__CUDACC__)
#define KVCAST_TA_HD __host__ __device__
#else
#define KVCAST_TA_HD
#endif

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

// Loops over register arrays must unroll on the GPU (a run-time index would
// move the array to local memory); the host compiler does as it likes.
#if defined(__CUDA_ARCH__)
#define KVCAST_TA_UNROLL _Pragma("unroll")
#else
#define KVCAST_TA_UNROLL
#endif

namespace kvcast {
namespace cuda {

// One sequence of a batched attention call. Sequences are contiguous and
// ordered: seqs[b].query_offset == sum of num_queries of seqs[0..b).
struct AttentionSeqDesc {
  int32_t query_offset;       // first row of this sequence in q / out
  int32_t num_queries;        // >= 1; the last num_queries tokens of the context
  int32_t context_len;        // tokens whose K/V are in the pages (includes the queries')
  int32_t page_table_offset;  // this sequence's page ids start at page_tables + this
};

namespace tiled {

constexpr int kTileQ = 64;
constexpr int kTileK = 64;
constexpr int kThreads = 256;
constexpr int kScoreStride = kTileK + 1;  // scores row stride: 2-way bank conflicts at most

// What the block reads and writes (device pointers on the GPU).
struct Args {
  const float* q = nullptr;  // [rows][q_stride]; head h at h * head_dim
  int q_stride = 0;
  const float* k_cache = nullptr;  // [pages][page_tokens][num_kv_heads][head_dim]
  const float* v_cache = nullptr;
  const int32_t* page_tables = nullptr;
  const AttentionSeqDesc* seqs = nullptr;
  int num_seqs = 0;
  int num_heads = 0, num_kv_heads = 0, page_tokens = 0;
  float scale = 0.f;
  float* out = nullptr;  // [rows][num_heads][head_dim]
  // Sequences with fewer queries are left to the per-row kernel.
  int min_queries = 1;
};

// Head dims the tiled kernel takes (the rest use the per-row kernel).
KVCAST_TA_HD inline bool Supports(int head_dim) { return head_dim == 64 || head_dim == 128; }

// Query tiles of a batch: at most this many (each sequence adds at most one
// partial tile); blocks past the real count find no tile and return.
inline int MaxQueryTiles(int total_queries, int num_seqs) {
  return (total_queries + kTileQ - 1) / kTileQ + num_seqs;
}

template <int D>
struct Smem {
  float qt[D * kTileQ];  // Q^T, pre-scaled: qt[d * kTileQ + r]
  // K^T of the key tile, kt[d * kTileK + c]; after the scores, P^T of the
  // tile, pt[c * kTileQ + r], in the same memory (K^T is not read again).
  float kt[D * kTileK];
  float v[kTileK * D];  // v[c * D + d]
  float s[kTileQ * kScoreStride];
  float pmax[kTileQ * 4];  // each row's 4 partial maxima
  float psum[kTileQ * 4];  // and partial sums of exp
  float mnew[kTileQ];      // each row's running max after this tile
};

// A thread's registers across phases.
template <int D>
struct ThreadState {
  float m_row;     // softmax role: running max of row tid / 4
  float m[4], l[4];  // output role: running max and sum of its 4 rows
  float o[4][D / 16];  // its 4 rows x D / 16 dims, unnormalized
};

// The block's tile: which rows of which sequence, and how many keys.
struct Tile {
  bool valid = false;
  int row0 = 0;  // first row of q / out
  int j0 = 0;    // its query index within the sequence
  int rows = 0;  // valid rows in the tile, <= kTileQ
  int num_queries = 0, context_len = 0;
  int key_end = 0;  // keys any row of the tile sees: [0, key_end)
  const int32_t* pages = nullptr;
};

KVCAST_TA_HD inline Tile FindTile(const Args& a, int tile_index) {
  Tile t;
  for (int b = 0; b < a.num_seqs; ++b) {
    const AttentionSeqDesc s = a.seqs[b];
    if (s.num_queries < a.min_queries) continue;
    const int tiles = (s.num_queries + kTileQ - 1) / kTileQ;
    if (tile_index >= tiles) {
      tile_index -= tiles;
      continue;
    }
    t.valid = true;
    t.j0 = tile_index * kTileQ;
    t.row0 = s.query_offset + t.j0;
    t.rows = s.num_queries - t.j0 < kTileQ ? s.num_queries - t.j0 : kTileQ;
    t.num_queries = s.num_queries;
    t.context_len = s.context_len;
    const int last_visible = s.context_len - s.num_queries + t.j0 + t.rows;
    t.key_end = last_visible < s.context_len ? last_visible : s.context_len;
    t.pages = a.page_tables + s.page_table_offset;
    return t;
  }
  return t;
}

// 16-byte shared / global accesses (float4 on the GPU).
KVCAST_TA_HD inline void Load4(const float* p, float (&x)[4]) {
#if defined(__CUDA_ARCH__)
  const float4 v = *reinterpret_cast<const float4*>(p);
  x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
#else
  std::memcpy(x, p, sizeof x);
#endif
}
KVCAST_TA_HD inline void Store4(float* p, const float (&x)[4]) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<float4*>(p) = make_float4(x[0], x[1], x[2], x[3]);
#else
  std::memcpy(p, x, sizeof x);
#endif
}
KVCAST_TA_HD inline float Exp(float x) {
#if defined(__CUDA_ARCH__)
  return expf(x);
#else
  return std::exp(x);
#endif
}
KVCAST_TA_HD inline float Max(float a, float b) { return a > b ? a : b; }

// Keys of tile row r see [0, Visible(t, r)); padding rows see none.
KVCAST_TA_HD inline int Visible(const Tile& t, int r) {
  return r < t.rows ? t.context_len - t.num_queries + t.j0 + r + 1 : 0;
}

template <int D>
KVCAST_TA_HD void LoadQ(int tid, Smem<D>& sm, const Tile& t, const Args& a, int head) {
  for (int e = tid; e < D * kTileQ; e += kThreads) {
    const int r = e % kTileQ, d = e / kTileQ;  // consecutive threads: consecutive rows
    sm.qt[d * kTileQ + r] =
        r < t.rows ? a.q[size_t(t.row0 + r) * a.q_stride + size_t(head) * D + d] * a.scale : 0.f;
  }
}

// The page slot of the sequence's `key`.
KVCAST_TA_HD inline size_t SlotOf(const Tile& t, const Args& a, int key) {
  return size_t(t.pages[key / a.page_tokens]) * a.page_tokens + key % a.page_tokens;
}

// Keys [k0, k0 + kTileK) into K^T and V; keys at or past key_end are zeros.
template <int D>
KVCAST_TA_HD void LoadKv(int tid, Smem<D>& sm, const Tile& t, const Args& a, int kv_head,
                         int k0) {
  const size_t kv_row = size_t(a.num_kv_heads) * D;
  constexpr int kD4 = D / 4;
  for (int e = tid; e < kTileK * kD4; e += kThreads) {
    // K: consecutive threads take consecutive keys, so the transposed
    // stores land in consecutive banks.
    const int c = e % kTileK, d4 = e / kTileK;
    float x[4] = {0.f, 0.f, 0.f, 0.f};
    const int key = k0 + c;
    if (key < t.key_end) {
      Load4(a.k_cache + SlotOf(t, a, key) * kv_row + size_t(kv_head) * D + 4 * d4, x);
    }
    for (int i = 0; i < 4; ++i) sm.kt[(4 * d4 + i) * kTileK + c] = x[i];
  }
  for (int e = tid; e < kTileK * kD4; e += kThreads) {
    // V: consecutive threads take consecutive dims of a key (coalesced).
    const int d4 = e % kD4, c = e / kD4;
    float x[4] = {0.f, 0.f, 0.f, 0.f};
    const int key = k0 + c;
    if (key < t.key_end) {
      Load4(a.v_cache + SlotOf(t, a, key) * kv_row + size_t(kv_head) * D + 4 * d4, x);
    }
    Store4(sm.v + c * D + 4 * d4, x);
  }
}

// S = (scale Q) K^T on the thread's 4 x 4 micro-tile; causal mask -> -inf.
template <int D>
KVCAST_TA_HD void Scores(int tid, Smem<D>& sm, const Tile& t, int k0) {
  const int r0 = 4 * (tid / 16), c0 = 4 * (tid % 16);
  float acc[4][4] = {};
  for (int d = 0; d < D; ++d) {
    float q[4], k[4];
    Load4(sm.qt + d * kTileQ + r0, q);
    Load4(sm.kt + d * kTileK + c0, k);
    KVCAST_TA_UNROLL
    for (int i = 0; i < 4; ++i) {
      KVCAST_TA_UNROLL
      for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(q[i], k[j], acc[i][j]);
    }
  }
  KVCAST_TA_UNROLL
  for (int i = 0; i < 4; ++i) {
    const int visible = Visible(t, r0 + i);
    KVCAST_TA_UNROLL
    for (int j = 0; j < 4; ++j) {
      sm.s[(r0 + i) * kScoreStride + c0 + j] = k0 + c0 + j < visible ? acc[i][j] : -INFINITY;
    }
  }
}

template <int D>
KVCAST_TA_HD void RowMax(int tid, Smem<D>& sm) {
  const int r = tid / 4, c0 = 16 * (tid % 4);
  float m = -INFINITY;
  for (int c = c0; c < c0 + 16; ++c) m = Max(m, sm.s[r * kScoreStride + c]);
  sm.pmax[tid] = m;  // == pmax[r * 4 + tid % 4]
}

// P = exp(S - the row's new max), transposed into pt; partial sums.
template <int D>
KVCAST_TA_HD void Probabilities(int tid, Smem<D>& sm, ThreadState<D>& st) {
  const int r = tid / 4, c0 = 16 * (tid % 4);
  float m_tile = sm.pmax[4 * r];
  for (int i = 1; i < 4; ++i) m_tile = Max(m_tile, sm.pmax[4 * r + i]);
  const float m_new = Max(st.m_row, m_tile);
  float* pt = sm.kt;
  float sum = 0.f;
  for (int c = c0; c < c0 + 16; ++c) {
    // A row that has seen no key yet (a padding row) keeps p = 0, never NaN.
    const float p = m_new == -INFINITY ? 0.f : Exp(sm.s[r * kScoreStride + c] - m_new);
    pt[c * kTileQ + r] = p;
    sum += p;
  }
  sm.psum[tid] = sum;
  st.m_row = m_new;
  if (tid % 4 == 0) sm.mnew[r] = m_new;
}

// O = O * exp(m_old - m_new) + P V on the thread's rows and dims.
template <int D>
KVCAST_TA_HD void Accumulate(int tid, Smem<D>& sm, ThreadState<D>& st) {
  const int r0 = 4 * (tid / 16), d0 = 4 * (tid % 16);
  KVCAST_TA_UNROLL
  for (int i = 0; i < 4; ++i) {
    const int r = r0 + i;
    const float m_new = sm.mnew[r];
    const float corr = st.m[i] == -INFINITY ? 0.f : Exp(st.m[i] - m_new);
    st.m[i] = m_new;
    st.l[i] = st.l[i] * corr + sm.psum[4 * r] + sm.psum[4 * r + 1] + sm.psum[4 * r + 2] +
              sm.psum[4 * r + 3];
    KVCAST_TA_UNROLL
    for (int j = 0; j < D / 16; ++j) st.o[i][j] *= corr;
  }
  const float* pt = sm.kt;
  for (int c = 0; c < kTileK; ++c) {
    float p[4];
    Load4(pt + c * kTileQ + r0, p);
    KVCAST_TA_UNROLL
    for (int g = 0; g < D / 64; ++g) {
      float v[4];
      Load4(sm.v + c * D + 64 * g + d0, v);
      KVCAST_TA_UNROLL
      for (int i = 0; i < 4; ++i) {
        KVCAST_TA_UNROLL
        for (int j = 0; j < 4; ++j) st.o[i][4 * g + j] = fmaf(p[i], v[j], st.o[i][4 * g + j]);
      }
    }
  }
}

template <int D>
KVCAST_TA_HD void StoreOut(int tid, const Tile& t, const Args& a, int head,
                           const ThreadState<D>& st) {
  const int r0 = 4 * (tid / 16), d0 = 4 * (tid % 16);
  KVCAST_TA_UNROLL
  for (int i = 0; i < 4; ++i) {
    if (r0 + i >= t.rows) continue;
    const float inv = st.l[i] > 0.f ? 1.f / st.l[i] : 0.f;
    float* o = a.out + (size_t(t.row0 + r0 + i) * a.num_heads + head) * D + d0;
    KVCAST_TA_UNROLL
    for (int g = 0; g < D / 64; ++g) {
      const float x[4] = {st.o[i][4 * g] * inv, st.o[i][4 * g + 1] * inv,
                          st.o[i][4 * g + 2] * inv, st.o[i][4 * g + 3] * inv};
      Store4(o + 64 * g, x);
    }
  }
}

// One block: query tile `tile_index` (over the batch's sequences in order)
// of query head `head`. Exec::Phase(f) runs f(tid, state) for every thread,
// then a barrier.
template <int D, typename Exec>
KVCAST_TA_HD void RunBlock(Exec& exec, const Args& a, int tile_index, int head, Smem<D>& sm) {
  const Tile t = FindTile(a, tile_index);
  if (!t.valid) return;  // uniform over the block
  const int kv_head = head / (a.num_heads / a.num_kv_heads);
  exec.Phase([&](int tid, ThreadState<D>& st) {
    st.m_row = -INFINITY;
    KVCAST_TA_UNROLL
    for (int i = 0; i < 4; ++i) {
      st.m[i] = -INFINITY;
      st.l[i] = 0.f;
      KVCAST_TA_UNROLL
      for (int j = 0; j < D / 16; ++j) st.o[i][j] = 0.f;
    }
    LoadQ<D>(tid, sm, t, a, head);
  });
  for (int k0 = 0; k0 < t.key_end; k0 += kTileK) {
    exec.Phase([&](int tid, ThreadState<D>&) { LoadKv<D>(tid, sm, t, a, kv_head, k0); });
    exec.Phase([&](int tid, ThreadState<D>&) { Scores<D>(tid, sm, t, k0); });
    exec.Phase([&](int tid, ThreadState<D>&) { RowMax<D>(tid, sm); });
    exec.Phase([&](int tid, ThreadState<D>& st) { Probabilities<D>(tid, sm, st); });
    exec.Phase([&](int tid, ThreadState<D>& st) { Accumulate<D>(tid, sm, st); });
  }
  exec.Phase([&](int tid, ThreadState<D>& st) { StoreOut<D>(tid, t, a, head, st); });
}

}  // namespace tiled
}  // namespace cuda
}  // namespace kvcast

#endif  // KVCAST_KERNELS_CUDA_TILED_ATTENTION_H_
