// Tiled prefill attention on the CPU (internal to attention.cc): a block of
// query rows of one sequence against all the keys they see, as two small
// matrix products per block of keys with an online softmax between them
// (flash-attention's recurrence), instead of one query row at a time.
//
// One call computes query rows [row_begin, row_end) of `seq` for every
// query head of KV head `kv_head`: the rows x the group's heads form the M
// "query lines" of the tile, all of which share each key and value loaded.
// Per block of keys (read from their pages, fp16 widened once per block):
//   S = K_blk . Q^T          [keys x lines], lines vectorized
//   causal mask (only blocks that cross the diagonal), running max m and
//   sum l per line, P = exp(S - m), O^T = O^T * exp(m_old - m) + V_blk^T . P
// and out = O / l. Everything runs across query lines in SIMD registers
// (AVX-512 when the CPU has it, else AVX2+FMA+F16C), so the softmax needs no
// horizontal reductions. Scores use the same vectorized exp as the row
// kernel; results match it to float rounding (sums in another order).
//
// Thread safety: stateless; scratch is per thread.
#ifndef KVCAST_KERNELS_CPU_TILED_ATTENTION_H_
#define KVCAST_KERNELS_CPU_TILED_ATTENTION_H_

#include <cstdint>

#include "kernels/backend.h"

namespace kvcast::cpu_attention {

// AVX2 + FMA + F16C on this CPU (both attention kernels' vector paths).
bool HasAvx2();

// Whether the tiled kernel can run `head_dim` on this CPU (multiple of 8,
// at most 256, AVX2+FMA+F16C or AVX-512).
bool TiledAvailable(int head_dim);
// Query rows per tile for a GQA group of `group` query heads per KV head:
// about 64 query lines per tile.
int TiledRowsPerTile(int group);

// Tests: the AVX2 code even on an AVX-512 CPU.
void TiledAvx2OnlyForTesting(bool on);

// T: float (KvStorage::kF32) or uint16_t (fp16 bits).
template <typename T>
void TiledAttention(const float* q, int q_stride, const AttentionSeq& seq, int kv_head,
                    int row_begin, int row_end, const AttentionShape& s, const T* k_cache,
                    const T* v_cache, float* out);

}  // namespace kvcast::cpu_attention

#endif  // KVCAST_KERNELS_CPU_TILED_ATTENTION_H_
