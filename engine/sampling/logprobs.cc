#include "engine/sampling/logprobs.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/simd_exp.h"
#include "kernels/cpu_features.h"

namespace kvcast {

namespace {

// The largest logit (NaN passed over) and the sum of exp(logit - max) over
// the row: 8 lanes at a time with the attention kernels' exp (relative
// error < 2e-7), each block of 64 summed in float and added in double.
struct Softmax {
  float max;
  double sum;
};

Softmax ScalarSoftmax(const float* x, size_t n) {
  float max = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < n; ++i) max = std::max(max, x[i]);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += std::exp(double(x[i]) - max);
  return {max, sum};
}

__attribute__((target("avx2,fma"))) Softmax Avx2Softmax(const float* x, size_t n) {
  const size_t body = n - n % 64;
  __m256 m = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  for (size_t i = 0; i < body; i += 8) m = _mm256_max_ps(_mm256_loadu_ps(x + i), m);  // NaN: m kept
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, m);
  float max = -std::numeric_limits<float>::infinity();
  for (float v : lanes) max = std::max(max, v);
  for (size_t i = body; i < n; ++i) max = std::max(max, x[i]);
  if (!std::isfinite(max)) return ScalarSoftmax(x, n);  // every logit -inf, or an inf
  const __m256 vmax = _mm256_set1_ps(max);
  double sum = 0;
  for (size_t i = 0; i < body; i += 64) {
    __m256 acc = _mm256_setzero_ps();
    for (size_t j = i; j < i + 64; j += 8) {
      acc = _mm256_add_ps(acc, cpu_simd::Exp8(_mm256_sub_ps(_mm256_loadu_ps(x + j), vmax)));
    }
    _mm256_store_ps(lanes, acc);
    float block = 0;
    for (float v : lanes) block += v;
    sum += block;
  }
  for (size_t i = body; i < n; ++i) sum += std::exp(double(x[i]) - max);
  return {max, sum};
}

// Calls offer(j) for each j in [begin, end - end % 8) whose logit exceeds
// threshold() (read again after each offer); returns where it stopped.
template <typename Threshold, typename Offer>
__attribute__((target("avx2"))) int32_t OfferLarger(const float* x, int32_t begin, int32_t end,
                                                    Threshold threshold, Offer offer) {
  int32_t i = begin;
  for (; i + 8 <= end; i += 8) {
    unsigned mask = unsigned(_mm256_movemask_ps(
        _mm256_cmp_ps(_mm256_loadu_ps(x + i), _mm256_set1_ps(threshold()), _CMP_GT_OQ)));
    for (; mask != 0; mask &= mask - 1) {
      const int32_t j = i + __builtin_ctz(mask);
      if (x[j] > threshold()) offer(j);
    }
  }
  return i;
}

}  // namespace

TokenLogprob ComputeLogprobs(absl::Span<const float> logits, int32_t token, int top) {
  static const bool avx2 = CpuHas(CpuIsa::kAvx2);
  const auto [max, sum] =
      avx2 ? Avx2Softmax(logits.data(), logits.size()) : ScalarSoftmax(logits.data(), logits.size());
  const double lse = double(max) + std::log(sum);
  TokenLogprob out;
  out.logprob = float(double(logits[size_t(token)]) - lse);
  top = std::clamp(top, 0, std::min(kMaxTopLogprobs, int(logits.size())));
  if (top == 0) return out;
  // A min-heap of the best `top` so far: its front is the one to replace.
  auto better = [&](int32_t a, int32_t b) {
    return logits[size_t(a)] != logits[size_t(b)] ? logits[size_t(a)] > logits[size_t(b)] : a < b;
  };
  std::vector<int32_t> heap;
  heap.reserve(size_t(top));
  auto offer = [&](int32_t i) {
    if (int(heap.size()) < top) {
      heap.push_back(i);
      std::push_heap(heap.begin(), heap.end(), better);
    } else if (better(i, heap.front())) {
      std::pop_heap(heap.begin(), heap.end(), better);
      heap.back() = i;
      std::push_heap(heap.begin(), heap.end(), better);
    }
  };
  const auto n = int32_t(logits.size());
  int32_t i = 0;
  for (; i < top; ++i) offer(i);
  // Once full, a later token enters only with a larger logit than the
  // front's (a tie loses to the front's lower index): 8 at a time.
  if (avx2) i = OfferLarger(logits.data(), i, n, [&] { return logits[size_t(heap.front())]; }, offer);
  for (; i < n; ++i) offer(i);
  std::sort_heap(heap.begin(), heap.end(), better);
  for (int32_t i : heap) out.top.emplace_back(i, float(double(logits[size_t(i)]) - lse));
  return out;
}

}  // namespace kvcast
