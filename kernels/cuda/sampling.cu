#include "kernels/cuda/sampling.h"

#include <climits>

namespace kvcast {
namespace cuda {
namespace {

// One thread block per row. Every block-wide helper below must be reached by
// all threads of the block (they synchronize); the paths taken depend only on
// the row's parameters and on values every thread receives from broadcasts,
// so control flow stays uniform.
constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr unsigned kFull = 0xffffffffu;
// Sampler::BucketOf: float bits >> (23 - kBucketMantissaBits), with 4
// mantissa bits.
constexpr int kBucketShift = 19;
// Sums per pass of the mass search: 16 digit bins and the mass above them.
constexpr int kDescentSums = 17;

struct Shared {
  double sums[kWarps * kDescentSums + kDescentSums];
  unsigned long long u64[kWarps + 1];
  float f[kWarps];
  int i[kWarps + 1];
  unsigned hist[256];
  unsigned long long keys[kSampleTopKCap];
  float weights[kSampleTopKCap];
  unsigned long long prefix;
  int remaining;
  int count;
};

__device__ __forceinline__ float NegInf() { return __uint_as_float(0xff800000u); }

// NaN -> -inf, as the Sampler reads logits.
__device__ __forceinline__ float Sanitize(float v) { return v == v ? v : NegInf(); }

__device__ __forceinline__ bool IsFinite(float v) {
  return (__float_as_uint(v) & 0x7f800000u) != 0x7f800000u;
}

// Float order as unsigned order (for non-NaN v). -0 is first made +0: the
// Sampler compares logits with ==, under which they tie.
__device__ __forceinline__ uint32_t OrderedBits(float v) {
  const uint32_t u = __float_as_uint(v == 0.f ? 0.f : v);
  return (u & 0x80000000u) != 0 ? ~u : (u | 0x80000000u);
}

// Sampler::SelectCandidates' weight_of: float subtraction and product, then
// exp. The CPU calls expf; exp in double rounded once to float is within
// half an ulp of the true value, so the two agree except where expf itself
// rounds the other way (rare, never more than one ulp).
__device__ __forceinline__ float WeightOf(float logit, float max_logit, float inv_temperature) {
  const float shifted = __fsub_rn(logit, max_logit);
  if (shifted == 0.f) return 1.f;  // also keeps 0 * inf (tiny temperature) out
  return __double2float_rn(exp(static_cast<double>(__fmul_rn(shifted, inv_temperature))));
}

__device__ __forceinline__ int BucketOf(float weight) {
  return static_cast<int>(__float_as_uint(weight) >> kBucketShift);
}

// One row. A token's key orders tokens as the Sampler ranks them (higher
// logit first, then lower index): the logit's ordered bits above the
// inverted index, so keys are unique and the rank order is descending key.
struct Row {
  const float* logits;
  const uint32_t* allowed;  // null: every token may be picked
  float* w;  // weight of each token (workspace), where a path needs them all
  int n;
  int index_bits;
  uint32_t index_mask;
  float max_logit;
  float inv_temperature;

