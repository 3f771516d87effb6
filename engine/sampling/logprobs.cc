#include "engine/sampling/logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kvcast {

TokenLogprob ComputeLogprobs(absl::Span<const float> logits, int32_t token, int top) {
  float max = -std::numeric_limits<float>::infinity();
  for (float x : logits) max = std::max(max, x);
  double sum = 0;
  for (float x : logits) sum += std::exp(double(x) - max);
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
  for (int32_t i = 0; i < int32_t(logits.size()); ++i) {
    if (int(heap.size()) < top) {
      heap.push_back(i);
      std::push_heap(heap.begin(), heap.end(), better);
    } else if (better(i, heap.front())) {
      std::pop_heap(heap.begin(), heap.end(), better);
      heap.back() = i;
      std::push_heap(heap.begin(), heap.end(), better);
    }
  }
  std::sort_heap(heap.begin(), heap.end(), better);
  for (int32_t i : heap) out.top.emplace_back(i, float(double(logits[size_t(i)]) - lse));
  return out;
}

}  // namespace kvcast
