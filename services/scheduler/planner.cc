#include "services/scheduler/planner.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace kvcast::scheduler {
namespace {

constexpr int kMaxDecodeBatch = 256;

}  // namespace

Planner::Planner(PlannerOptions options) : options_(options) {}

double Planner::Holt::Next(double x, double alpha, double beta) {
  if (!started) {
    started = true;
    level = x;
    trend = 0;
  } else {
    const double previous = level;
    level = alpha * x + (1 - alpha) * (level + trend);
    trend = beta * (level - previous) + (1 - beta) * trend;
  }
  return std::max(0.0, level + trend);
}

int Planner::Clamp(double replicas) const {
  const double up = std::ceil(replicas - 1e-9);
  return int(std::clamp<double>(up, options_.min_replicas, options_.max_replicas));
}

int Planner::Stabilise(int wanted, int wanted_with_margin, int current,
                       std::deque<int>* history) const {
  if (wanted > current) {
    history->clear();
    return wanted;
  }
  if (wanted_with_margin >= current) {
    history->clear();
    return current;
  }
  history->push_back(wanted_with_margin);
  if (int(history->size()) < options_.scale_down_after) return current;
  const int down = *std::max_element(history->begin(), history->end());
  history->clear();
  return down;
}

RolePlan Planner::PlanPrefill(double tokens_per_s, double tokens_per_request,
                              const WorkerCapacity& capacity, double* utilisation) const {
  RolePlan plan;
  const double rate = capacity.prefill_tokens_per_s;
  *utilisation = 1 - options_.headroom;
  if (rate <= 0) {
    plan.wanted = Clamp(0);
    plan.reason = "no prefill rate measured yet";
    return plan;
  }
  if (tokens_per_s <= 0) {
    plan.wanted = Clamp(0);
    plan.reason = "no prompt tokens to compute predicted";
    return plan;
  }
  const double service_ms = tokens_per_request / rate * 1e3;
  const double r = options_.slo_ttft_ms / service_ms;
  std::string bound;
  if (r <= 1) {
    bound = absl::StrFormat(
        "a mean prompt (%.0f tokens) takes %.0f ms on one worker, over the TTFT SLO of %.0f ms: "
        "no replica count meets it; sized for throughput",
        tokens_per_request, service_ms, options_.slo_ttft_ms);
  } else {
    const double k = 2 * (r - 1) / std::log(100.0);  // the 99th percentile's wait
    const double rho = k / (1 + k);
    *utilisation = std::min(rho, *utilisation);
    bound = absl::StrFormat("utilisation %.2f keeps a %.0f-token prompt's TTFT within %.0f ms",
                            *utilisation, tokens_per_request, options_.slo_ttft_ms);
  }
  plan.wanted = Clamp(tokens_per_s / (rate * *utilisation));
  plan.reason = absl::StrFormat("%.0f prompt tokens/s predicted, %.0f tokens/s a worker; %s",
                                tokens_per_s, rate, bound);
  return plan;
}

RolePlan Planner::PlanDecode(double tokens_per_s, const WorkerCapacity& capacity,
                             int* batch) const {
  RolePlan plan;
  const double step_1 = capacity.decode_step_ms, per_seq = capacity.decode_step_ms_per_seq;
  *batch = 0;
  if (step_1 <= 0) {
    plan.wanted = Clamp(0);
    plan.reason = "no decode step time measured yet";
    return plan;
  }
  const double budget = options_.slo_itl_ms * (1 - options_.headroom);
  std::string bound;
  if (step_1 > budget) {
    *batch = 1;
    bound = absl::StrFormat("one sequence's step (%.1f ms) is over the ITL budget of %.1f ms: "
                            "no replica count meets it; sized at batch 1",
                            step_1, budget);
  } else {
    *batch = per_seq <= 0 ? kMaxDecodeBatch
                          : std::min(kMaxDecodeBatch, 1 + int((budget - step_1) / per_seq));
    bound = absl::StrFormat("batch %d keeps a step within %.1f ms", *batch, budget);
  }
  const double step_ms = step_1 + std::max(0.0, per_seq) * (*batch - 1);
  const double worker_tokens_per_s = *batch / step_ms * 1e3;
  plan.wanted = Clamp(tokens_per_s / worker_tokens_per_s);
  plan.reason = absl::StrFormat("%.0f output tokens/s predicted, %.0f tokens/s a worker; %s",
                                tokens_per_s, worker_tokens_per_s, bound);
  return plan;
}

PlanDecision Planner::Plan(const IntervalLoad& observed, const WorkerCapacity& capacity) {
  const double seconds = absl::ToDoubleSeconds(options_.interval);
  PlanDecision d;
  // Demand = served + the backlog's growth (see the header).
  if (observed.requests > 0) {  // a request's size, from what was served
    output_per_request_ = observed.output_tokens / observed.requests;
    tokens_per_request_ = observed.uncached_prompt_tokens / observed.requests;
  }
  const double prefill_demand = std::max(
      0.0, observed.uncached_prompt_tokens + observed.prefill_backlog_tokens - prefill_backlog_);
  const double decode_demand =
      std::max(0.0, observed.output_tokens + (observed.decode_backlog_requests - decode_backlog_) *
                                                 output_per_request_);
  prefill_backlog_ = observed.prefill_backlog_tokens;
  decode_backlog_ = observed.decode_backlog_requests;
  const double requests = requests_.Next(observed.requests, options_.alpha, options_.beta);
  const double uncached = uncached_.Next(prefill_demand, options_.alpha, options_.beta);
  const double output = output_.Next(decode_demand, options_.alpha, options_.beta);
  d.requests_per_s = requests / seconds;
  d.uncached_tokens_per_s = uncached / seconds;
  d.output_tokens_per_s = output / seconds;
  // Sized to also clear what waits now within the next interval.
  const double prefill_tokens = d.uncached_tokens_per_s + prefill_backlog_ / seconds;
  const double decode_tokens =
      d.output_tokens_per_s + decode_backlog_ * output_per_request_ / seconds;
  d.prefill = PlanPrefill(prefill_tokens, tokens_per_request_, capacity, &d.prefill_utilisation);
  d.decode = PlanDecode(decode_tokens, capacity, &d.decode_batch);
  // Fewer only for a load that fits them with the margin to spare.
  const double more = 1 + options_.scale_down_margin;
  double unused = 0;
  int unused_batch = 0;
  const int prefill_margin =
      PlanPrefill(prefill_tokens * more, tokens_per_request_, capacity, &unused).wanted;
  const int decode_margin = PlanDecode(decode_tokens * more, capacity, &unused_batch).wanted;
  prefill_ = d.prefill.replicas =
      Stabilise(d.prefill.wanted, prefill_margin, prefill_, &prefill_wants_);
  decode_ = d.decode.replicas =
      Stabilise(d.decode.wanted, decode_margin, decode_, &decode_wants_);
  return d;
}

}  // namespace kvcast::scheduler
