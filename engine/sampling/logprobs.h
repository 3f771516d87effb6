// Log-probabilities of a generated token, as the OpenAI API reports them
// (`logprobs`, `top_logprobs`): the log-softmax of the pass's logits over
// the whole vocabulary, before any sampling adjustment (temperature, top-k,
// top-p, repetition penalty, min_tokens masks), as vLLM's default
// (raw_logprobs) does. Computed from the logits the pass already made: no
// second pass.
#ifndef KVCAST_ENGINE_SAMPLING_LOGPROBS_H_
#define KVCAST_ENGINE_SAMPLING_LOGPROBS_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/types/span.h"

namespace kvcast {

inline constexpr int kMaxTopLogprobs = 20;  // the OpenAI API's limit

struct TokenLogprob {
  float logprob = 0;  // of the token generated at this step
  // The most likely tokens at this step and theirs, most likely first
  // (ties: the lower id first).
  std::vector<std::pair<int32_t, float>> top;
};

// Of `token` and of the `top` (0..kMaxTopLogprobs) most likely tokens;
// `token` in [0, logits.size()).
TokenLogprob ComputeLogprobs(absl::Span<const float> logits, int32_t token, int top);

}  // namespace kvcast

#endif  // KVCAST_ENGINE_SAMPLING_LOGPROBS_H_