  // Token i's logit as the Sampler reads it: NaN, and a token the mask
  // refuses, as -inf.
  __device__ __forceinline__ float Logit(int i) const {
    if (allowed != nullptr && !((allowed[i >> 5] >> (i & 31)) & 1u)) return NegInf();
    return Sanitize(logits[i]);
  }
  __device__ __forceinline__ unsigned long long Key(int i) const {
    return (static_cast<unsigned long long>(OrderedBits(Logit(i))) << index_bits) |
           (index_mask - static_cast<uint32_t>(i));
  }
  __device__ __forceinline__ int IndexOf(unsigned long long key) const {
    return static_cast<int>(index_mask - static_cast<uint32_t>(key & index_mask));
  }
  __device__ __forceinline__ int KeyBits() const { return 32 + index_bits; }
};

// ---------------------------------------------------------------------------
// Block-wide primitives. Fixed reduction trees: results do not depend on
// scheduling, so sampling is deterministic. Each ends with __syncthreads so
// the shared scratch can be reused at once.

// Sums v[0..N) over the block; every thread gets the totals.
template <int N>
__device__ void BlockSum(double* v, Shared& s) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int k = 0; k < N; ++k) {
    // A butterfly leaves the same total in every lane (a + b == b + a).
    for (int off = 16; off > 0; off >>= 1) v[k] += __shfl_xor_sync(kFull, v[k], off);
  }
  if (lane == 0) {
    for (int k = 0; k < N; ++k) s.sums[warp * N + k] = v[k];
  }
  __syncthreads();
  if (threadIdx.x < N) {
    double t = 0.0;
    for (int w = 0; w < kWarps; ++w) t += s.sums[w * N + threadIdx.x];
    s.sums[kWarps * N + threadIdx.x] = t;
  }
  __syncthreads();
  for (int k = 0; k < N; ++k) v[k] = s.sums[kWarps * N + k];
  __syncthreads();
}

__device__ double BlockSum1(double v, Shared& s) {
  BlockSum<1>(&v, s);
  return v;
}

// Exclusive prefix sum over threads in thread order; *total gets the sum.
__device__ double BlockExclusiveScan(double x, double* total, Shared& s) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  double incl = x;
  for (int off = 1; off < 32; off <<= 1) {
    const double t = __shfl_up_sync(kFull, incl, off);
    if (lane >= off) incl += t;
  }
  double excl = __shfl_up_sync(kFull, incl, 1);
  if (lane == 0) excl = 0.0;
  if (lane == 31) s.sums[warp] = incl;
  __syncthreads();
  if (threadIdx.x == 0) {
    double run = 0.0;
    for (int w = 0; w < kWarps; ++w) {
      const double t = s.sums[w];
      s.sums[w] = run;
      run += t;
    }
    s.sums[kWarps] = run;
  }
  __syncthreads();
  excl += s.sums[warp];
  *total = s.sums[kWarps];
  __syncthreads();
  return excl;
}

__device__ unsigned long long BlockMinU64(unsigned long long v, Shared& s) {
  for (int off = 16; off > 0; off >>= 1) {
    const unsigned long long o = __shfl_xor_sync(kFull, v, off);
    v = o < v ? o : v;
  }
  if ((threadIdx.x & 31) == 0) s.u64[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long m = s.u64[0];
    for (int w = 1; w < kWarps; ++w) m = s.u64[w] < m ? s.u64[w] : m;
    s.u64[kWarps] = m;
  }
  __syncthreads();
  const unsigned long long r = s.u64[kWarps];
  __syncthreads();
  return r;
}

// Max (is_max) or min of an int over the block.
__device__ int BlockExtremeInt(int v, bool is_max, Shared& s) {
  for (int off = 16; off > 0; off >>= 1) {
    const int o = __shfl_xor_sync(kFull, v, off);
    v = (is_max ? o > v : o < v) ? o : v;
  }
  if ((threadIdx.x & 31) == 0) s.i[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    int m = s.i[0];
    for (int w = 1; w < kWarps; ++w) m = (is_max ? s.i[w] > m : s.i[w] < m) ? s.i[w] : m;
    s.i[kWarps] = m;
  }
  __syncthreads();
  const int r = s.i[kWarps];
  __syncthreads();
  return r;
}

// (a, ia) before (b, ib): larger value, then lower index.
__device__ __forceinline__ bool Better(float a, int ia, float b, int ib) {
  return a > b || (a == b && ia < ib);
}

// Sampler::Argmax: the largest logit (NaN as -inf), lowest index among
// equals (0 when every logit is -inf).
__device__ int BlockArgmax(const Row& r, Shared& s) {
  float v = NegInf();
  int idx = INT_MAX;
  for (int i = threadIdx.x; i < r.n; i += kThreads) {
    const float x = r.Logit(i);
    if (Better(x, i, v, idx)) {
      v = x;
      idx = i;
    }
  }
  for (int off = 16; off > 0; off >>= 1) {
    const float ov = __shfl_xor_sync(kFull, v, off);
    const int oi = __shfl_xor_sync(kFull, idx, off);
    if (Better(ov, oi, v, idx)) {
      v = ov;
      idx = oi;
    }
  }
  if ((threadIdx.x & 31) == 0) {
    s.f[threadIdx.x >> 5] = v;
    s.i[threadIdx.x >> 5] = idx;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float bv = s.f[0];
    int bi = s.i[0];
    for (int w = 1; w < kWarps; ++w) {
      if (Better(s.f[w], s.i[w], bv, bi)) {
        bv = s.f[w];
        bi = s.i[w];
      }
    }
    s.i[kWarps] = bi;
  }
  __syncthreads();
  const int result = s.i[kWarps];
  __syncthreads();
  return result;
}

