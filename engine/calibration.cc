#include "engine/calibration.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace kvcast {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

absl::StatusOr<Calibration> Calibrate(Transformer& model, KvPagePool* pool, int chunk_tokens,
                                      int repeats) {
  if (chunk_tokens <= 0 || repeats <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("calibration: chunk of ", chunk_tokens, " tokens, ", repeats, " repeats"));
  }
  const int page_tokens = pool->layout().page_tokens;
  // A pool smaller than a chunk and a step: as many tokens as it holds,
  // the time scaled to a chunk.
  const int tokens = std::min(chunk_tokens, pool->free_pages() * page_tokens - 1);
  if (tokens < 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "calibration needs 2 token slots, the pool has ", pool->free_pages(), " free pages"));
  }
  ASSIGN_OR_RETURN(KvPages pages, pool->Allocate((tokens + 1 + page_tokens - 1) / page_tokens));
  // Any in-vocabulary ids: the time does not depend on which.
  const int vocab = model.config().vocab_size;
  std::vector<int32_t> prompt(tokens);
  for (int i = 0; i < tokens; ++i) prompt[i] = int32_t((i * 7919 + 13) % vocab);
  const int32_t next = prompt.back();
  std::vector<float> logits;
  auto timed = [&](const ForwardItem& item) -> absl::StatusOr<double> {
    const auto t0 = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(model.Forward({&item, 1}, pool, /*all_logits=*/false, &logits));
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
        .count();
  };
  auto run = [&]() -> absl::StatusOr<Calibration> {
    const ForwardItem chunk{prompt, 0, pages.ids()};
    const ForwardItem step{absl::MakeConstSpan(&next, 1), tokens, pages.ids()};
    RETURN_IF_ERROR(timed(chunk).status());  // warm-up
    RETURN_IF_ERROR(timed(step).status());
    std::vector<double> chunk_ms, step_ms;
    for (int r = 0; r < repeats; ++r) {
      ASSIGN_OR_RETURN(double c, timed(chunk));
      ASSIGN_OR_RETURN(double s, timed(step));
      chunk_ms.push_back(c);
      step_ms.push_back(s);
    }
    return Calibration{chunk_tokens, Median(chunk_ms) * chunk_tokens / tokens, Median(step_ms)};
  };
  return run();  // `pages` go back to the pool
}

}  // namespace kvcast
