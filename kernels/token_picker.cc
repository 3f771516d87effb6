#include "kernels/token_picker.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace kvcast {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// top_k at most vocab / kHeapTopKRatio uses a bounded heap (about one
// comparison per token); larger k uses nth_element.
constexpr size_t kHeapTopKRatio = 8;

}  // namespace

absl::Span<float> TokenPicker::Load(absl::Span<const float> logits, const uint32_t* allowed) {
  const size_t n = logits.size();
  logits_.resize(n);
  size_t i = 0;
  if (allowed != nullptr) {
#if defined(__SSE2__)
    // Four logits at a time, kept where their nibble of the mask has bits
    // (a mask's bits fall at random among the ids: a branch per token would
    // mispredict half the time).
    alignas(16) static constexpr uint32_t kKeep[16][4] = {
        {0, 0, 0, 0}, {~0u, 0, 0, 0}, {0, ~0u, 0, 0}, {~0u, ~0u, 0, 0},
        {0, 0, ~0u, 0}, {~0u, 0, ~0u, 0}, {0, ~0u, ~0u, 0}, {~0u, ~0u, ~0u, 0},
        {0, 0, 0, ~0u}, {~0u, 0, 0, ~0u}, {0, ~0u, 0, ~0u}, {~0u, ~0u, 0, ~0u},
        {0, 0, ~0u, ~0u}, {~0u, 0, ~0u, ~0u}, {0, ~0u, ~0u, ~0u}, {~0u, ~0u, ~0u, ~0u}};
    const __m128 neg_inf = _mm_set1_ps(kNegInf);
    for (; i + 32 <= n; i += 32) {
      const uint32_t bits = allowed[i >> 5];
      for (int q = 0; q < 8; ++q) {
        const __m128 v = _mm_loadu_ps(logits.data() + i + 4 * q);
        const float* nibble = reinterpret_cast<const float*>(kKeep[(bits >> (4 * q)) & 15]);
        const __m128 keep = _mm_and_ps(_mm_load_ps(nibble), _mm_cmpeq_ps(v, v));  // and not NaN
        _mm_storeu_ps(logits_.data() + i + 4 * q,
                      _mm_or_ps(_mm_and_ps(keep, v), _mm_andnot_ps(keep, neg_inf)));
      }
    }
#endif
    for (; i < n; ++i) {
      const float v = logits[i];
      logits_[i] = v == v && ((allowed[i >> 5] >> (i & 31)) & 1) ? v : kNegInf;
    }
    return absl::MakeSpan(logits_);
  }
  for (; i < n; ++i) {
    const float v = logits[i];
    logits_[i] = v == v ? v : kNegInf;  // NaN -> -inf, branch-free
  }
  return absl::MakeSpan(logits_);
}

int32_t TokenPicker::Argmax() const {
  // Two passes: a max over independent lanes (which the compiler turns into
  // SIMD max instructions), then the first index holding it, i.e. the lowest
  // index among equal maxima. logits_ holds no NaN.
  const float* p = logits_.data();
  const size_t n = logits_.size();
  constexpr size_t kLanes = 8;
  float lane_max[kLanes];
  for (float& m : lane_max) m = kNegInf;
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t j = 0; j < kLanes; ++j) {
      lane_max[j] = p[i + j] > lane_max[j] ? p[i + j] : lane_max[j];
    }
  }
  float max_value = kNegInf;
  for (float m : lane_max) max_value = m > max_value ? m : max_value;
  for (; i < n; ++i) max_value = p[i] > max_value ? p[i] : max_value;
  for (size_t k = 0; k < n; ++k) {
    if (p[k] == max_value) return static_cast<int32_t>(k);
  }
  return 0;  // every logit is -inf
}

int32_t TokenPicker::Pick(const TokenSampling& s) {
  if (logits_.empty()) return -1;
  // The Sampler constructor's coercions.
  const float temperature = std::isfinite(s.temperature) && s.temperature >= 0.f ? s.temperature : 0.f;
  const int top_k = s.top_k < 0 ? 0 : s.top_k;
  const float top_p = s.top_p > 0.f && s.top_p <= 1.f ? s.top_p : 1.f;

  const int32_t argmax = Argmax();
  if (temperature == 0.f || top_k == 1) return argmax;
  const float max_logit = logits_[argmax];
  if (std::isinf(max_logit)) return argmax;

  const size_t kept = SelectCandidates(max_logit, temperature, top_k, top_p);
  const bool identity = order_.empty();

  double total = 0.0;
  for (size_t pos = 0; pos < kept; ++pos) total += weights_[pos];
  const double target = s.uniform * total;
  double running = 0.0;
  size_t last_positive = 0;
  for (size_t pos = 0; pos < kept; ++pos) {
    const float w = weights_[pos];
    if (w <= 0.f) continue;
    last_positive = pos;
    running += w;
    if (running > target) {
      return identity ? static_cast<int32_t>(pos) : order_[pos];
    }
  }
  // Rounding left `target` at or past the accumulated mass.
  return identity ? static_cast<int32_t>(last_positive) : order_[last_positive];
}

