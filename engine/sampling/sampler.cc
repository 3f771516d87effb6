#include "engine/sampling/sampler.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace kvcast {
namespace {

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

// OpenAI's ranges (false for NaN).
bool PenaltyInRange(float v) { return v >= -2.f && v <= 2.f; }
bool BiasInRange(float v) { return v >= -100.f && v <= 100.f; }

}  // namespace

absl::Status SamplingParams::Validate() const {
  if (!std::isfinite(temperature) || temperature < 0.f) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "SamplingParams.temperature must be finite and >= 0, got %g",
        temperature));
  }
  if (top_k < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("SamplingParams.top_k must be >= 0, got %d", top_k));
  }
  if (!(top_p > 0.f && top_p <= 1.f)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "SamplingParams.top_p must be in (0, 1], got %g", top_p));
  }
  if (!std::isfinite(repetition_penalty) || repetition_penalty <= 0.f) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "SamplingParams.repetition_penalty must be finite and > 0, got %g",
        repetition_penalty));
  }
  for (auto [name, v] : {std::pair{"frequency_penalty", frequency_penalty},
                         std::pair{"presence_penalty", presence_penalty}}) {
    if (!PenaltyInRange(v)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("SamplingParams.%s must be in [-2, 2], got %g", name, v));
    }
  }
  for (const auto& [token, bias] : logit_bias) {
    if (!BiasInRange(bias)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "SamplingParams.logit_bias of token %d must be in [-100, 100], got %g", token, bias));
    }
  }
  return absl::OkStatus();
}

Sampler::Prng::Prng(uint64_t seed) {
  uint64_t state = seed;
  for (uint64_t& word : s_) word = SplitMix64(state);
}

uint64_t Sampler::Prng::Next() {
  const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = Rotl(s_[3], 45);
  return result;
}

double Sampler::Prng::NextDouble() {
  return static_cast<double>(Next() >> 11) * 0x1.0p-53;
}

Sampler::Sampler(const SamplingParams& params)
    : params_(params), prng_(params.seed) {
  if (!std::isfinite(params_.temperature) || params_.temperature < 0.f) {
    params_.temperature = 0.f;
  }
  if (params_.top_k < 0) params_.top_k = 0;
  if (!(params_.top_p > 0.f && params_.top_p <= 1.f)) params_.top_p = 1.f;
  if (!std::isfinite(params_.repetition_penalty) ||
      params_.repetition_penalty <= 0.f) {
    params_.repetition_penalty = 1.f;
  }
  for (float* v : {&params_.frequency_penalty, &params_.presence_penalty}) {
    if (!PenaltyInRange(*v)) *v = 0.f;
  }
  for (auto& [token, bias] : params_.logit_bias) {
    if (!BiasInRange(bias)) bias = 0.f;
  }
}

absl::StatusOr<Sampler> Sampler::Create(const SamplingParams& params) {
  absl::Status status = params.Validate();
  if (!status.ok()) return status;
  return Sampler(params);
}

void Sampler::NewStamp(size_t n) {
  if (seen_.size() != n) {
    seen_.assign(n, 0);
    stamp_ = 0;
  }
  if (++stamp_ == 0) {  // wrapped: old stamps could collide
    std::fill(seen_.begin(), seen_.end(), 0);
    stamp_ = 1;
  }
}

int32_t Sampler::Sample(absl::Span<const float> logits, absl::Span<const int32_t> history,
                        size_t output) {
  const size_t n = logits.size();
  if (n == 0) return -1;
  absl::Span<float> loaded = picker_.Load(logits);
  for (const auto& [token, bias] : params_.logit_bias) {
    if (token >= 0 && size_t(token) < n) loaded[size_t(token)] += bias;
  }

  const float penalty = params_.repetition_penalty;
  if (penalty != 1.f && !history.empty()) {
    NewStamp(n);
    for (int32_t token : history) {
      if (token < 0 || static_cast<size_t>(token) >= n) continue;
      if (seen_[token] == stamp_) continue;
      seen_[token] = stamp_;
      float& v = loaded[token];
      v = v < 0.f ? v * penalty : v / penalty;
    }
  }
  const float frequency = params_.frequency_penalty, presence = params_.presence_penalty;
  if ((frequency != 0.f || presence != 0.f) && output > 0) {
    // As vLLM: logit -= frequency * count, then -= presence where count > 0.
    NewStamp(n);
    counts_.resize(n);
    touched_.clear();
    for (int32_t token : history.subspan(history.size() - std::min(output, history.size()))) {
      if (token < 0 || static_cast<size_t>(token) >= n) continue;
      if (seen_[size_t(token)] != stamp_) {
        seen_[size_t(token)] = stamp_;
        counts_[size_t(token)] = 0;
        touched_.push_back(token);
      }
      ++counts_[size_t(token)];
    }
    for (int32_t token : touched_) {
      float& v = loaded[size_t(token)];
      v -= frequency * float(counts_[size_t(token)]);
      v -= presence;
    }
  }
  return picker_.Pick(NextDraw(0));
}

TokenSampling Sampler::NextDraw(int row) {
  TokenSampling s;
  s.row = row;
  s.temperature = params_.temperature;
  s.top_k = params_.top_k;
  s.top_p = params_.top_p;
  s.uniform = stochastic() ? prng_.NextDouble() : 0.0;
  return s;
}

}  // namespace kvcast