// ---------------------------------------------------------------------------
// Selection by rank.

// The key of the k-th ranked token (1 <= k <= n): radix select, 8 bits a
// pass from the top, on integer counts (shared atomics, aggregated per warp
// over lanes with the same digit). Once the selected digit holds a single
// token (the usual case after the logit bits), one min-reduction finds it
// instead of the remaining passes.
__device__ unsigned long long SelectKthKey(const Row& r, int k, Shared& s) {
  const int lane = threadIdx.x & 31;
  unsigned long long prefix = 0, prefix_mask = 0;
  int remaining = k;
  const int top = (r.KeyBits() + 7) / 8 * 8 - 8;
  for (int shift = top; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += kThreads) s.hist[b] = 0;
    __syncthreads();
    // Whole warps iterate together (the match below needs every lane).
    for (int base = 0; base < r.n; base += kThreads) {
      const int i = base + static_cast<int>(threadIdx.x);
      unsigned digit = 256;  // no bin
      if (i < r.n) {
        const unsigned long long key = r.Key(i);
        if ((key & prefix_mask) == prefix) digit = static_cast<unsigned>(key >> shift) & 255u;
      }
      const unsigned peers = __match_any_sync(kFull, digit);
      if (digit < 256 && lane == __ffs(peers) - 1) atomicAdd(&s.hist[digit], __popc(peers));
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      unsigned cum = 0;
      int sel = 0;
      for (int d = 255; d >= 0; --d) {
        const unsigned c = s.hist[d];
        if (cum + c >= static_cast<unsigned>(remaining)) {
          sel = d;
          remaining -= static_cast<int>(cum);
          s.count = static_cast<int>(c);
          break;
        }
        cum += c;
      }
      s.prefix = prefix | (static_cast<unsigned long long>(sel) << shift);
      s.remaining = remaining;
    }
    __syncthreads();
    prefix = s.prefix;
    remaining = s.remaining;
    prefix_mask |= 0xffull << shift;
    const bool unique = s.count == 1;
    __syncthreads();  // s.count is read before anyone writes it again
    if (unique && shift > 0) {
      unsigned long long m = ~0ull;
      for (int i = threadIdx.x; i < r.n; i += kThreads) {
        const unsigned long long key = r.Key(i);
        if ((key & prefix_mask) == prefix) m = key < m ? key : m;
      }
      return BlockMinU64(m, s);
    }
  }
  return prefix;
}

// A set of tokens for the mass searches: key >= key_lo and, for bucket >= 0,
// weight bucket == bucket.
struct TokenSet {
  unsigned long long key_lo;
  int bucket;
  __device__ __forceinline__ bool Has(unsigned long long key, float w) const {
    return key >= key_lo && (bucket < 0 || BucketOf(w) == bucket);
  }
};

// Mass of the set.
__device__ double SetMass(const Row& r, const TokenSet& set, Shared& s) {
  double m = 0.0;
  for (int i = threadIdx.x; i < r.n; i += kThreads) {
    const float w = r.w[i];
    if (set.Has(r.Key(i), w)) m += w;
  }
  return BlockSum1(m, s);
}

// The smallest key >= threshold in the set (of a positive weight if
// positive_only); ~0 if none.
__device__ unsigned long long MinKey(const Row& r, const TokenSet& set,
                                     unsigned long long threshold, bool positive_only,
                                     Shared& s) {
  unsigned long long m = ~0ull;
  for (int i = threadIdx.x; i < r.n; i += kThreads) {
    const float w = r.w[i];
    const unsigned long long key = r.Key(i);
    if (set.Has(key, w) && key >= threshold && (!positive_only || w > 0.f)) m = key < m ? key : m;
  }
  return BlockMinU64(m, s);
}

