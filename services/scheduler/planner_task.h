// PlannerTask: the scheduler's planning loop. Every interval it turns the
// cumulative counts into one interval's load, reads the workers'
// calibration, runs the Planner (planner.h) and exports the plan:
//   kvcast_planner_desired_replicas{role="prefill"|"decode"}
//   kvcast_planner_predicted{quantity="requests_per_s"|"uncached_tokens_per_s"|"output_tokens_per_s"}
//   kvcast_planner_decode_step_ms_per_seq  (the batch cost estimate)
// and logs each change of a role's replicas with its reason. An autoscaler
// (KEDA, an HPA on an external metric) reads the first.
//
// A decode worker reports only a single sequence's step (its start-up
// calibration); what each further sequence adds is estimated from the
// interval's mean time between tokens and the decode workers' mean batch:
// (mean TBT - step) / (batch - 1), kept from the last interval that had a
// batch above one.
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

// Cumulative counts since the scheduler started: the work the workers
// reported (WorkerRegistry::WorkDone, the same on every scheduler replica)
// and this replica's times between tokens.
struct LoadTotals {
  double requests = 0;
  double uncached_prompt_tokens = 0;  // prompt tokens the prefill workers computed
  double output_tokens = 0;
  double tbt_seconds = 0, tbt_count = 0;  // time between tokens, summed
};

// The workers now.
struct FleetNow {
  double prefill_tokens_per_s = 0;  // one prefill worker's (0: none measured)
  double decode_step_ms = 0;        // one sequence's step on a decode worker
  double decode_running = 0;        // sequences in a decode worker's batch, mean
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
  double per_seq_ms_ = 0;
  int prefill_ = -1, decode_ = -1;  // last logged
  services::Gauge *prefill_replicas_, *decode_replicas_, *requests_, *uncached_, *output_,
      *per_seq_;
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace kvcast::scheduler

#endif  // KVCAST_SERVICES_SCHEDULER_PLANNER_TASK_H_
