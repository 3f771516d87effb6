// Planner: how many prefill and decode workers the next interval needs to
// meet the TTFT and inter-token-latency SLOs (issue 43), from the load the
// scheduler saw and the capacity the workers measured. Pure: the caller
// feeds one observed interval at a time (its clock decides when) and reads
// the decision; nothing here sleeps, reads a clock or a registry.
//
// Prediction: Holt's linear trend (double exponential smoothing) of each
// load quantity, one interval ahead:
//   level' = alpha * x + (1 - alpha) * (level + trend)
//   trend' = beta * (level' - level) + (1 - beta) * trend
//   forecast = max(0, level' + trend')
// so a rising load is met before it arrives, and one interval's spike is
// damped.
//
// Prefill: a prompt's service time s = its uncached tokens / one worker's
// prefill rate. With prompts arriving at random and a worker's queue served
// in order (M/D/1: deterministic service), the mean wait is
// rho / (2 (1 - rho)) * s at utilisation rho. The SLO holds for a
// percentile (99%), and a queue's waits have an exponential tail, the
// 99th percentile about ln(100) = 4.6 times the mean, so TTFT <= slo at
// the 99th percentile needs
//   rho <= k / (1 + k),  k = 2 (r - 1) / ln(100),  r = slo / s.
// The replicas are the predicted prompt tokens per second, plus the
// backlog's to clear it within the next interval, over what a worker
// computes at min(that rho, 1 - headroom). r < 1 (one prompt alone
// outlasts the SLO) is reported: no replica count meets it.
//
// Decode: a worker's step time grows with its batch (step_ms(B) = step_1 +
// per_seq * (B - 1)); the largest batch whose step meets the ITL SLO, less
// headroom, sets its tokens per second (B / step), and the replicas are the
// predicted output tokens per second (plus the waiting sequences' tokens
// over the next interval) over that.
//
// Demand, not throughput: a saturated interval serves what the workers can
// compute, so the load the predictor sees is what was served plus how much
// the backlog grew (work queued at the interval's end against its start);
// without it the plan would follow its own capacity upward one worker at
// a time.
//
// Stability: more replicas at once; fewer only after scale_down_after
// intervals in a row that all asked for fewer even with scale_down_margin
// more load (hysteresis: a load hovering at a count's edge does not flap
// between it and the next), to the largest count asked in them. Both
// clamped to [min_replicas, max_replicas].
//
// Thread safety: none (one caller: the scheduler's planning task).
#ifndef KVCAST_SERVICES_SCHEDULER_PLANNER_H_
#define KVCAST_SERVICES_SCHEDULER_PLANNER_H_

#include <deque>
#include <string>

#include "absl/time/time.h"

namespace kvcast::scheduler {

struct PlannerOptions {
  absl::Duration interval = absl::Seconds(30);
  double slo_ttft_ms = 2000;
  double slo_itl_ms = 100;
  double headroom = 0.2;  // capacity left spare, as a fraction
  int scale_down_after = 4;
  double scale_down_margin = 0.15;  // see Stability above
  int min_replicas = 1;
  int max_replicas = 64;
  double alpha = 0.5;  // Holt's level smoothing
  double beta = 0.3;   // Holt's trend smoothing
};

// What the scheduler saw in one interval.
struct IntervalLoad {
  double requests = 0;                // arrivals
  double uncached_prompt_tokens = 0;  // prompt tokens to compute, after prefix hits and fusion
  double output_tokens = 0;           // tokens generated
  // Waiting at the interval's end: prompt tokens queued on prefill workers
  // (beyond what they cache), and sequences waiting for a decode slot.
  double prefill_backlog_tokens = 0;
  double decode_backlog_requests = 0;
};

// What one worker of each role can do (0: not measured yet).
struct WorkerCapacity {
  double prefill_tokens_per_s = 0;
  double decode_step_ms = 0;          // one step of a single sequence
  double decode_step_ms_per_seq = 0;  // what each further sequence in the batch adds
};

// One role's replicas and why.
struct RolePlan {
  int replicas = 0;   // what the next interval needs (after the scale-down delay)
  int wanted = 0;     // what this interval's prediction alone asks for
  std::string reason;
};

struct PlanDecision {
  RolePlan prefill, decode;
  // The prediction behind it, per second of the next interval.
  double requests_per_s = 0, uncached_tokens_per_s = 0, output_tokens_per_s = 0;
  double prefill_utilisation = 0;  // the target rho
  int decode_batch = 0;            // the largest batch meeting the ITL SLO
};

class Planner {
 public:
  explicit Planner(PlannerOptions options);

  // The interval that just ended and the workers' capacity now: the plan
  // for the next one.
  PlanDecision Plan(const IntervalLoad& observed, const WorkerCapacity& capacity);
  const PlannerOptions& options() const { return options_; }

 private:
  struct Holt {
    bool started = false;
    double level = 0, trend = 0;
    double Next(double x, double alpha, double beta);
  };
  // Applies the scale-down delay to `wanted` (and, for fewer, what the
  // load with the margin wants) for a role whose last plan was `current`;
  // `history` keeps the wants since the role last changed.
  int Stabilise(int wanted, int wanted_with_margin, int current, std::deque<int>* history) const;
  RolePlan PlanPrefill(double tokens_per_s, double tokens_per_request,
                       const WorkerCapacity& capacity, double* utilisation) const;
  RolePlan PlanDecode(double tokens_per_s, const WorkerCapacity& capacity, int* batch) const;
  int Clamp(double replicas) const;

  const PlannerOptions options_;
  Holt requests_, uncached_, output_;
  int prefill_ = 0, decode_ = 0;  // the last plan
  double prefill_backlog_ = 0, decode_backlog_ = 0;  // at the last interval's end
  // A request's uncached prompt and output tokens, the last interval's
  // with requests (served work: the backlog is not a larger prompt).
  double tokens_per_request_ = 0, output_per_request_ = 0;
  std::deque<int> prefill_wants_, decode_wants_;
};

}  // namespace kvcast::scheduler

#endif  // KVCAST_SERVICES_SCHEDULER_PLANNER_H_