// Walking the set in rank order with running = start + mass so far, the
// first token where running >= target (or > target if strict): found as the
// largest threshold T with start + mass(key >= T) meeting the test, 4 key
// bits a pass (16 bins and the mass above them, summed over the block).
// Returns that token's key, or ~0 if even the whole set falls short.
__device__ unsigned long long RankCrossing(const Row& r, const TokenSet& set, double start,
                                           double target, bool strict, Shared& s) {
  unsigned long long prefix = 0, prefix_mask = 0;
  const int top = (r.KeyBits() + 3) / 4 * 4 - 4;
  for (int shift = top; shift >= 0; shift -= 4) {
    double acc[kDescentSums];
    for (int k = 0; k < kDescentSums; ++k) acc[k] = 0.0;
    for (int i = threadIdx.x; i < r.n; i += kThreads) {
      const float w = r.w[i];
      const unsigned long long key = r.Key(i);
      if (!set.Has(key, w)) continue;
      if ((key & prefix_mask) == prefix) {
        acc[(key >> shift) & 15] += w;
      } else if (key > prefix) {
        acc[16] += w;
      }
    }
    BlockSum<kDescentSums>(acc, s);  // every thread gets the same sums
    double cum = acc[16];
    int sel = -1;
    for (int d = 15; d >= 0; --d) {
      cum += acc[d];
      const double m = start + cum;
      if (strict ? m > target : m >= target) {
        sel = d;
        break;
      }
    }
    if (sel < 0) {
      if (shift == top) return ~0ull;
      sel = 0;  // grouping rounded the previous pass's crossing away: stay
    }
    prefix |= static_cast<unsigned long long>(sel) << shift;
    prefix_mask |= 0xfull << shift;
  }
  // The crossing token is the lowest-ranked one at or above the threshold.
  return MinKey(r, set, prefix, false, s);
}

// ---------------------------------------------------------------------------
// Index-order draws: each thread takes a contiguous chunk, sums it left to
// right, and a block scan gives each chunk the running sum before it.

struct Chunk {
  int begin, end;
  double sum;     // of the chunk's candidates
  double before;  // of all earlier chunks
};

// Candidates: every token (above_bucket < 0) or those whose weight bucket
// is above `above_bucket`. *total gets their mass.
__device__ Chunk ScanChunks(const Row& r, int above_bucket, double* total, Shared& s) {
  const int per = (r.n + kThreads - 1) / kThreads;
  Chunk c;
  c.begin = min(r.n, static_cast<int>(threadIdx.x) * per);
  c.end = min(r.n, c.begin + per);
  c.sum = 0.0;
  for (int i = c.begin; i < c.end; ++i) {
    const float w = r.w[i];
    if (above_bucket < 0 || BucketOf(w) > above_bucket) c.sum += w;
  }
  c.before = BlockExclusiveScan(c.sum, total, s);
  return c;
}

// The first candidate (by index) with a positive weight where running >
// target, running = before + the chunk's sum so far; INT_MAX if none. A
// chunk holds the crossing iff before + sum > target (zeros add nothing).
__device__ int WalkChunks(const Row& r, int above_bucket, const Chunk& c, double target,
                          Shared& s) {
  int found = INT_MAX;
  if (c.before + c.sum > target) {
    double part = 0.0;
    for (int i = c.begin; i < c.end; ++i) {
      const float w = r.w[i];
      if (!(w > 0.f) || (above_bucket >= 0 && BucketOf(w) <= above_bucket)) continue;
      part += w;
      if (c.before + part > target) {
        found = i;
        break;
      }
    }
  }
  return BlockExtremeInt(found, false, s);
}

// The last candidate (by index) with a positive weight; -1 if none.
__device__ int LastPositive(const Row& r, int above_bucket, Shared& s) {
  int last = -1;
  for (int i = threadIdx.x; i < r.n; i += kThreads) {
    const float w = r.w[i];
    if (w > 0.f && (above_bucket < 0 || BucketOf(w) > above_bucket)) last = i;
  }
  return BlockExtremeInt(last, true, s);
}

// Every token a candidate, in index order (no top-k, no top-p; or the
// nucleus never reached): Sampler::Sample's draw loop.
__device__ int DrawAllByIndex(const Row& r, double uniform, Shared& s) {
  double total;
  const Chunk c = ScanChunks(r, -1, &total, s);
  const double target = __dmul_rn(uniform, total);
  const int found = WalkChunks(r, -1, c, target, s);
  if (found != INT_MAX) return found;
  const int last = LastPositive(r, -1, s);
  return last >= 0 ? last : 0;
}

// ---------------------------------------------------------------------------
// The paths.

