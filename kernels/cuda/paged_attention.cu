// Paged causal attention: a split-KV ("flash-decoding") partial kernel and a
// combine kernel.
//
// Thread mapping. One warp owns one (query row, query head, KV split). Lane i
// holds dims i, i + 32, ... of the head, so each K/V row read is one fully
// coalesced 128-byte access per instruction and needs no alignment beyond a
// float's. A q.k dot is a per-lane partial sum plus a warp xor-reduce. Keys go
// kChunk at a time: the chunk's loads and its kChunk reductions are
// independent (latency hidden by ILP), and the online softmax (running max m,
// running sum l, acc[head_dim]) rescales once per chunk, not once per key.
//
// A block holds R consecutive query rows x HB consecutive query heads (at most
// 8 warps). Consecutive heads share a KV head (GQA) and consecutive rows of a
// sequence read the same keys, so a block's warps stream the same K/V lines at
// about the same time and L1 serves all but the first: the reuse of a
// shared-memory tile without barriers, and without idle warps in decode, where
// a block has one row (R = 1, HB = min(8, num_heads)). Prefill (R > 1) fills the block
// with one KV group's heads and as many rows as fit. No shared memory, no
// __syncthreads; warps leave early only as a whole, so full-mask shuffles are
// safe.
//
// Grid: x = row tiles (the only dimension that can pass 65535), y = head
// tiles, z = KV splits. A warp finds its row's sequence by binary search over
// seqs[].query_offset.
//
// Splits. With few rows (decode) one warp per (row, head) leaves most SMs idle
// on long contexts, so [0, max_context_len) is cut into S equal splits: S is
// the smallest of ceil(max_context_len / 32), 32 (the combine gives each split
// a lane) and what brings the grid to about 8192 warps (two H100 waves); prefill,
// with many rows, gets S = 1 and writes `out` directly. The last split runs to
// the row's causal limit, so an underestimated max_context_len loses no keys.
// A split past a row's limit sees no keys and records (m = -inf, l = 0), which
// the combine weighs 0.
//
// Workspace (S > 1), idx = (row * num_heads + head) * S + split:
//   acc: float[total_queries * num_heads * S][head_dim] at idx * head_dim, unnormalized;
//   ml:  float[total_queries * num_heads * S][2] = (m, l) right after acc.
#include "kernels/cuda/paged_attention.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace kvcast {
namespace cuda {
namespace {

constexpr int kMaxWarps = 8;              // warps per block in both kernels
constexpr long long kMaxSplits = 32;      // one combine lane per split
// Keys per split: 32 measured fastest for decode on an H200 (docs/cuda.md): batch 1 at a
// 512-token context 1.28x the old 256, at 4,096 1.16x; batch 32 unchanged.
constexpr long long kSplitTokens = 32;
// Enough warps to fill an H100 about twice (132 SMs x 32 resident warps at 64 registers).
constexpr long long kTargetWarps = 8192;
constexpr unsigned kFullMask = 0xffffffffu;

static_assert(kMaxSplits <= 32, "the combine kernel holds one split per lane");

// kSplitTokens, or KVCAST_CUDA_SPLIT_TOKENS (>= 16) for A/B measurements.
long long SplitTokens() {
  static const long long tokens = [] {
    const char* v = std::getenv("KVCAST_CUDA_SPLIT_TOKENS");
    const long long t = v != nullptr ? std::atoll(v) : 0;
    return t >= 16 ? t : kSplitTokens;
  }();
  return tokens;
}

int NumSplits(const PagedAttentionParams& p) {
  const long long warps = static_cast<long long>(p.total_queries) * p.num_heads;
  const long long split_tokens = SplitTokens();
  if (warps <= 0 || p.max_context_len <= split_tokens) return 1;
  const long long by_len = (p.max_context_len + split_tokens - 1) / split_tokens;
  const long long by_fill = (kTargetWarps + warps - 1) / warps;
  return static_cast<int>(std::max(1LL, std::min({by_len, by_fill, kMaxSplits})));
}

__device__ __forceinline__ float WarpMax(float x) {
  for (int off = 16; off > 0; off >>= 1) x = fmaxf(x, __shfl_xor_sync(kFullMask, x, off));
  return x;
}

__device__ __forceinline__ float WarpSum(float x) {
  for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(kFullMask, x, off);
  return x;
}

// The last sequence starting at or before `row` (binary search).
__device__ __forceinline__ int SeqOfRow(const AttentionSeqDesc* seqs, int num_seqs, int row) {
  int lo = 0, hi = num_seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (seqs[mid].query_offset <= row) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// kDims = head_dim / 32, the dims each lane holds. Rows of sequences with
// at least `skip_queries` queries are the tiled kernel's and left alone.
template <int kDims>
__global__ void __launch_bounds__(kMaxWarps * 32)
    PagedAttentionKernel(PagedAttentionParams p, int rows_per_block, int heads_per_block,
                         int split_tokens, int skip_queries, float* __restrict__ part_acc,
                         float* __restrict__ part_ml) {
  // Keys in flight per warp: enough loads to cover latency, few enough to stay in registers.
  constexpr int kChunk = kDims <= 4 ? 8 : 4;
  constexpr int kHeadDim = kDims * 32;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row = blockIdx.x * rows_per_block + warp / heads_per_block;
  const int head = blockIdx.y * heads_per_block + warp % heads_per_block;
  if (row >= p.total_queries || head >= p.num_heads) return;

  const AttentionSeqDesc seq = p.seqs[SeqOfRow(p.seqs, p.num_seqs, row)];
  const int j = row - seq.query_offset;
  if (j < 0 || j >= seq.num_queries) return;  // only on malformed seqs
  if (seq.num_queries >= skip_queries) return;
  // Keys [0, visible) are causal for this row; this split takes [k_begin, k_end) of them.
  const int visible = min(seq.context_len - seq.num_queries + j + 1, seq.context_len);
  const int split = blockIdx.z;
  const int k_begin = split * split_tokens;
  const int k_end = split + 1 == static_cast<int>(gridDim.z)
                        ? visible
                        : min(k_begin + split_tokens, visible);

  const int group = p.num_heads / p.num_kv_heads;
  const size_t kv_row = size_t(p.num_kv_heads) * kHeadDim;  // floats per token slot
  const size_t kv_lane = size_t(head / group) * kHeadDim + lane;
  const float* qh = p.q + size_t(row) * p.q_stride + size_t(head) * kHeadDim + lane;
  float q[kDims], acc[kDims];
#pragma unroll
  for (int i = 0; i < kDims; ++i) {
    q[i] = __ldg(qh + 32 * i);
    acc[i] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  const int32_t* pages = p.page_tables + seq.page_table_offset;
  // Walk (page, offset) incrementally: one division per split, not one per key.
  int page_idx = k_begin / p.page_tokens, page_off = k_begin % p.page_tokens;

  for (int t0 = k_begin; t0 < k_end; t0 += kChunk) {
    const int n = min(kChunk, k_end - t0);
    // Slots past n repeat token t0 + n - 1, so every load below is valid and unconditional
    // (the compiler can batch them) and only pages of tokens < k_end are ever read.
    size_t base[kChunk];
#pragma unroll
    for (int c = 0; c < kChunk; ++c) {
      const size_t slot = size_t(__ldg(pages + page_idx)) * p.page_tokens + page_off;
      base[c] = slot * kv_row + kv_lane;
      page_off += c + 1 < n ? 1 : 0;
      if (page_off == p.page_tokens) {
        page_off = 0;
        ++page_idx;
      }
    }
    if (++page_off == p.page_tokens) {  // on to token t0 + n, the next chunk's first
      page_off = 0;
      ++page_idx;
    }
    float s[kChunk];
#pragma unroll
    for (int c = 0; c < kChunk; ++c) {
      const float* k = p.k_cache + base[c];
      float dot = 0.f;
#pragma unroll
      for (int i = 0; i < kDims; ++i) dot = fmaf(q[i], __ldg(k + 32 * i), dot);
      s[c] = dot;
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
#pragma unroll
      for (int c = 0; c < kChunk; ++c) s[c] += __shfl_xor_sync(kFullMask, s[c], off);
    }
    float chunk_max = -INFINITY;
#pragma unroll
    for (int c = 0; c < kChunk; ++c) {
      s[c] = c < n ? s[c] * p.scale : -INFINITY;
      chunk_max = fmaxf(chunk_max, s[c]);
    }
    const float m_new = fmaxf(m, chunk_max);
    const float correction = m == -INFINITY ? 0.f : expf(m - m_new);
    l *= correction;
#pragma unroll
    for (int i = 0; i < kDims; ++i) acc[i] *= correction;
#pragma unroll
    for (int c = 0; c < kChunk; ++c) {
      const float weight = expf(s[c] - m_new);  // 0 for the repeated slots past n
      l += weight;
      const float* v = p.v_cache + base[c];
#pragma unroll
      for (int i = 0; i < kDims; ++i) acc[i] = fmaf(weight, __ldg(v + 32 * i), acc[i]);
    }
    m = m_new;
  }

  if (gridDim.z == 1) {
    const float inv = l > 0.f ? 1.f / l : 0.f;
    float* o = p.out + (size_t(row) * p.num_heads + head) * kHeadDim + lane;
#pragma unroll
    for (int i = 0; i < kDims; ++i) o[32 * i] = acc[i] * inv;
  } else {
    const size_t idx = (size_t(row) * p.num_heads + head) * gridDim.z + split;
#pragma unroll
    for (int i = 0; i < kDims; ++i) part_acc[idx * kHeadDim + lane + 32 * i] = acc[i];
    if (lane == 0) {
      part_ml[2 * idx] = m;
      part_ml[2 * idx + 1] = l;
    }
  }
}

// One warp per (row, head); lane s holds split s's (m, l). The result is
// sum_s acc_s * exp(m_s - M) / sum_s l_s * exp(m_s - M), M the max over splits
// that saw keys; splits that saw none (l == 0) weigh exactly 0 and their -inf
// never enters a subtraction.
__global__ void __launch_bounds__(kMaxWarps * 32)
    CombineKernel(const float* __restrict__ part_acc, const float* __restrict__ part_ml,
                  const AttentionSeqDesc* __restrict__ seqs, int num_seqs, int skip_queries,
                  int num_heads, int head_dim, int num_splits, float* __restrict__ out) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row = blockIdx.x;
  const int head = blockIdx.y * kMaxWarps + warp;
  if (head >= num_heads) return;
  if (seqs[SeqOfRow(seqs, num_seqs, row)].num_queries >= skip_queries) return;
  const size_t idx0 = (size_t(row) * num_heads + head) * num_splits;
  float m = -INFINITY, l = 0.f;
  if (lane < num_splits) {
    m = part_ml[2 * (idx0 + lane)];
    l = part_ml[2 * (idx0 + lane) + 1];
  }
  const float m_max = WarpMax(l > 0.f ? m : -INFINITY);
  const float w = l > 0.f ? expf(m - m_max) : 0.f;
  const float total = WarpSum(w * l);
  const float inv = total > 0.f ? 1.f / total : 0.f;
  float* o = out + (size_t(row) * num_heads + head) * head_dim;
  for (int d = lane; d < head_dim; d += 32) {  // head_dim % 32 == 0: all lanes iterate alike
    float sum = 0.f;
    for (int s = 0; s < num_splits; ++s) {
      const float ws = __shfl_sync(kFullMask, w, s);
      if (ws != 0.f) sum = fmaf(ws, part_acc[(idx0 + s) * head_dim + d], sum);
    }
    o[d] = sum * inv;
  }
}

using PartialKernel = void (*)(PagedAttentionParams, int, int, int, int, float*, float*);
constexpr PartialKernel kPartialKernels[] = {
    PagedAttentionKernel<1>, PagedAttentionKernel<2>, PagedAttentionKernel<3>,
    PagedAttentionKernel<4>, PagedAttentionKernel<5>, PagedAttentionKernel<6>,
    PagedAttentionKernel<7>, PagedAttentionKernel<8>};

// The tiled kernel (tiled_attention.h): the phases, each followed by a barrier.
template <int D>
struct DeviceExec {
  tiled::ThreadState<D> st;
  template <typename F>
  __host__ __device__ void Phase(F&& f) {
#if defined(__CUDA_ARCH__)
    f(static_cast<int>(threadIdx.x), st);
    __syncthreads();
#endif
  }
};

template <int D>
__global__ void __launch_bounds__(tiled::kThreads) TiledAttentionKernel(tiled::Args a) {
  extern __shared__ float4 smem[];
  DeviceExec<D> exec;
  tiled::RunBlock<D>(exec, a, static_cast<int>(blockIdx.x), static_cast<int>(blockIdx.y),
                     *reinterpret_cast<tiled::Smem<D>*>(smem));
}

template <int D>
cudaError_t LaunchTiled(const PagedAttentionParams& p, int min_queries, cudaStream_t stream) {
  // Above the default 48 KiB of dynamic shared memory: raised once.
  static const cudaError_t raised =
      cudaFuncSetAttribute(TiledAttentionKernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(sizeof(tiled::Smem<D>)));
  if (raised != cudaSuccess) return raised;
  tiled::Args a;
  a.q = p.q;
  a.q_stride = p.q_stride;
  a.k_cache = p.k_cache;
  a.v_cache = p.v_cache;
  a.page_tables = p.page_tables;
  a.seqs = p.seqs;
  a.num_seqs = p.num_seqs;
  a.num_heads = p.num_heads;
  a.num_kv_heads = p.num_kv_heads;
  a.page_tokens = p.page_tokens;
  a.scale = p.scale;
  a.out = p.out;
  a.min_queries = min_queries;
  const dim3 grid(tiled::MaxQueryTiles(p.total_queries, p.num_seqs), p.num_heads);
  TiledAttentionKernel<D><<<grid, tiled::kThreads, sizeof(tiled::Smem<D>), stream>>>(a);
  return cudaGetLastError();
}

// Sequences with at least this many queries take the tiled kernel.
constexpr int kTiledMinQueries = 32;

// The smallest query count that goes to the tiled kernel; INT_MAX: none.
int TiledFrom(const PagedAttentionParams& p) {
  if (!tiled::Supports(p.head_dim)) return INT_MAX;
  const char* mode = std::getenv("KVCAST_CUDA_ATTENTION");
  if (mode != nullptr && std::strcmp(mode, "warp") == 0) return INT_MAX;
  const int from = mode != nullptr && std::strcmp(mode, "tiled") == 0 ? 1 : kTiledMinQueries;
  return p.max_num_queries >= from ? from : INT_MAX;
}

}  // namespace

size_t PagedAttentionWorkspaceBytes(const PagedAttentionParams& p) {
  const int splits = NumSplits(p);
  if (splits == 1 || p.head_dim <= 0) return 0;
  return size_t(p.total_queries) * p.num_heads * splits * (p.head_dim + 2) * sizeof(float);
}

cudaError_t LaunchPagedAttention(const PagedAttentionParams& p, void* workspace,
                                 cudaStream_t stream) {
  if (!PagedAttentionSupports(p.num_heads, p.num_kv_heads, p.head_dim) || p.page_tokens <= 0 ||
      p.total_queries < 0) {
    return cudaErrorInvalidValue;
  }
  if (p.total_queries == 0) return cudaSuccess;
  if (p.num_seqs <= 0) return cudaErrorInvalidValue;
  const int tiled_from = TiledFrom(p);
  if (tiled_from != INT_MAX) {
    const cudaError_t err = p.head_dim == 64 ? LaunchTiled<64>(p, tiled_from, stream)
                                             : LaunchTiled<128>(p, tiled_from, stream);
    // Every sequence tiled: nothing left for the per-row kernel.
    if (err != cudaSuccess || p.min_num_queries >= tiled_from) return err;
  }
  const int splits = NumSplits(p);
  if (splits > 1 && workspace == nullptr) return cudaErrorInvalidValue;

  // Rows x heads per block (see the top of the file): a KV group's heads first, then rows.
  const int group = p.num_heads / p.num_kv_heads;
  const int rows = std::max(1, std::min(kMaxWarps / std::min(group, kMaxWarps), p.max_num_queries));
  const int heads = std::min(p.num_heads, kMaxWarps / rows);
  const dim3 grid((p.total_queries + rows - 1) / rows, (p.num_heads + heads - 1) / heads, splits);
  const int split_tokens = (std::max(p.max_context_len, 0) + splits - 1) / splits;
  float* part_acc = static_cast<float*>(workspace);
  float* part_ml = splits > 1
                       ? part_acc + size_t(p.total_queries) * p.num_heads * splits * p.head_dim
                       : nullptr;
  kPartialKernels[p.head_dim / 32 - 1]<<<grid, 32 * rows * heads, 0, stream>>>(
      p, rows, heads, split_tokens, tiled_from, part_acc, part_ml);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess || splits == 1) return err;

  const dim3 combine_grid(p.total_queries, (p.num_heads + kMaxWarps - 1) / kMaxWarps);
  CombineKernel<<<combine_grid, 32 * std::min(p.num_heads, kMaxWarps), 0, stream>>>(
      part_acc, part_ml, p.seqs, p.num_seqs, tiled_from, p.num_heads, p.head_dim, splits, p.out);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace kvcast
