// Token sampling from one position's logits: repetition penalty, then greedy
// argmax or temperature / top-k / top-p (nucleus) sampling, driven by a
// self-contained seeded PRNG so that a seed reproduces the same tokens on
// every platform and standard library.
//
// Order of operations follows vLLM's sampler, and Hugging Face
// transformers' processors for what they share (RepetitionPenaltyLogits-
// Processor, then TemperatureLogitsWarper, TopKLogitsWarper,
// TopPLogitsWarper):
//   0. logit bias: logit[t] += bias[t] (OpenAI's logit_bias);
//   1. repetition penalty p: for each distinct token t in `history`,
//      logit[t] = logit[t] > 0 ? logit[t] / p : logit[t] * p; then OpenAI's
//      frequency and presence penalties over the output tokens (the end of
//      `history`): logit[t] -= frequency * count(t) + presence * (count(t) > 0);
//   2. temperature == 0 (or top_k == 1): return the argmax, lowest index on
//      ties; no random number is drawn;
//   3. otherwise divide by temperature, keep the top_k largest logits
//      (exactly k; ties at the boundary go to the lower index), then keep the
//      smallest prefix of the remaining tokens, by descending probability,
//      whose probability (renormalized over the top-k set) sums to
//      >= top_p (always at least one token), and draw from the renormalized
//      distribution over what is kept.
//
// Thread safety: a Sampler is NOT safe for concurrent use; it holds PRNG state
// and scratch buffers. Use one Sampler per sequence. Distinct Samplers share
// nothing and may be used from different threads at once.
#ifndef KVCAST_ENGINE_SAMPLING_SAMPLER_H_
#define KVCAST_ENGINE_SAMPLING_SAMPLER_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/token_picker.h"

namespace kvcast {

struct SamplingParams {
  // 0 means greedy decoding; must be finite and >= 0.
  float temperature = 0.f;
  // Keep only the k most likely tokens; 0 means off; must be >= 0. A value
  // >= the vocabulary size is the same as off.
  int top_k = 0;
  // Nucleus threshold in (0, 1]; 1 means off.
  float top_p = 1.f;
  // HF-style repetition penalty; 1 means off; must be finite and > 0.
  float repetition_penalty = 1.f;
  // Seed of the sampler's PRNG; the same seed and inputs give the same tokens.
  uint64_t seed = 0;
  // OpenAI's, over the tokens generated so far; 0 means off; in [-2, 2].
  float frequency_penalty = 0.f;
  float presence_penalty = 0.f;
  // OpenAI's logit_bias: (token, bias in [-100, 100]); tokens outside the
  // vocabulary are ignored (callers refuse them).
  std::vector<std::pair<int32_t, float>> logit_bias;

  // OK if every field is in range; otherwise InvalidArgument whose message
  // names the first offending field and its value.
  absl::Status Validate() const;
};

class Sampler {
 public:
  // `params` should satisfy Validate(); the constructor does not fail, and
  // out-of-range values are coerced (bad temperature -> greedy, bad top_k ->
  // off, bad top_p -> 1, bad repetition_penalty -> 1). Use Create() to get
  // the error instead.
  explicit Sampler(const SamplingParams& params);

  // Validates `params`, returning InvalidArgument if they are out of range.
  static absl::StatusOr<Sampler> Create(const SamplingParams& params);

  Sampler(const Sampler&) = default;
  Sampler& operator=(const Sampler&) = default;
  Sampler(Sampler&&) = default;
  Sampler& operator=(Sampler&&) = default;

  // Picks the next token from `logits` (one float per vocabulary entry).
  // `history` holds the tokens the repetition penalty applies to (prompt and
  // generated so far), its last `output` tokens those generated (the
  // frequency and presence penalties'); ids outside [0, logits.size()) are
  // ignored, and for the repetition penalty a token counts once however
  // often it appears. Neither span is retained.
  //
  // Returns an index in [0, logits.size()), or -1 if `logits` is empty.
  // NaN logits count as -inf. If the largest logit is +inf, or every logit is
  // -inf (or NaN), the result is the greedy argmax (0 in the latter case).
  // One random number is drawn per call exactly when sampling is stochastic
  // (temperature > 0 and top_k != 1), whatever the logits.
  int32_t Sample(absl::Span<const float> logits, absl::Span<const int32_t> history,
                 size_t output = 0);

  // For picking elsewhere (Backend::SampleTokens) what Sample would pick:
  // only without penalties, which need the history, or a logit bias; then
  // Sample(logits, history) == TokenPicker().Pick(logits, NextDraw(row)),
  // and NextDraw draws from the PRNG as Sample does.
  bool PicksWithoutHistory() const {
    return params_.repetition_penalty == 1.f && params_.frequency_penalty == 0.f &&
           params_.presence_penalty == 0.f && params_.logit_bias.empty();
  }
  TokenSampling NextDraw(int row);

  const SamplingParams& params() const { return params_; }

 private:
  // xoshiro256** seeded through splitmix64 (Blackman & Vigna): fixed
  // arithmetic, so draws do not depend on the standard library.
  class Prng {
   public:
    explicit Prng(uint64_t seed);
    uint64_t Next();
    // Uniform in [0, 1) with 53 random bits.
    double NextDouble();

   private:
    uint64_t s_[4];
  };

  bool stochastic() const { return params_.temperature != 0.f && params_.top_k != 1; }

  SamplingParams params_;
  Prng prng_;
  // Scratch reused across calls so steady-state sampling does not allocate.
  TokenPicker picker_;
  std::vector<uint32_t> seen_;    // per-token stamp for history dedup
  uint32_t stamp_ = 0;
  std::vector<uint32_t> counts_;  // per token: occurrences in the output (valid where seen_)
  std::vector<int32_t> touched_;  // the output's distinct tokens
  // Bumps stamp_ (resetting seen_ for `n` tokens when needed): a fresh mark.
  void NewStamp(size_t n);
};

}  // namespace kvcast

#endif  // KVCAST_ENGINE_SAMPLING_SAMPLER_H_