// top_k in [2, kSampleTopKCap]: the k best keys, sorted in shared memory,
// then the Sampler's own loops on one thread, in its order and with its sums.
__device__ void SampleSmallTopK(const Row& r, int k, float top_p, double uniform, Shared& s,
                                int32_t* token) {
  const unsigned long long kth = SelectKthKey(r, k, s);
  const int lane = threadIdx.x & 31;
  if (threadIdx.x == 0) s.count = 0;
  __syncthreads();
  for (int base = 0; base < r.n; base += kThreads) {
    const int i = base + static_cast<int>(threadIdx.x);
    unsigned long long key = 0;
    bool take = false;
    if (i < r.n) {
      key = r.Key(i);
      take = key >= kth;
    }
    const unsigned ballot = __ballot_sync(kFull, take);
    if (ballot != 0) {
      int first = 0;
      if (lane == 0) first = atomicAdd(&s.count, __popc(ballot));
      first = __shfl_sync(kFull, first, 0);
      if (take) s.keys[first + __popc(ballot & ((1u << lane) - 1u))] = key;
    }
  }
  // Exactly k keys; pad to a power of two with 0, below every real key.
  int n2 = 2;
  while (n2 < k) n2 <<= 1;
  __syncthreads();
  for (int i = k + static_cast<int>(threadIdx.x); i < n2; i += kThreads) s.keys[i] = 0;
  __syncthreads();
  // Bitonic sort, descending.
  for (int size = 2; size <= n2; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int p = threadIdx.x; p < n2 / 2; p += kThreads) {
        const int lo = 2 * p - (p & (stride - 1)), hi = lo + stride;
        const unsigned long long a = s.keys[lo], b = s.keys[hi];
        const bool descending = (lo & size) == 0;
        if (descending ? a < b : a > b) {
          s.keys[lo] = b;
          s.keys[hi] = a;
        }
      }
      __syncthreads();
    }
  }
  for (int pos = threadIdx.x; pos < k; pos += kThreads) {
    const int idx = r.IndexOf(s.keys[pos]);
    s.weights[pos] = WeightOf(r.Logit(idx), r.max_logit, r.inv_temperature);
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  // Sampler::SelectCandidates (top-k branch), then Sampler::Sample's draw.
  double mass = 0.0;
  for (int pos = 0; pos < k; ++pos) mass += s.weights[pos];
  int kept = k;
  if (top_p < 1.f) {
    const double nucleus_mass = __dmul_rn(static_cast<double>(top_p), mass);
    double cumulative = 0.0;
    for (int pos = 0; pos < k; ++pos) {
      cumulative += s.weights[pos];
      if (cumulative >= nucleus_mass) {
        kept = pos + 1;
        break;
      }
    }
  }
  double total = 0.0;
  for (int pos = 0; pos < kept; ++pos) total += s.weights[pos];
  const double target = __dmul_rn(uniform, total);
  double running = 0.0;
  int last_positive = 0;
  for (int pos = 0; pos < kept; ++pos) {
    const float w = s.weights[pos];
    if (w <= 0.f) continue;
    last_positive = pos;
    running += w;
    if (running > target) {
      *token = r.IndexOf(s.keys[pos]);
      return;
    }
  }
  *token = r.IndexOf(s.keys[last_positive]);
}

// top_k above kSampleTopKCap: the same set, cut and draw in rank order, by
// threshold searches instead of a sort.
__device__ int SampleLargeTopK(const Row& r, int k, float top_p, double uniform, Shared& s) {
  const TokenSet top_k_set{SelectKthKey(r, k, s), -1};
  TokenSet kept = top_k_set;
  if (top_p < 1.f) {
    const double mass = SetMass(r, top_k_set, s);
    const double nucleus_mass = __dmul_rn(static_cast<double>(top_p), mass);
    const unsigned long long last = RankCrossing(r, top_k_set, 0.0, nucleus_mass, false, s);
    if (last != ~0ull) kept.key_lo = last;  // else rounding: keep all k
  }
  const double total = SetMass(r, kept, s);
  const double target = __dmul_rn(uniform, total);
  unsigned long long key = RankCrossing(r, kept, 0.0, target, true, s);
  if (key == ~0ull) key = MinKey(r, kept, 0, true, s);  // the last positive weight
  return r.IndexOf(key);
}

