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
  const std::string capacity = "the worker capacity the planner uses";
  prefill_rate_gauge_ = metrics->AddGauge("kvcast_planner_capacity", capacity,
                                          {{"quantity", "prefill_tokens_per_s"}});
  step_gauge_ = metrics->AddGauge("kvcast_planner_capacity", capacity,
                                  {{"quantity", "decode_step_ms"}});
  per_seq_ = metrics->AddGauge("kvcast_planner_capacity", capacity,
                               {{"quantity", "decode_step_ms_per_seq"}});
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
  load.prefill_backlog_tokens = fleet.prefill_backlog_tokens;
  load.decode_backlog_requests = fleet.decode_backlog_requests;
  // Capacity from the interval's work, when it had enough to measure.
  const double prefill_seconds = now.prefill_step_seconds - last_.prefill_step_seconds;
  if (prefill_seconds >= 0.1 && load.uncached_prompt_tokens > 0) {
    prefill_rate_ = load.uncached_prompt_tokens / prefill_seconds;
  }
  const double steps = now.decode_steps - last_.decode_steps;
  if (steps >= 10) {
    const double step_ms = (now.decode_step_seconds - last_.decode_step_seconds) / steps * 1e3;
    const double batch = (now.decode_step_sequences - last_.decode_step_sequences) / steps;
    if (batch < 1.5) {
      step_1_ms_ = step_ms;
    } else if (const double one = step_1_ms_ > 0 ? step_1_ms_ : fleet.decode_step_ms; one > 0) {
      per_seq_ms_ = std::max(0.0, (step_ms - one) / (batch - 1));
    }
  }
  last_ = now;
  const WorkerCapacity capacity{prefill_rate_ > 0 ? prefill_rate_ : fleet.prefill_tokens_per_s,
                                step_1_ms_ > 0 ? step_1_ms_ : fleet.decode_step_ms, per_seq_ms_};
  const PlanDecision d = planner_.Plan(load, capacity);
  prefill_rate_gauge_->Set(capacity.prefill_tokens_per_s);
  step_gauge_->Set(capacity.decode_step_ms);
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
