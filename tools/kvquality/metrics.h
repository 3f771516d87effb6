// How a KV track's logits compare with the exact run's, position by
// position and over an evaluation (tools/kvquality, docs/kv-quality.md).
//
// Pure functions; thread-safe.
#ifndef KVCAST_TOOLS_KVQUALITY_METRICS_H_
#define KVCAST_TOOLS_KVQUALITY_METRICS_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace kvcast::kvquality {

// One teacher-forced position: the negative log-likelihood of the token
// that follows under the exact and the track's logits, KL(exact || track)
// of their softmax distributions (nats), and whether their top-1 tokens
// are the same.
struct PositionScore {
  double nll_exact = 0;
  double nll_track = 0;
  double kl = 0;
  bool top1_agrees = true;
};

// Scores rows r < targets.size() of exact and track logits ([rows, vocab]
// each), row r predicting targets[r].
std::vector<PositionScore> ScorePositions(absl::Span<const float> exact,
                                          absl::Span<const float> track, int vocab,
                                          absl::Span<const int32_t> targets);

// A track over every window of an evaluation.
struct TrackQuality {
  int windows = 0;
  int positions = 0;         // over all windows
  double ppl_exact = 0;      // exp(mean NLL) over all positions
  double ppl_track = 0;
  double ppl_change = 0;     // ppl_track / ppl_exact - 1
  double ppl_change_lo = 0;  // 95% paired-bootstrap interval of ppl_change
  double ppl_change_hi = 0;
  double mean_kl = 0;
  double p999_kl = 0;        // 99.9th percentile (nearest rank) over positions
  double first_kl = 0;       // mean over windows of the first position's KL
  double top1 = 0;           // fraction of positions whose top-1 tokens agree
};

// Summarizes windows[w] = the scores of window w (at least one position
// each). The interval resamples whole windows `resamples` times with
// replacement (a fixed seed: the same scores give the same interval),
// pairing each window's exact and track NLL.
TrackQuality Summarize(const std::vector<std::vector<PositionScore>>& windows, int resamples,
                       uint64_t seed = 1);

}  // namespace kvcast::kvquality

#endif  // KVCAST_TOOLS_KVQUALITY_METRICS_H_
