// Picking one token from one row of logits, given the sampling parameters
// and the PRNG draw: the arithmetic of engine/sampling/Sampler::Sample after
// its repetition penalty, shared by that Sampler, the CPU backend's
// SampleTokens, and (as the reference) the GPU sampler in kernels/cuda.
//
//   1. NaN logits count as -inf;
//   2. temperature == 0 or top_k == 1, or a largest logit of +-inf: the
//      argmax, lowest index on ties (the draw is ignored);
//   3. otherwise weights exp((logit - max) / T), keep the top_k largest
//      (exactly k; ties at the boundary to the lower index; k >= vocab is
//      off), then the smallest prefix by descending probability whose mass
//      reaches top_p times the kept mass (at least one token), and pick the
//      first candidate whose running weight sum exceeds uniform * total.
//
// Out-of-range parameters are coerced as the Sampler's constructor does
// (bad temperature -> greedy, top_k < 0 -> off, top_p outside (0, 1] -> 1).
//
// Thread safety: a TokenPicker holds scratch buffers; use one per thread.
#ifndef KVCAST_KERNELS_TOKEN_PICKER_H_
#define KVCAST_KERNELS_TOKEN_PICKER_H_

#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/types/span.h"

namespace kvcast {

// One row's sampling request.
struct TokenSampling {
  int row = 0;            // the logits row to pick from (Backend::SampleTokens)
  float temperature = 0;  // 0: greedy
  int top_k = 0;          // 0: off
  float top_p = 1;        // 1: off
  double uniform = 0;     // the sampler's PRNG draw, in [0, 1)
  // Null, or the tokens that may be picked (constrained decoding): bit t
  // (allowed[t / 32] >> t % 32) for token t, ceil(vocab / 32) words of host
  // memory; the others count as -inf. Only to a backend whose
  // SamplesWithTokenMasks() is true.
  const uint32_t* allowed = nullptr;
};

class TokenPicker {
 public:
  // Copies `logits` into the picker, NaN as -inf (and, with `allowed`, the
  // tokens it refuses: see TokenSampling::allowed), and returns the copy,
  // which the caller may change (the repetition penalty) before Pick().
  absl::Span<float> Load(absl::Span<const float> logits, const uint32_t* allowed = nullptr);
  // The token for the loaded logits (its `row` is not used); -1 when empty.
  int32_t Pick(const TokenSampling& sampling);
  // Load (with sampling.allowed), then Pick.
  int32_t Pick(absl::Span<const float> logits, const TokenSampling& sampling) {
    Load(logits, sampling.allowed);
    return Pick(sampling);
  }

 private:
  int32_t Argmax() const;
  // Chooses the kept candidates and their unnormalized weights
  // exp((logit - max_logit) / T) into order_/weights_ (order_ empty means
  // token id == position). Returns the number of kept tokens.
  size_t SelectCandidates(float max_logit, float temperature, int top_k, float top_p);
  // Top-p without top-k over the whole vocabulary.
  size_t SelectNucleus(float max_logit, float inv_temperature, float top_p);

  // Bucket of a weight in [0, 1]: its float bits without the sign, the
  // exponent and top kBucketMantissaBits of mantissa, so bucket order is
  // weight order.
  static constexpr int kBucketMantissaBits = 4;
  static constexpr int kNumBuckets = 1 << (8 + kBucketMantissaBits);
  static uint32_t BucketOf(float weight) {
    uint32_t bits;
    std::memcpy(&bits, &weight, sizeof(bits));
    return bits >> (23 - kBucketMantissaBits);
  }

  // Scratch reused across calls so steady-state picking does not allocate.
  std::vector<float> logits_;             // loaded logits, NaN -> -inf
  std::vector<float> weights_;            // weight of each kept candidate, by position
  std::vector<int32_t> order_;            // candidate token ids
  std::vector<float> scratch_weights_;    // nucleus: weight by token id
  std::vector<double> bucket_mass_;       // nucleus: mass per weight bucket
  std::vector<int32_t> boundary_tokens_;  // nucleus: the bucket to sort
};

}  // namespace kvcast

#endif  // KVCAST_KERNELS_TOKEN_PICKER_H_
