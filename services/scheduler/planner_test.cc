#include "services/scheduler/planner.h"

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
  // A 1000-token prompt takes 500 ms: the TTFT SLO (2 s) allows utilisation
  // 6/7, the headroom 0.8; 10000 / (2000 * 0.8) = 6.25.
  EXPECT_DOUBLE_EQ(d.prefill_utilisation, 0.8);
  EXPECT_EQ(d.prefill.replicas, 7) << d.prefill.reason;
  // The ITL budget (100 ms less 20%) fits a batch of 61 (20 + 60 x 1 ms):
  // 762.5 tokens/s a worker, for 1000 tokens/s.
  EXPECT_EQ(d.decode_batch, 61);
  EXPECT_EQ(d.decode.replicas, 2) << d.decode.reason;
  // The same load again: the same plan.
  const PlanDecision again = p.Plan(Load(10), Capacity());
  EXPECT_EQ(again.prefill.replicas, 7);
  EXPECT_EQ(again.decode.replicas, 2);
}

TEST(PlannerTest, TheTtftSloBoundsUtilisationByTheQueueingDelay) {
  Planner p(Exact());
  // 1000-token prompts at 1000 tokens/s: 1 s each, r = 2, so utilisation
  // 2/3 (M/D/1: a mean wait of one second); 10000 / (1000 * 2/3) = 15.
  const PlanDecision d = p.Plan(Load(10), Capacity(1000));
  EXPECT_NEAR(d.prefill_utilisation, 2.0 / 3, 1e-12);
  EXPECT_EQ(d.prefill.replicas, 15) << d.prefill.reason;
  EXPECT_NE(d.prefill.reason.find("utilisation 0.67"), std::string::npos) << d.prefill.reason;
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
  EXPECT_EQ(p.Plan(Load(10), Capacity()).prefill.replicas, 7);
  // Low for two intervals: still 7.
  for (int i = 0; i < 2; ++i) {
    const PlanDecision d = p.Plan(Load(2), Capacity());
    EXPECT_EQ(d.prefill.wanted, 2);
    EXPECT_EQ(d.prefill.replicas, 7);
  }
  // Up again in between: the count starts over.
  EXPECT_EQ(p.Plan(Load(10), Capacity()).prefill.replicas, 7);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(p.Plan(Load(2), Capacity()).prefill.replicas, 7);
  // The third low interval in a row: down to the most any of them asked
  // (5000 / 1600 = 3.1 here).
  EXPECT_EQ(p.Plan(Load(5), Capacity()).prefill.replicas, 4);
  // More is granted at once.
  EXPECT_EQ(p.Plan(Load(20), Capacity()).prefill.replicas, 13);
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
