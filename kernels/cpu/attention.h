// Paged attention on the CPU: the kernel behind CpuBackend::PagedAttention
// (see AttentionSeq / AttentionShape in kernels/backend.h for the layout).
//
// Two kernels. Prefill (a sequence with >= 16 query rows) takes the tiled
// kernel (tiled_attention.h): blocks of query rows x the GQA group's heads
// against blocks of keys, two small matrix products per key block with an
// online softmax, AVX-512 or AVX2. Decode rows take the row kernel below.
// KVCAST_CPU_ATTENTION=rows (or =tiled) in the environment sends every
// sequence to one kernel (A/B measurements); `kernel` does the same per call.
// =tiled also makes a model whose projections are all in the Q8 / GGUF
// block kernels batch-invariant: a token's logits the same bits in any pass
// (engine/batch_invariance_test.cc), at a decode cost (docs/openai-api.md).
//
// Row kernel: each (sequence, KV head) pair is one task; tiled: each
// (sequence, KV head, tile of rows). A batch with fewer than 2 row tasks
// per thread splits each decode row of >= 1024 keys over keys (parts of at
// least 512, merged after by their softmax sums: flash-decoding's split-K),
// so one long sequence keeps every core busy. Tasks run on an OpenMP team
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

enum class CpuAttentionKernel { kAuto, kRows, kTiled };
// KVCAST_CPU_ATTENTION's choice (kAuto when unset or unknown), read once.
CpuAttentionKernel CpuAttentionKernelFromEnv();

// K/V as s.storage keeps them: float32, or fp16 bits (KvStorage::kF16,
// widened with F16C). kTiled falls back to rows where the tiled kernel
// cannot run (head_dim, CPU).
void CpuPagedAttention(const float* q, int q_stride, const AttentionSeq* seqs, int num_seqs,
                       const AttentionShape& s, const void* k_cache, const void* v_cache,
                       float* out, bool parallel = true,
                       CpuAttentionKernel kernel = CpuAttentionKernel::kAuto);

// Whether the vectorized path runs on this CPU (for tests and benchmarks).
bool CpuAttentionVectorized();
// Tests: the tiled kernel runs its AVX2 code even on an AVX-512 CPU.
void CpuAttentionAvx2OnlyForTesting(bool on);

}  // namespace kvcast

#endif  // KVCAST_KERNELS_CPU_ATTENTION_H_
