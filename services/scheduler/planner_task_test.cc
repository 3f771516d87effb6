#include "services/scheduler/planner_task.h"

#include <gtest/gtest.h>

#include <string>

#include "absl/time/clock.h"

namespace kvcast::scheduler {
namespace {

PlannerOptions Exact() {
  PlannerOptions o;
  o.alpha = 1;  // the forecast is the last interval
  o.beta = 0;
  return o;
}

// One interval of `requests` requests of 1000 uncached prompt tokens and
// 100 output tokens each, computed by prefill passes of `prefill_seconds`
// and decode steps of `batch` sequences at `step_ms`.
void AddInterval(LoadTotals* t, double requests, double prefill_seconds, double steps,
                 double batch, double step_ms) {
  t->requests += requests;
  t->uncached_prompt_tokens += requests * 1000;
  t->output_tokens += requests * 100;
  t->prefill_step_seconds += prefill_seconds;
  t->decode_steps += steps;
  t->decode_step_sequences += steps * batch;
  t->decode_step_seconds += steps * step_ms / 1e3;
}

bool Has(const std::string& text, const std::string& line) {
  return text.find(line) != std::string::npos;
}

TEST(PlannerTaskTest, PlansEachIntervalsLoadOnTheCapacityItsWorkShowed) {
  LoadTotals totals;
  totals.requests = 1000;  // before the task: not this interval's
  // Calibration far off (workers that calibrated at once on shared cores).
  FleetNow fleet{40, 900};
  services::MetricsRegistry metrics;
  PlannerTask task(Exact(), [&] { return totals; }, [&] { return fleet; }, &metrics);
  // Nothing computed yet: the calibration stands in.
  PlanDecision d = task.Tick();
  EXPECT_EQ(d.prefill.replicas, 1);
  // 30 s of 10 requests/s, 1000 uncached prompt tokens and 100 output
  // tokens each; the prefill workers' passes took 150 s for them (2000
  // tokens/s), the decode workers' 1000 single-sequence steps 20 s.
  AddInterval(&totals, 300, 150, 1000, 1, 20);
  d = task.Tick();
  EXPECT_DOUBLE_EQ(d.requests_per_s, 10);
  EXPECT_EQ(d.prefill.replicas, 9);  // planner_test: 10000 / (2000 x 0.566)
  std::string text = metrics.Render();
  EXPECT_TRUE(Has(text, "kvcast_planner_desired_replicas{role=\"prefill\"} 9")) << text;
  EXPECT_TRUE(Has(text, "kvcast_planner_capacity{quantity=\"prefill_tokens_per_s\"} 2000")) << text;
  EXPECT_TRUE(Has(text, "kvcast_planner_capacity{quantity=\"decode_step_ms\"} 20")) << text;
  EXPECT_TRUE(Has(text, "kvcast_planner_predicted{quantity=\"requests_per_s\"} 10")) << text;

  // Twice the load; decode ran batches of 31 at 50 ms a step: each further
  // sequence costs (50 - 20) / 30 = 1 ms, so a batch of 61 fits the ITL
  // budget, 762.5 tokens/s a worker, for 2000.
  AddInterval(&totals, 600, 300, 1000, 31, 50);
  d = task.Tick();
  EXPECT_DOUBLE_EQ(d.requests_per_s, 20);
  EXPECT_EQ(d.prefill.replicas, 18);
  EXPECT_EQ(d.decode_batch, 61);
  EXPECT_EQ(d.decode.replicas, 3);
  text = metrics.Render();
  EXPECT_TRUE(Has(text, "kvcast_planner_desired_replicas{role=\"decode\"} 3")) << text;
  // The same work, but the prefill workers now report 60000 prompt tokens
  // waiting: demand, and cleared within the next interval (planner_test).
  fleet.prefill_backlog_tokens = 60000;
  AddInterval(&totals, 600, 300, 1000, 31, 50);
  d = task.Tick();
  EXPECT_DOUBLE_EQ(d.uncached_tokens_per_s, 22000);
  EXPECT_EQ(d.prefill.replicas, 22);  // (22000 + 2000) / 1131.6
  EXPECT_TRUE(Has(text, "kvcast_planner_capacity{quantity=\"decode_step_ms_per_seq\"} 1")) << text;
}

TEST(PlannerTaskTest, ItsThreadTicksEveryIntervalAndStopsWithIt) {
  services::MetricsRegistry metrics;
  PlannerOptions o = Exact();
  o.interval = absl::Milliseconds(10);
  o.min_replicas = 3;
  const std::string planned = "kvcast_planner_desired_replicas{role=\"decode\"} 3";
  {
    PlannerTask task(
        o, [] { return LoadTotals{}; }, [] { return FleetNow{}; }, &metrics);
    task.Start();
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (!Has(metrics.Render(), planned) && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(5));
    }
  }  // the destructor stops and joins the thread
  EXPECT_TRUE(Has(metrics.Render(), planned));
}

}  // namespace
}  // namespace kvcast::scheduler