size_t TokenPicker::SelectCandidates(float max_logit, float temperature, int top_k,
                                     float top_p) {
  const size_t n = logits_.size();
  const float inv_temperature = 1.f / temperature;
  auto weight_of = [&](size_t token) {
    const float shifted = logits_[token] - max_logit;  // <= 0
    // A tiny temperature can make inv_temperature inf; 0 * inf is NaN.
    return shifted == 0.f ? 1.f : std::exp(shifted * inv_temperature);
  };
  // Total order (higher logit first, then lower index), so the selected set
  // and its order do not depend on the standard library's algorithms.
  auto ranks_before = [&](int32_t a, int32_t b) {
    const float la = logits_[a];
    const float lb = logits_[b];
    return la > lb || (la == lb && a < b);
  };

  const bool use_top_k =
      top_k > 0 && static_cast<size_t>(top_k) < n;
  const bool use_top_p = top_p < 1.f;

  if (!use_top_k && !use_top_p) {
    // Every token is a candidate, in index order: no selection work.
    order_.clear();
    weights_.resize(n);
    for (size_t i = 0; i < n; ++i) weights_[i] = weight_of(i);
    return n;
  }
  if (!use_top_k) return SelectNucleus(max_logit, inv_temperature, top_p);

  const size_t k = static_cast<size_t>(top_k);
  if (k * kHeapTopKRatio <= n) {
    // Bounded heap whose front is the worst-ranked kept token. Scanning in
    // index order, a later token beats the front only with a strictly larger
    // logit, so most tokens cost one comparison.
    order_.resize(k);
    std::iota(order_.begin(), order_.end(), 0);
    std::make_heap(order_.begin(), order_.end(), ranks_before);
    float worst = logits_[order_.front()];
    for (size_t i = k; i < n; ++i) {
      if (logits_[i] > worst) {
        std::pop_heap(order_.begin(), order_.end(), ranks_before);
        order_.back() = static_cast<int32_t>(i);
        std::push_heap(order_.begin(), order_.end(), ranks_before);
        worst = logits_[order_.front()];
      }
    }
  } else {
    order_.resize(n);
    std::iota(order_.begin(), order_.end(), 0);
    std::nth_element(order_.begin(), order_.begin() + (k - 1), order_.end(),
                     ranks_before);
    order_.resize(k);
  }
  std::sort(order_.begin(), order_.end(), ranks_before);
  weights_.resize(k);
  double mass = 0.0;
  for (size_t pos = 0; pos < k; ++pos) {
    weights_[pos] = weight_of(order_[pos]);
    mass += weights_[pos];
  }
  if (!use_top_p) return k;

  const double nucleus_mass = static_cast<double>(top_p) * mass;
  double cumulative = 0.0;
  for (size_t pos = 0; pos < k; ++pos) {
    cumulative += weights_[pos];
    if (cumulative >= nucleus_mass) return pos + 1;
  }
  return k;  // rounding kept the sum just under nucleus_mass: keep all
}

size_t TokenPicker::SelectNucleus(float max_logit, float inv_temperature, float top_p) {
  // Weights lie in [0, 1], so their IEEE bit patterns order them; bucketing
  // by the top bits (exponent + kBucketMantissaBits of mantissa) lets one
  // pass find the bucket where the cumulative mass, taken from the top,
  // crosses top_p. Buckets above it are kept whole (in index order); only the
  // boundary bucket is sorted. A larger weight never has a smaller logit, so
  // this keeps exactly the top-ranked prefix.
  const size_t n = logits_.size();
  bucket_mass_.assign(kNumBuckets, 0.0);
  scratch_weights_.resize(n);
  double mass = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const float shifted = logits_[i] - max_logit;
    const float w =
        shifted == 0.f ? 1.f : std::exp(shifted * inv_temperature);
    scratch_weights_[i] = w;
    mass += w;
    bucket_mass_[BucketOf(w)] += w;
  }
  const double nucleus_mass = static_cast<double>(top_p) * mass;

  double above = 0.0;  // mass of buckets strictly above the boundary
  int boundary = -1;   // -1: rounding never reached nucleus_mass, keep all
  for (int b = kNumBuckets - 1; b >= 0; --b) {
    if (above + bucket_mass_[b] >= nucleus_mass) {
      boundary = b;
      break;
    }
    above += bucket_mass_[b];
  }

  order_.clear();
  weights_.clear();
  boundary_tokens_.clear();
  for (size_t i = 0; i < n; ++i) {
    const int b = static_cast<int>(BucketOf(scratch_weights_[i]));
    if (b > boundary) {
      order_.push_back(static_cast<int32_t>(i));
      weights_.push_back(scratch_weights_[i]);
    } else if (b == boundary) {
      boundary_tokens_.push_back(static_cast<int32_t>(i));
    }
  }
  if (boundary < 0) return order_.size();

  std::sort(boundary_tokens_.begin(), boundary_tokens_.end(),
            [&](int32_t a, int32_t b) {
              const float la = logits_[a];
              const float lb = logits_[b];
              return la > lb || (la == lb && a < b);
            });
  double cumulative = above;
  for (int32_t token : boundary_tokens_) {
    order_.push_back(token);
    weights_.push_back(scratch_weights_[token]);
    cumulative += scratch_weights_[token];
    if (cumulative >= nucleus_mass) break;
  }
  return order_.size();
}

}  // namespace kvcast