// top-p without top-k: Sampler::SelectNucleus. The kept set is the smallest
// rank prefix whose mass reaches top_p * mass; its last token's weight
// bucket B is the boundary: tokens of higher buckets are drawn first, in
// index order, then the kept tokens of bucket B in rank order.
__device__ int SampleNucleus(const Row& r, float top_p, double uniform, Shared& s) {
  const TokenSet all{0, -1};
  const double mass = SetMass(r, all, s);
  const double nucleus_mass = __dmul_rn(static_cast<double>(top_p), mass);
  const unsigned long long last = RankCrossing(r, all, 0.0, nucleus_mass, false, s);
  if (last == ~0ull) return DrawAllByIndex(r, uniform, s);  // boundary < 0: keep all
  const int boundary = BucketOf(r.w[r.IndexOf(last)]);
  const TokenSet boundary_part{last, boundary};
  double above_mass;
  const Chunk c = ScanChunks(r, boundary, &above_mass, s);
  const double part_mass = SetMass(r, boundary_part, s);
  const double total = above_mass + part_mass;
  const double target = __dmul_rn(uniform, total);
  const int found = WalkChunks(r, boundary, c, target, s);
  if (found != INT_MAX) return found;
  unsigned long long key = RankCrossing(r, boundary_part, above_mass, target, true, s);
  if (key == ~0ull) key = MinKey(r, boundary_part, 0, true, s);
  if (key != ~0ull) return r.IndexOf(key);
  const int above_last = LastPositive(r, boundary, s);
  return above_last >= 0 ? above_last : r.IndexOf(last);
}

__global__ void __launch_bounds__(kThreads)
    SampleKernel(const float* __restrict__ logits, int vocab, const SampleParams* __restrict__ params,
                 float* __restrict__ workspace, int32_t* __restrict__ tokens) {
  __shared__ Shared s;
  const int row = blockIdx.x;  // the request; it reads logits row p.row
  if (vocab <= 0) {
    if (threadIdx.x == 0) tokens[row] = -1;
    return;
  }
  const SampleParams p = params[row];
  Row r;
  r.logits = logits + static_cast<size_t>(p.row) * vocab;
  r.allowed = p.allowed;
  r.w = workspace + static_cast<size_t>(row) * vocab;
  r.n = vocab;
  r.index_bits = vocab > 1 ? 32 - __clz(vocab - 1) : 1;
  r.index_mask = (1u << r.index_bits) - 1u;

  // The Sampler constructor's coercions.
  const float temperature = IsFinite(p.temperature) && p.temperature >= 0.f ? p.temperature : 0.f;
  const int top_k = p.top_k < 0 ? 0 : p.top_k;
  const float top_p = p.top_p > 0.f && p.top_p <= 1.f ? p.top_p : 1.f;

  const int argmax = BlockArgmax(r, s);
  r.max_logit = r.Logit(argmax);
  if (temperature == 0.f || top_k == 1 || !IsFinite(r.max_logit)) {
    if (threadIdx.x == 0) tokens[row] = argmax;
    return;
  }
  r.inv_temperature = __fdiv_rn(1.f, temperature);
  const bool use_top_k = top_k > 0 && top_k < vocab;
  const bool use_top_p = top_p < 1.f;

  if (use_top_k && top_k <= kSampleTopKCap) {
    SampleSmallTopK(r, top_k, top_p, p.uniform, s, tokens + row);
    return;
  }
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    r.w[i] = WeightOf(r.Logit(i), r.max_logit, r.inv_temperature);
  }
  __syncthreads();  // makes the block's global writes visible to the block
  int token;
  if (use_top_k) {
    token = SampleLargeTopK(r, top_k, top_p, p.uniform, s);
  } else if (use_top_p) {
    token = SampleNucleus(r, top_p, p.uniform, s);
  } else {
    token = DrawAllByIndex(r, p.uniform, s);
  }
  if (threadIdx.x == 0) tokens[row] = token;
}

}  // namespace

size_t SampleWorkspaceBytes(int num, int vocab) {
  if (num <= 0 || vocab <= 0) return 0;
  return static_cast<size_t>(num) * static_cast<size_t>(vocab) * sizeof(float);
}

cudaError_t LaunchSample(const float* logits, int vocab, const SampleParams* params, int num,
                         void* workspace, int32_t* tokens, cudaStream_t stream) {
  if (num < 0 || vocab < 0) return cudaErrorInvalidValue;
  if (num == 0) return cudaSuccess;
  SampleKernel<<<num, kThreads, 0, stream>>>(logits, vocab, params,
                                              static_cast<float*>(workspace), tokens);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace kvcast
