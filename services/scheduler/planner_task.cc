#include "services/scheduler/planner_task.h"

#include <algorithm>
#include <utility>

#include "services/common/log.h"

namespace kvcast::scheduler {

PlannerTask::PlannerTask(PlannerOptions options, std::function<LoadTotals()> totals,
                         std::function<FleetNow()> fleet, services::MetricsRegistry* metrics)
    : planner_(options), totals_(std::move(totals)), fleet_(std::move(fleet)), last_(totals_()) {
  const std::string replicas = "worker replicas each role needs for the SLOs next interval";
  prefill_replicas_ =
      metrics->AddGauge("kvcast_planner_desired_replicas", replicas, {{"role", "prefill"}});
  decode_replicas_ =
      metrics->AddGauge("kvcast_planner_desired_replicas", replicas, {{"role", "decode"}});
  const std::string predicted = "the planner's load prediction for the next interval";
  requests_ = metrics->AddGauge("kvcast_planner_predicted", predicted,
                                {{"quantity", "requests_per_s"}});
  uncached_ = metrics->AddGauge("kvcast_planner_predicted", predicted,
                                {{"quantity", "uncached_tokens_per_s"}});
  output_ = metrics->AddGauge("kvcast_planner_predicted", predicted,
                              {{"quantity", "output_tokens_per_s"}});
  per_seq_ = metrics->AddGauge("kvcast_planner_decode_step_ms_per_seq",
                               "estimated decode step time each further sequence adds");
}

PlannerTask::~PlannerTask() {
  stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

void PlannerTask::Start() {
  thread_ = std::thread([this] {
    while (!stop_.WaitForNotificationWithTimeout(planner_.options().interval)) Tick();
  });
}

PlanDecision PlannerTask::Tick() {
  const LoadTotals now = totals_();
  const FleetNow fleet = fleet_();
  IntervalLoad load;
  load.requests = now.requests - last_.requests;
  load.uncached_prompt_tokens = now.uncached_prompt_tokens - last_.uncached_prompt_tokens;
  load.output_tokens = now.output_tokens - last_.output_tokens;
  const double tbt_count = now.tbt_count - last_.tbt_count;
  if (tbt_count > 0 && fleet.decode_running > 1.5 && fleet.decode_step_ms > 0) {
    const double tbt_ms = (now.tbt_seconds - last_.tbt_seconds) / tbt_count * 1e3;
    per_seq_ms_ = std::max(0.0, (tbt_ms - fleet.decode_step_ms) / (fleet.decode_running - 1));
  }
  last_ = now;
  const PlanDecision d = planner_.Plan(
      load, WorkerCapacity{fleet.prefill_tokens_per_s, fleet.decode_step_ms, per_seq_ms_});
  prefill_replicas_->Set(d.prefill.replicas);
  decode_replicas_->Set(d.decode.replicas);
  requests_->Set(d.requests_per_s);
  uncached_->Set(d.uncached_tokens_per_s);
  output_->Set(d.output_tokens_per_s);
  per_seq_->Set(per_seq_ms_);
  if (d.prefill.replicas != prefill_) {
    services::Log().info("planner: prefill {} -> {} replicas: {}", prefill_, d.prefill.replicas,
                         d.prefill.reason.c_str());
    prefill_ = d.prefill.replicas;
  }
  if (d.decode.replicas != decode_) {
    services::Log().info("planner: decode {} -> {} replicas: {}", decode_, d.decode.replicas,
                         d.decode.reason.c_str());
    decode_ = d.decode.replicas;
  }
  return d;
}

}  // namespace kvcast::scheduler
