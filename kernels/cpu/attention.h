// Paged attention on the CPU: the kernel behind CpuBackend::PagedAttention
// (see AttentionSeq / AttentionShape in kernels/backend.h for the layout).
//
// Each (sequence, KV head) pair is one task; tasks run on an OpenMP team
// when `parallel` (a caller whose other threads spin elsewhere, e.g. in
// OpenBLAS, passes false: two spinning pools on few cores starve each other).
// A query row's scores are dot products against the keys read in place
// from their pages (no gather), softmax uses a vectorized exp (relative
// error < 2e-7), and the output accumulates probability-weighted values.
// AVX2+FMA (+F16C for fp16 pages) when the CPU has it and head_dim % 8 ==
// 0, portable loops otherwise. The first query head of each KV group
// prefetches the keys and values 8 tokens ahead. A row's result does not depend on the other rows or sequences
// of the call. Thread safety: stateless; scratch is per thread.
#ifndef KVCAST_KERNELS_CPU_ATTENTION_H_
#define KVCAST_KERNELS_CPU_ATTENTION_H_

#include "kernels/backend.h"

namespace kvcast {

// K/V as s.storage keeps them: float32, or fp16 bits (KvStorage::kF16,
// widened with F16C).
void CpuPagedAttention(const float* q, int q_stride, const AttentionSeq* seqs, int num_seqs,
                       const AttentionShape& s, const void* k_cache, const void* v_cache,
                       float* out, bool parallel = true);

// Whether the vectorized path runs on this CPU (for tests and benchmarks).
bool CpuAttentionVectorized();

}  // namespace kvcast

#endif  // KVCAST_KERNELS_CPU_ATTENTION_H_
