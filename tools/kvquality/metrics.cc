// Scores and their summary: see metrics.h.
#include "tools/kvquality/metrics.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace kvcast::kvquality {
namespace {

// log-softmax of one row, in double.
void LogSoftmax(const float* x, int n, std::vector<double>* out) {
  out->resize(n);
  const double m = *std::max_element(x, x + n);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(double(x[i]) - m);
  const double log_z = m + std::log(sum);
  for (int i = 0; i < n; ++i) (*out)[i] = double(x[i]) - log_z;
}

}  // namespace

std::vector<PositionScore> ScorePositions(absl::Span<const float> exact,
                                          absl::Span<const float> track, int vocab,
                                          absl::Span<const int32_t> targets) {
  std::vector<PositionScore> scores(targets.size());
  std::vector<double> le, lt;
  for (size_t r = 0; r < targets.size(); ++r) {
    const float* e = exact.data() + r * vocab;
    const float* t = track.data() + r * vocab;
    LogSoftmax(e, vocab, &le);
    LogSoftmax(t, vocab, &lt);
    double kl = 0;
    for (int i = 0; i < vocab; ++i) kl += std::exp(le[i]) * (le[i] - lt[i]);
    PositionScore& s = scores[r];
    s.nll_exact = -le[targets[r]];
    s.nll_track = -lt[targets[r]];
    s.kl = std::max(kl, 0.0);  // rounding can make an exact match slightly negative
    s.top1_agrees = std::max_element(e, e + vocab) - e == std::max_element(t, t + vocab) - t;
  }
  return scores;
}

TrackQuality Summarize(const std::vector<std::vector<PositionScore>>& windows, int resamples,
                       uint64_t seed) {
  TrackQuality q;
  q.windows = int(windows.size());
  // Per window: NLL sums and position counts (the bootstrap's units).
  std::vector<double> sum_exact(windows.size()), sum_track(windows.size());
  std::vector<int> count(windows.size());
  std::vector<double> kls;
  double first_kl = 0;
  int agree = 0;
  for (size_t w = 0; w < windows.size(); ++w) {
    for (const PositionScore& s : windows[w]) {
      sum_exact[w] += s.nll_exact;
      sum_track[w] += s.nll_track;
      kls.push_back(s.kl);
      agree += s.top1_agrees;
    }
    count[w] = int(windows[w].size());
    if (!windows[w].empty()) first_kl += windows[w][0].kl;
  }
  q.positions = int(kls.size());
  if (q.positions == 0) return q;
  auto change = [&](auto&& pick) {  // ppl ratio - 1 over windows pick(0..W-1)
    double e = 0, t = 0;
    int n = 0;
    for (size_t i = 0; i < windows.size(); ++i) {
      const size_t w = pick(i);
      e += sum_exact[w];
      t += sum_track[w];
      n += count[w];
    }
    return std::expm1((t - e) / n);
  };
  double e = 0, t = 0;
  for (size_t w = 0; w < windows.size(); ++w) e += sum_exact[w], t += sum_track[w];
  q.ppl_exact = std::exp(e / q.positions);
  q.ppl_track = std::exp(t / q.positions);
  q.ppl_change = change([](size_t i) { return i; });
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> any(0, windows.size() - 1);
  std::vector<double> boot(std::max(resamples, 1));
  for (double& b : boot) b = change([&](size_t) { return any(rng); });
  std::sort(boot.begin(), boot.end());
  auto at = [&](double p) { return boot[std::min(boot.size() - 1, size_t(p * boot.size()))]; };
  q.ppl_change_lo = at(0.025);
  q.ppl_change_hi = at(0.975);
  double kl_sum = 0;
  for (double k : kls) kl_sum += k;
  q.mean_kl = kl_sum / q.positions;
  std::sort(kls.begin(), kls.end());
  const size_t rank = size_t(std::ceil(0.999 * kls.size()));  // nearest rank, 1-based
  q.p999_kl = kls[std::max<size_t>(rank, 1) - 1];
  q.first_kl = first_kl / q.windows;
  q.top1 = double(agree) / q.positions;
  return q;
}

}  // namespace kvcast::kvquality
