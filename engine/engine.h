// Engine: continuous-batching generation on one model replica.
//
// Requests are submitted as token ids; each Step() admits waiting requests
// (reusing cached prefix chunks), runs one forward pass that mixes prompt
// chunks (chunked prefill, up to `max_batch_tokens` tokens) with one decode
// token for every running sequence, samples, and reports per-sequence
// events. Full chunks of every sequence enter the prefix cache as soon as
// their KV is computed, and a request whose prompt shares chunks that a
// running sequence is still computing waits for them instead of computing
// them again. When pages run out, the youngest running sequence is
// preempted (its pages freed, recomputed later); a request that cannot fit
// even alone ends with kError. Every finished, cancelled or failed sequence
// releases its pages exactly once.
//
// Disaggregated serving: a prefill worker reports each prompt chunk's KV as
// soon as it is computed (GenerationParams::on_prompt_chunk); a decode worker
// submits a request with KV computed elsewhere (Submit with PrefilledKv) and
// continues from it.
//
// Thread safety: Submit() and Cancel() may be called from any thread; Step()
// from one thread at a time (the compute thread).
#ifndef KVCAST_ENGINE_ENGINE_H_
#define KVCAST_ENGINE_ENGINE_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "engine/grammar/grammar_cache.h"
#include "engine/grammar/token_trie.h"
#include "engine/kv/kv_page_pool.h"
#include "engine/kv/prefix_cache.h"
#include "engine/model/checkpoint.h"
#include "engine/sampling/logprobs.h"
#include "engine/sampling/sampler.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/transformer.h"
#include "kernels/backend.h"

