// PlannerTask: the scheduler's planning loop. Every interval it turns the
// cumulative counts into one interval's load, reads the workers'
// calibration, runs the Planner (planner.h) and exports the plan:
//   kvcast_planner_desired_replicas{role="prefill"|"decode"}
//   kvcast_planner_predicted{quantity="requests_per_s"|"uncached_tokens_per_s"|"output_tokens_per_s"}
//   kvcast_planner_capacity{quantity="prefill_tokens_per_s"|"decode_step_ms"|"decode_step_ms_per_seq"}
// and logs each change of a role's replicas with its reason. An autoscaler
// (KEDA, an HPA on an external metric) reads the first.
//
// Capacity is measured from the work itself once there is some: a prefill
// worker's rate is the prompt tokens the prefill workers computed over the
// seconds their forward passes took; a decode step's time by batch comes
// from the decode workers' passes (seconds and sequences per pass): an
// interval whose mean batch is about one measures a single sequence's step,
// one with a larger batch what each further sequence adds. Until then the
// workers' start-up calibration stands in (which, on a machine whose
// workers calibrate at once on shared cores, can be far off).
//
// Thread safety: Tick runs on the task's thread (or a test's); the reads
// must be safe from it.
#ifndef KVCAST_SERVICES_SCHEDULER_PLANNER_TASK_H_
#define KVCAST_SERVICES_SCHEDULER_PLANNER_TASK_H_

#include <functional>
#include <thread>

#include "absl/synchronization/notification.h"
#include "services/common/metrics.h"
#include "services/scheduler/planner.h"

namespace kvcast::scheduler {

// Cumulative counts: the work the workers reported (WorkerRegistry::
// WorkDone, the same on every scheduler replica).
struct LoadTotals {
  double requests = 0;
  double uncached_prompt_tokens = 0;  // prompt tokens the prefill workers computed
  double output_tokens = 0;
  double prefill_step_seconds = 0;    // the prefill workers' forward passes
  double decode_steps = 0, decode_step_sequences = 0, decode_step_seconds = 0;
};

// The workers' start-up calibration (WorkerRegistry::Summary).
struct FleetNow {
  double prefill_tokens_per_s = 0;  // one prefill worker's (0: none measured)
  double decode_step_ms = 0;        // one sequence's step on a decode worker
  double prefill_backlog_tokens = 0;   // waiting now (IntervalLoad)
  double decode_backlog_requests = 0;
};

class PlannerTask {
 public:
  PlannerTask(PlannerOptions options, std::function<LoadTotals()> totals,
              std::function<FleetNow()> fleet, services::MetricsRegistry* metrics);
  ~PlannerTask();  // stops the thread

  // Runs Tick every options.interval on a thread of its own.
  void Start();
  // One interval: the load since the last Tick (or construction), the plan,
  // the metrics and the log.
  PlanDecision Tick();

 private:
  Planner planner_;
  const std::function<LoadTotals()> totals_;
  const std::function<FleetNow()> fleet_;
  LoadTotals last_;
  // Measured from the work (0: not yet): a prefill worker's tokens per
  // second, a single sequence's decode step, what each further one adds.
  double prefill_rate_ = 0, step_1_ms_ = 0, per_seq_ms_ = 0;
  int prefill_ = -1, decode_ = -1;  // last logged
  services::Gauge *prefill_replicas_, *decode_replicas_, *requests_, *uncached_, *output_,
      *prefill_rate_gauge_, *step_gauge_, *per_seq_;
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace kvcast::scheduler

#endif  // KVCAST_SERVICES_SCHEDULER_PLANNER_TASK_H_
