#include "services/scheduler/planner.h"

#include <cmath>

#include <gtest/gtest.h>

namespace kvcast::scheduler {
namespace {

// One 30 s interval of `requests_per_s` requests, each of `prompt_tokens`
// uncached prompt tokens and `output` output tokens.
IntervalLoad Load(double requests_per_s, double prompt_tokens = 1000, double output = 100) {
  return {requests_per_s * 30, requests_per_s * 30 * prompt_tokens,
          requests_per_s * 30 * output};
}

WorkerCapacity Capacity(double prefill_rate = 2000, double step_ms = 20, double per_seq = 1) {
  return {prefill_rate, step_ms, per_seq};
}

// No smoothing: the forecast is the last interval (tests of the sizing
// and the scale-down delay, apart from the predictor).
PlannerOptions Exact() {
  PlannerOptions o;
  o.alpha = 1;
  o.beta = 0;
  return o;
}

TEST(PlannerTest, SizesEachRoleFromItsCapacityAndTheSlos) {
  Planner p(Exact());
  const PlanDecision d = p.Plan(Load(10), Capacity());
  EXPECT_DOUBLE_EQ(d.requests_per_s, 10);
  EXPECT_DOUBLE_EQ(d.uncached_tokens_per_s, 10000);
  // A 1000-token prompt takes 500 ms (r = 4): the TTFT SLO (2 s) at the
  // 99th percentile allows utilisation k / (1 + k), k = 6 / ln(100) = 1.30:
  // 0.566 (under the headroom's 0.8); 10000 / (2000 * 0.566) = 8.8.
  EXPECT_NEAR(d.prefill_utilisation, 0.5658, 1e-4);
  EXPECT_EQ(d.prefill.replicas, 9) << d.prefill.reason;
  // The ITL budget (100 ms less 20%) fits a batch of 61 (20 + 60 x 1 ms):
  // 762.5 tokens/s a worker, for 1000 tokens/s.
  EXPECT_EQ(d.decode_batch, 61);
  EXPECT_EQ(d.decode.replicas, 2) << d.decode.reason;
  // The same load again: the same plan.
  const PlanDecision again = p.Plan(Load(10), Capacity());
  EXPECT_EQ(again.prefill.replicas, 9);
  EXPECT_EQ(again.decode.replicas, 2);
}

TEST(PlannerTest, ABacklogThatGrewIsDemandAndIsClearedInTheNextInterval) {
  Planner p(Exact());
  // Served: 10 requests/s as above (9 prefill, 2 decode workers), but
  // 60000 prompt tokens and 60 sequences now wait that did not before.
  IntervalLoad saturated = Load(10);
  saturated.prefill_backlog_tokens = 60000;
  saturated.decode_backlog_requests = 60;
  const PlanDecision d = p.Plan(saturated, Capacity());
  // Demand (300000 + 60000) / 30 = 12000 tokens/s, plus 2000/s to clear
  // the backlog: 14000 / 1131.6 = 12.4.
  EXPECT_DOUBLE_EQ(d.uncached_tokens_per_s, 12000);
  EXPECT_EQ(d.prefill.replicas, 13) << d.prefill.reason;
  // Decode: (30000 + 60 x 100) / 30 = 1200 tokens/s of demand, and 200 to
  // clear: 1400 / 762.5 = 1.84 (1000 / 762.5 without the backlog).
  EXPECT_DOUBLE_EQ(d.output_tokens_per_s, 1200);
  EXPECT_NE(d.decode.reason.find("1400 output tokens/s"), std::string::npos) << d.decode.reason;
  EXPECT_EQ(d.decode.replicas, 2) << d.decode.reason;
  // The backlog stays where it was: served is demand again, and it is
  // still cleared (10000 + 2000 tokens/s: 10.6).
  const PlanDecision same = p.Plan(saturated, Capacity());
  EXPECT_DOUBLE_EQ(same.uncached_tokens_per_s, 10000);
  EXPECT_EQ(same.prefill.replicas, 13);  // fewer only after the delay
  EXPECT_EQ(same.prefill.wanted, 11);
}

TEST(PlannerTest, TheTtftSloBoundsUtilisationByTheQueueingDelay) {
  Planner p(Exact());
  // 1000-token prompts at 1000 tokens/s: 1 s each, r = 2, so k = 2 /
  // ln(100) and utilisation k / (1 + k) = 0.303 (M/D/1: a mean wait of
  // 0.22 s, its exponential tail's 99th percentile 1 s);
  // 10000 / (1000 * 0.303) = 33.0.
  const PlanDecision d = p.Plan(Load(10), Capacity(1000));
  const double k = 2 / std::log(100.0);
  EXPECT_NEAR(d.prefill_utilisation, k / (1 + k), 1e-12);
  EXPECT_EQ(d.prefill.replicas, 34) << d.prefill.reason;
  EXPECT_NE(d.prefill.reason.find("utilisation 0.30"), std::string::npos) << d.prefill.reason;
}

TEST(PlannerTest, AnSloNoReplicaCountMeetsIsSaidAndSizedForThroughput) {
  Planner p(Exact());
  // 1000-token prompts at 400 tokens/s: 2.5 s alone, over the 2 s SLO.
  const PlanDecision d = p.Plan(Load(10), Capacity(400, 90, 1));
  EXPECT_NE(d.prefill.reason.find("no replica count meets it"), std::string::npos)
      << d.prefill.reason;
  EXPECT_EQ(d.prefill.replicas, 32);  // 10000 / (400 * 0.8) = 31.25
  // One sequence's step (90 ms) is over the 80 ms budget: batch 1,
  // 11.1 tokens/s a worker, so the maximum.
  EXPECT_EQ(d.decode_batch, 1);
  EXPECT_NE(d.decode.reason.find("no replica count meets it"), std::string::npos)
      << d.decode.reason;
  EXPECT_EQ(d.decode.replicas, 64);
}

TEST(PlannerTest, ARisingLoadIsMetBeforeItArrives) {
  Planner p{PlannerOptions{}};  // Holt's smoothing as configured by default
  PlanDecision d;
  for (int i = 1; i <= 8; ++i) d = p.Plan(Load(2 * i), Capacity());
  // The last interval saw 16 requests/s; the trend predicts more.
  EXPECT_GT(d.requests_per_s, 16);
  EXPECT_LT(d.requests_per_s, 20);
  // A single spike is damped.
  Planner q{PlannerOptions{}};
  for (int i = 0; i < 6; ++i) d = q.Plan(Load(10), Capacity());
  d = q.Plan(Load(30), Capacity());
  EXPECT_GT(d.requests_per_s, 10);
  EXPECT_LT(d.requests_per_s, 30);
}

TEST(PlannerTest, FewerReplicasOnlyAfterTheLoadStayedLow) {
  PlannerOptions o = Exact();
  o.scale_down_after = 3;
  Planner p(o);
  EXPECT_EQ(p.Plan(Load(10), Capacity()).prefill.replicas, 9);
  // Low for two intervals: still 9.
  for (int i = 0; i < 2; ++i) {
    const PlanDecision d = p.Plan(Load(2), Capacity());
    EXPECT_EQ(d.prefill.wanted, 2);
    EXPECT_EQ(d.prefill.replicas, 9);
  }
  // Up again in between: the count starts over.
  EXPECT_EQ(p.Plan(Load(10), Capacity()).prefill.replicas, 9);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(p.Plan(Load(2), Capacity()).prefill.replicas, 9);
  // The third low interval in a row: down to the most any of them asked
  // with the margin (5000 x 1.15 / 1131.6 = 5.1 here).
  EXPECT_EQ(p.Plan(Load(5), Capacity()).prefill.replicas, 6);
  // More is granted at once.
  EXPECT_EQ(p.Plan(Load(20), Capacity()).prefill.replicas, 18);
}

TEST(PlannerTest, ALoadAtACountsEdgeDoesNotFlap) {
  PlannerOptions o = Exact();
  o.scale_down_after = 2;
  Planner p(o);
  EXPECT_EQ(p.Plan(Load(10), Capacity()).prefill.replicas, 9);
  // 8500 tokens/s wants 7.5 -> 8 workers, but with 15% more 8.6 -> 9: held.
  for (int i = 0; i < 6; ++i) {
    const PlanDecision d = p.Plan(Load(8.5), Capacity());
    EXPECT_EQ(d.prefill.wanted, 8);
    EXPECT_EQ(d.prefill.replicas, 9) << i;
  }
  // 7000 tokens/s fits 8 with the margin (7.1): down after the delay.
  EXPECT_EQ(p.Plan(Load(7), Capacity()).prefill.replicas, 9);
  EXPECT_EQ(p.Plan(Load(7), Capacity()).prefill.replicas, 8);
}

TEST(PlannerTest, UnmeasuredCapacityOrNoLoadKeepsTheMinimum) {
  PlannerOptions o = Exact();
  o.min_replicas = 2;
  Planner p(o);
  PlanDecision d = p.Plan(Load(10), WorkerCapacity{});
  EXPECT_EQ(d.prefill.replicas, 2);
  EXPECT_EQ(d.decode.replicas, 2);
  EXPECT_NE(d.prefill.reason.find("no prefill rate measured"), std::string::npos);
  EXPECT_NE(d.decode.reason.find("no decode step time measured"), std::string::npos);
  Planner idle(o);
  d = idle.Plan(IntervalLoad{}, Capacity());
  EXPECT_EQ(d.prefill.replicas, 2);
  EXPECT_EQ(d.decode.replicas, 2);
}

}  // namespace
}  // namespace kvcast::scheduler