namespace kvcast {

struct EngineOptions {
  int page_tokens = 16;
  int chunk_tokens = 128;      // prefix-cache and transfer unit; multiple of page_tokens
  int64_t kv_cache_bytes = 256ll << 20;
  double kv_cache_fraction = 0;  // > 0: this share of the backend's free memory after the
                                 // weights, instead of kv_cache_bytes
  int num_pages = 0;           // overrides both when > 0
  int max_batch_tokens = 256;  // tokens per forward pass
  int max_running = 64;        // sequences decoded together
  bool prefix_caching = true;  // false: no chunk is cached or reused (for A/B measurements)
  // KV kept as fp16 values (KvLayout::storage: fp16 pages, 2 bytes a
  // value, where the backend has them, else float32 rounded to fp16). The
  // workers set it (--kv_cache_precision fp16, the default): half the KV
  // memory and attention traffic, and a prompt's KV is the same bits whether
  // it was computed here, landed over the fp16 track or promoted from the
  // fp16 host tier, so a greedy request gives the same tokens on every
  // route. Off: float32 KV (HF's float32 reference).
  bool kv_fp16_values = false;
  // Tier 1 (engine/kv/host_tier.h): chunks evicted from the pool are kept in
  // host memory in this format, within this budget (0: no tier).
  int64_t host_tier_bytes = 0;
  KvFormat host_tier_format = KvFormat::kFp16;
  HostKvTier::Policy host_tier_policy = HostKvTier::Policy::kLru;
  // Tier 2 (engine/kv/disk_tier.h), below the host tier (which it needs):
  // chunks the host tier pushes out are written to files in this directory
  // within this budget, and found again by an engine started on it later
  // (empty / 0: no tier). At destruction every cached chunk is written
  // there.
  std::string disk_tier_dir;
  int64_t disk_tier_bytes = 0;
};

struct GenerationParams {
  SamplingParams sampling;
  int max_tokens = 64;
  std::vector<int32_t> stop_tokens;  // in addition to the model's EOS
  bool ignore_eos = false;
  // EOS and stop tokens are masked out of sampling until this many tokens
  // were generated.
  int min_tokens = 0;
  // The prefix-cache domain: chunk hashes are chained from
  // prefix_seed(tenant), so a sequence reuses only chunks of its own tenant
  // ("" = the default domain).
  std::string tenant;
  // Called on the compute thread (inside Step) when a prompt chunk's KV is
  // complete: chunk c covers prompt tokens [c*chunk_tokens,
  // min((c+1)*chunk_tokens, prompt_len)). Called once per chunk, in order, for
  // every prompt chunk including those taken from the prefix cache (at
  // admission) and the last, partial one; chunks reported before a preemption
  // are not reported again. `pages`: a reference on each of the chunk's pages
  // (ceil(tokens in chunk / page_tokens)), the callee's to keep or drop.
  std::function<void(int chunk, KvPages pages)> on_prompt_chunk;
  // Report each generated token's log-probability on its event, and those
  // of the `top_logprobs` (0..kMaxTopLogprobs) most likely tokens at that
  // step (sampling/logprobs.h). Such a sequence's token is picked from a
  // host copy of its logits row.
  bool logprobs = false;
  int top_logprobs = 0;
  // Also each prompt token's log-probability after the tokens before it
  // (and those of the `top_logprobs` most likely tokens there), for every
  // prompt token but the first, on the event of the first generated token
  // (SequenceEvent::prompt_logprobs): echo with logprobs, lm-eval's
  // loglikelihood. Computed from the prompt pass's logits of every position
  // (no second pass; such positions at most chunk_tokens a pass, which
  // bounds the logits buffer); no cached chunk is reused (its logits were
  // never made). InvalidArgument with PrefilledKv.
  bool prompt_logprobs = false;
  // Constrained decoding: each step samples only among the tokens the
  // format's grammar allows next (EOS and stop tokens once the output is
  // complete), and a sequence whose output admits no more bytes finishes
  // with kStop. Needs the model's tokenizer.
  ResponseFormat response_format;
};

// KV of a prompt prefix computed elsewhere (a prefill worker), in pages of
// this engine's pool.
struct PrefilledKv {
  KvPages pages;               // of the engine's pool, handed to the engine
  int tokens = 0;              // prompt tokens [0, tokens) whose K/V are in `pages`
  int32_t next_token = -1;     // when tokens == prompt size: the first generated
                               // token, sampled elsewhere; -1 otherwise
};

enum class FinishReason { kNone, kLength, kStop, kCancelled, kError };
const char* FinishReasonName(FinishReason r);

struct SequenceEvent {
  uint64_t id = 0;
  int32_t token = -1;  // -1 when the event only reports a finish
  FinishReason finish = FinishReason::kNone;
  // kError: why, with a code a caller can act on (OutOfRange: the page
  // pool cannot hold the sequence even alone, so no retry on an engine of
  // its size helps; the backend's own code when a pass failed). OK
  // otherwise.
  absl::Status status;
  int prompt_tokens = 0;
  int cached_tokens = 0;  // prompt tokens whose KV came from the prefix cache
                          // (or, for a PrefilledKv request, the prefilled ones)
  int generated_tokens = 0;
  // With GenerationParams::logprobs, on every event carrying a token.
  std::optional<TokenLogprob> logprob;
  // With GenerationParams::prompt_logprobs, on the first generated token's
  // event: prompt tokens 1.. (the first has none), in order.
  std::vector<TokenLogprob> prompt_logprobs;
};

class Engine {
 public:
  // Opens the checkpoint (and tokenizer, when the directory has one) in
  // `model_dir` and sizes the page pool. Errors name the file at fault.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(
      const std::string& model_dir, const EngineOptions& options,
      std::unique_ptr<Backend> backend);
  ~Engine();

  // Brings the prompt's reusable prefix up from the host / disk tier into
  // the page pool now (no-op without tiers). Call it on the request's own
  // thread before Submit: the copy then overlaps the compute thread's work
  // instead of delaying the request's admission.
  void Prefetch(const std::vector<int32_t>& prompt, std::string_view tenant = "");

