// Transformer: the Llama-family forward pass (Llama, Mistral, Qwen2) over a
// paged KV cache, on any Backend.
//
// One Forward() call runs a batch of *items*; each item appends some tokens
// to one sequence: a chunk of a prompt (chunked prefill) or one generated
// token (decode), so prefill chunks and decode steps of many sequences of
// different lengths share one pass and one GEMM per projection.
//
// Thread safety: Load() and the accessors are thread-safe; Forward() must be
// called from one thread at a time (it drives the backend).
#ifndef KVCAST_ENGINE_TRANSFORMER_H_
#define KVCAST_ENGINE_TRANSFORMER_H_

#include <atomic>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/kv/kv_page_pool.h"
#include "engine/kv/prefix_hash.h"
#include "engine/model/checkpoint.h"
#include "engine/model/model_config.h"
#include "kernels/backend.h"

namespace kvcast {

struct ForwardItem {
  absl::Span<const int32_t> tokens;      // new tokens, at least one
  int start_pos = 0;                     // tokens of this sequence already in KV
  absl::Span<const int32_t> page_table;  // pages covering start_pos + tokens
  // Logits of every token, not only the last (a prompt's log-probabilities):
  // rows for tokens [0, n-1) follow the items' last rows (ForwardLogits).
  bool every_logit = false;
};

class Transformer {
 public:
  // Reads every weight of `checkpoint` into `backend` (borrowed; must outlive
  // the Transformer). Errors name the file and tensor that is missing or
  // mis-shaped.
  static absl::StatusOr<std::unique_ptr<Transformer>> Load(
      const Checkpoint& checkpoint, Backend* backend);
  ~Transformer();

  const ModelConfig& config() const { return config_; }
  // Identifies architecture, shapes, dtypes and weight bytes (XXH3-128).
  const Hash128& fingerprint() const { return fingerprint_; }
  // Bytes the backend holds for the weights (in its compute formats).
  size_t weight_bytes() const { return weight_bytes_; }
  KvLayout kv_layout(int page_tokens) const;
  // Longest sequence the model supports (positions, sliding window).
  int max_sequence_len() const;

  // Runs `items` through the model, writing their K/V into `pool`'s pages.
  // On success `logits` holds, for each item in order, the logits of its last
  // token ([items, vocab]), then for each item with `every_logit`, in order,
  // those of its other tokens in order; or of every token in order ([sum of
  // tokens, vocab]) when `all_logits`. InvalidArgument for token ids outside the vocabulary, empty
  // items, or page tables too short; nothing is written to KV then.
  absl::Status Forward(absl::Span<const ForwardItem> items, KvPagePool* pool,
                       bool all_logits, std::vector<float>* logits);
  // Forward without the copy: the logits stay in backend memory, returned
  // (valid until the next call), and the pass may still be running; ops
  // issued after it see it complete, and Synchronize() (or SampleTokens)
  // reports its errors.
  absl::StatusOr<const float*> ForwardLogits(absl::Span<const ForwardItem> items,
                                             KvPagePool* pool, bool all_logits);

  // Layers issued so far, over all passes (any thread): a liveness signal
  // of the compute that advances within a long pass, not only between them.
  uint64_t layers_run() const { return layers_run_.load(std::memory_order_relaxed); }

 private:
  struct Layer;
  struct Workspace;
  Transformer(const ModelConfig& config, Backend* backend);
  absl::Status LoadWeights(const Checkpoint& checkpoint);
  // Makes the workspace hold a batch of this size (no-op when it does).
  absl::Status Reserve(int tokens, int rows, int items, size_t table_entries);

  const ModelConfig config_;
  Backend* const backend_;
  Hash128 fingerprint_;
  size_t weight_bytes_ = 0;
  std::unique_ptr<DeviceBuffer> inv_freq_;
  Weight embed_, final_norm_, lm_head_;  // lm_head empty when tied
  std::vector<Layer> layers_;
  std::unique_ptr<Workspace> ws_;
  std::atomic<uint64_t> layers_run_{0};
};

// Runs a whole prompt `tokens` (positions 0..) through `model` in chunks of
// `chunk_tokens`, one Forward each (as a prefill worker does), writing its
// K/V into the pages of `page_table`; `logits` ends holding the last token's.
absl::Status PrefillInChunks(Transformer& model, absl::Span<const int32_t> tokens,
                             absl::Span<const int32_t> page_table, int chunk_tokens,
                             KvPagePool* pool, std::vector<float>* logits);

// RoPE inverse frequencies [head_dim / 2] for `config`, Llama-3 scaling
// applied when configured (the formula of HF's _compute_llama3_parameters),
// then divided by config.rope_freq_factors when a GGUF gave them.
std::vector<float> RopeInverseFrequencies(const ModelConfig& config);

}  // namespace kvcast

#endif  // KVCAST_ENGINE_TRANSFORMER_H_
