// The routing simulator's traces: see routing_sim.h (Workload) and simulation.h.
#include <cmath>
#include <optional>

#include "tools/sim/simulation.h"

namespace kvcast::sim::internal {
namespace {

// System prompts of random tokens and their Zipf popularity (a CDF).
struct PromptPool {
  std::vector<std::vector<int32_t>> systems;
  std::vector<double> cdf;
  std::vector<int> hot_order;
  PromptPool(const Workload& w, int count, std::mt19937_64& rng) {
    std::uniform_int_distribution<int> sys_len(w.system_tokens_min, w.system_tokens_max);
    std::uniform_int_distribution<int32_t> token(0, kVocab - 1);
    systems.resize(count);
    double total = 0;
    for (int k = 0; k < count; ++k) {
      systems[k].resize(sys_len(rng));
      for (int32_t& t : systems[k]) t = token(rng);
      total += 1.0 / std::pow(k + 1, w.zipf);
      cdf.push_back(total);
    }
    hot_order.resize(count);
    for (int k = 0; k < count; ++k) hot_order[k] = k;
    std::shuffle(hot_order.begin(), hot_order.end(), rng);
  }
  const std::vector<int32_t>& Pick(const Workload& w, double t, std::mt19937_64& rng) const {
    std::uniform_real_distribution<double> unit(0, 1);
    int s = int(std::lower_bound(cdf.begin(), cdf.end(), unit(rng) * cdf.back()) - cdf.begin());
    if (w.hot_share > 0 && unit(rng) < w.hot_share) {
      s = hot_order[size_t(t / w.hot_period_s) % hot_order.size()];
    }
    return systems[std::min(s, int(systems.size()) - 1)];
  }
};

// The arrival rate at time t (the day's shape, or constant).
double RateAt(const Workload& w, double rate, double t) {
  if (w.day_s <= 0) return rate;
  const double s = std::sin(M_PI * t / w.day_s);
  return rate * (1 + (w.peak - 1) * s * s);
}

}  // namespace

std::vector<Request> MakeTrace(const Workload& w, const Cluster& c, double rate) {
  std::mt19937_64 rng(w.seed);
  std::uniform_int_distribution<int> user_len(w.user_tokens_min, w.user_tokens_max);
  std::uniform_int_distribution<int> out_len(w.output_tokens_min, w.output_tokens_max);
  std::uniform_int_distribution<int32_t> token(0, kVocab - 1);
  std::uniform_real_distribution<double> unit(0, 1);
  const PromptPool before(w, w.system_prompts, rng);
  std::optional<PromptPool> after;  // drawn only with a shift: the same traces without one
  if (w.shift_at > 0) after.emplace(w, w.shift_system_prompts, rng);
  // Arrivals: Poisson at the peak rate, each kept with probability
  // RateAt / peak (thinning: a Poisson process of rate RateAt).
  const double top = w.day_s > 0 ? rate * std::max(1.0, w.peak) : rate;
  std::exponential_distribution<double> gap(top);
  const Hash128 seed = PrefixSeed(Hash128{1, 2});
  std::vector<Request> trace;
  double t = 0;
  std::vector<int32_t> tokens;
  while (w.day_s > 0 ? t < w.day_s : int(trace.size()) < w.requests) {
    t += gap(rng);
    if (w.day_s > 0 && (t >= w.day_s || unit(rng) * top > RateAt(w, rate, t))) continue;
    const bool shifted = w.shift_at > 0 && t >= w.shift_at * w.day_s;
    Request& r = trace.emplace_back();
    r.arrival = t;
    tokens = (shifted ? *after : before).Pick(w, t, rng);
    const int user = int(user_len(rng) * (shifted ? w.shift_user_tokens : 1.0));
    for (int n = std::max(1, user); n > 0; --n) tokens.push_back(token(rng));
    r.prompt_tokens = int(tokens.size());
    r.output_tokens = out_len(rng);
    r.chain = ChunkHashChain(seed, tokens, c.chunk_tokens);
  }
  return trace;
}

}  // namespace kvcast::sim::internal