  // Queues a request. InvalidArgument for an empty prompt, out-of-vocabulary
  // ids, bad sampling parameters or a prompt the model cannot hold.
  absl::StatusOr<uint64_t> Submit(std::vector<int32_t> prompt,
                                  const GenerationParams& params);
  // Queues a request whose prompt prefix [0, kv.tokens) already has its KV in
  // kv.pages (ceil(kv.tokens / page_tokens) pages). With kv.tokens == prompt
  // size, kv.next_token is the first generated token: the sequence starts in
  // decode, its events report only the tokens after next_token, and
  // generated_tokens counts next_token too; InvalidArgument when nothing is
  // left to generate (next_token stops it, or max_tokens <= 1). Otherwise
  // next_token must be -1 and the engine computes the rest of the prompt.
  // At admission the full chunks of kv.pages enter the prefix cache. On any
  // error the pages are released.
  absl::StatusOr<uint64_t> Submit(std::vector<int32_t> prompt,
                                  const GenerationParams& params, PrefilledKv kv);
  // Ends a request at the next Step() with kCancelled; unknown ids are ignored.
  void Cancel(uint64_t id);
  bool HasWork() const;
  // Load, for reports (thread-safe): queued and running sequences, and the
  // prompt tokens of queued sequences whose KV is neither computed nor cached.
  int num_waiting() const;
  int num_running() const;
  int64_t waiting_prompt_tokens() const;
  absl::StatusOr<std::vector<SequenceEvent>> Step();

  const ModelConfig& config() const { return model_->config(); }
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }  // may be null
  Transformer& model() { return *model_; }
  KvPagePool& pool() { return *pool_; }
  PrefixCache& prefix_cache() { return *prefix_cache_; }
  HostKvTier* host_tier() { return host_tier_.get(); }  // null without one
  DiskKvTier* disk_tier() { return disk_tier_.get(); }  // null without one
  const Hash128& prefix_seed() const { return prefix_seed_; }
  // The chain seed of a tenant's chunks (PrefixSeed(fingerprint, tenant));
  // prefix_seed() for "".
  Hash128 prefix_seed(std::string_view tenant) const;
  const EngineOptions& options() const { return options_; }
  Backend* backend() const { return backend_.get(); }
  // Sequences whose pages were taken back to make room (compute thread).
  int64_t preemptions() const { return preemptions_; }
  // Work done since creation, readable from any thread: sequences
  // submitted, prompt tokens computed (not reused from a cache or landed),
  // tokens generated, and the forward passes (steps) that did it: their
  // count, the sequences in them summed, and their seconds.
  struct Totals {
    int64_t sequences = 0, prompt_tokens_computed = 0, tokens_generated = 0;
    int64_t steps = 0, step_sequences = 0;
    double step_seconds = 0;
  };
  Totals totals() const {
    return {sequences_total_.load(std::memory_order_relaxed),
            prompt_tokens_total_.load(std::memory_order_relaxed),
            generated_total_.load(std::memory_order_relaxed),
            steps_total_.load(std::memory_order_relaxed),
            step_sequences_total_.load(std::memory_order_relaxed),
            step_seconds_total_.load(std::memory_order_relaxed)};
  }
  // Time spent computing grammars' token masks (constrained decoding; and
  // applying them, for rows picked from a host copy), in seconds since
  // creation (compute thread).
  double grammar_seconds() const { return grammar_seconds_; }

 private:
  struct Sequence;
  Engine(const EngineOptions& options, std::unique_ptr<Backend> backend);
  void Admit(Sequence* seq);
  // Whether waiting `w` shares prompt chunks (the same chain: tenant and
  // tokens) with a running sequence that has not computed them all yet.
  // Then it waits, and takes them from the prefix cache once they are in:
  // a prompt chunk is computed once, however many requests carry it at
  // once (n > 1 choices, a burst of one system prompt). Step's thread,
  // under mu_.
  bool FollowsAPrefill(const Sequence& w) const;
  absl::Status EnsurePages(Sequence* seq, int tokens);
  // Why a sequence alone cannot get pages for `tokens` more: OutOfRange when
  // the pool (less its pinned pages) is too small for it, else
  // ResourceExhausted (pages held outside the sequences: retryable).
  absl::Status ShortOfPages(const Sequence& seq, int tokens, const absl::Status& allocation) const;
  void Release(Sequence* seq);
  void PublishChunks(Sequence* seq);
  void ReportChunks(Sequence* seq);
  absl::Status CheckRequest(const std::vector<int32_t>& prompt,
                            const GenerationParams& params, const PrefilledKv& kv) const;
  // Picks the next token of every sequence of `batch` whose prompt this
  // pass finished (picked[i] = -1 for the others) from the pass's logits in
  // backend memory: on the backend where no history is needed (only the
  // tokens come to the host), else from a host copy of the row. Waits for the
  // pass; its errors are returned.
  // With logprobs, (*logprobs)[i] is the picked token's (others: empty).
  absl::Status PickTokens(const std::vector<Sequence*>& batch, const std::vector<int>& counts,
                          const float* logits, std::vector<int32_t>* picked,
                          std::vector<std::optional<TokenLogprob>>* logprobs);
  // Of the prompt tokens after the positions the pass computed for batch
  // item i (of `seq`), those still due: from row i of `logits` and, with
  // every_logit, the rows from `other_rows` on (Transformer::ForwardLogits).
  void AddPromptLogprobs(Sequence* seq, const ForwardItem& item, const float* logits, size_t i,
                         size_t other_rows);
  // Appends `token` to `seq`; true when the sequence is finished.
  bool Accept(Sequence* seq, int32_t token, SequenceEvent* event);
  // Constrained decoding (compute thread): sets in `mask` (MaskWords()
  // words, zeroed) the tokens `seq`'s grammar allows next, first making its
  // matcher (replaying the output generated so far) when it has none.
  absl::Status GrammarMask(Sequence* seq, absl::Span<uint32_t> mask);
  // Words of a token mask (TokenSampling::allowed) over the model's and the
  // tokenizer's ids; makes the vocabulary's trie at first use.
  size_t MaskWords();

  const EngineOptions options_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Checkpoint> checkpoint_;
  std::unique_ptr<Transformer> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<KvPagePool> pool_;
  std::unique_ptr<DiskKvTier> disk_tier_;  // the tiers before the cache, which uses them
  std::unique_ptr<HostKvTier> host_tier_;
  std::unique_ptr<PrefixCache> prefix_cache_;
  Hash128 prefix_seed_;
  std::vector<std::unique_ptr<Sequence>> running_;  // compute thread only
  int64_t preemptions_ = 0;                          // compute thread only
  std::atomic<int64_t> sequences_total_{0}, prompt_tokens_total_{0}, generated_total_{0},
      steps_total_{0}, step_sequences_total_{0};
  std::atomic<double> step_seconds_total_{0};
  std::vector<float> host_logits_;                   // compute thread only
  std::vector<float> raw_logits_;                    // compute thread only: for logprobs
  GrammarCache grammars_;                            // Get: any thread; automata: compute thread
  std::unique_ptr<grammar::TokenTrie> trie_;         // compute thread only: made at first use
  std::vector<uint32_t> grammar_mask_;               // compute thread only: a host-picked row's
  std::vector<uint32_t> batch_masks_;                // compute thread only: backend-picked rows
  double grammar_seconds_ = 0;                       // compute thread only

  mutable absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::deque<std::unique_ptr<Sequence>> waiting_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<uint64_t> cancelled_ ABSL_GUARDED_BY(mu_);
  int running_count_ ABSL_GUARDED_BY(mu_) = 0;  // running_.size(), for HasWork()
};

}  // namespace kvcast

#endif  // KVCAST_ENGINE_ENGINE_H_
