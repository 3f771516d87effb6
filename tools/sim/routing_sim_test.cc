#include "tools/sim/routing_sim.h"

#include "gtest/gtest.h"

namespace kvcast::sim {
namespace {

Workload Small() {
  Workload w;
  w.requests = 3000;
  w.system_prompts = 16;
  return w;
}

Cluster Cluster4x4() {
  Cluster c;
  c.prefill = 4;
  c.decode = 4;
  return c;
}

// The goal, on a small cluster: a system prompt that turns hot has
// one holder; pure affinity queues its traffic there, the router spills it.
TEST(RoutingSim, UnderAHotPrefixTheRouterKeepsHitsAndCutsTheTail) {
  Workload w = Small();
  w.hot_share = 0.4;
  w.hot_period_s = 30;
  const Cluster c = Cluster4x4();
  const CostModel m;
  w.rate = DefaultRate(w, c, m, 0.7);
  auto ours = Simulate(Policy::kKvcast, w, c, m);
  auto affinity = Simulate(Policy::kAffinity, w, c, m);
  ASSERT_TRUE(ours.ok()) << ours.status();
  ASSERT_TRUE(affinity.ok()) << affinity.status();
  EXPECT_GT(ours->hit_rate, affinity->hit_rate - 0.05);
  EXPECT_GT(affinity->ttft_p99_ms, 2 * ours->ttft_p99_ms);
  EXPECT_EQ(ours->requests, 2700);
}

TEST(RoutingSim, AffinityHitsMoreThanRoundRobinAndRoundRobinBalancesDecode) {
  Workload w = Small();
  Cluster c = Cluster4x4();
  c.prefill_cache_chunks = 64;  // a quarter of the system prompts each
  // The costs this scenario was sized for (the model of 2026-11-27): decode
  // steps long enough that batches form, so a balanced assignment shows as
  // balanced batches rather than as the noise of small ones.
  CostModel m;
  m.prefill_tokens_per_s = 1130;
  m.decode_step_ms = {{1, 5.9}, {8, 25.1}, {32, 87.4}};
  w.rate = DefaultRate(w, c, m, 0.5);
  auto rr = Simulate(Policy::kRoundRobin, w, c, m);
  auto affinity = Simulate(Policy::kAffinity, w, c, m);
  ASSERT_TRUE(rr.ok() && affinity.ok());
  EXPECT_GT(affinity->hit_rate, rr->hit_rate + 0.1);
  EXPECT_LT(rr->decode_balance, 1.1);
  // With the relay, every policy reuses every published prefix.
  EXPECT_NEAR(rr->reuse_rate, affinity->reuse_rate, 0.01);
}

// llm-d's profile and Dynamo's cost both follow prefixes (a sign error in a
// scorer or a cost term would scatter them like round-robin) and spread a
// hot prefix's queue (unlike pure affinity).
TEST(RoutingSim, TheLlmdAndDynamoBaselinesFollowPrefixesAndSpreadAHotOne) {
  Workload w = Small();
  Cluster c = Cluster4x4();
  c.prefill_cache_chunks = 64;
  const CostModel m;
  w.rate = DefaultRate(w, c, m, 0.5);
  auto rr = Simulate(Policy::kRoundRobin, w, c, m);
  ASSERT_TRUE(rr.ok());
  for (Policy p : {Policy::kLlmd, Policy::kDynamo}) {
    auto r = Simulate(p, w, c, m);
    ASSERT_TRUE(r.ok()) << PolicyName(p);
    EXPECT_GT(r->hit_rate, rr->hit_rate + 0.1) << PolicyName(p);
  }
  w.hot_share = 0.4;
  w.hot_period_s = 30;
  w.rate = DefaultRate(w, Cluster4x4(), m, 0.7);
  auto affinity = Simulate(Policy::kAffinity, w, Cluster4x4(), m);
  ASSERT_TRUE(affinity.ok());
  for (Policy p : {Policy::kLlmd, Policy::kDynamo}) {
    auto r = Simulate(p, w, Cluster4x4(), m);
    ASSERT_TRUE(r.ok()) << PolicyName(p);
    EXPECT_LT(2 * r->ttft_p99_ms, affinity->ttft_p99_ms) << PolicyName(p);
  }
}

TEST(RoutingSim, TheSameSeedGivesTheSameRun) {
  Workload w = Small();
  w.requests = 500;
  auto a = Simulate(Policy::kKvcast, w, Cluster4x4(), CostModel());
  auto b = Simulate(Policy::kKvcast, w, Cluster4x4(), CostModel());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->ttft_p99_ms, b->ttft_p99_ms);
  EXPECT_EQ(a->hit_rate, b->hit_rate);
  w.seed = 2;
  auto other = Simulate(Policy::kKvcast, w, Cluster4x4(), CostModel());
  ASSERT_TRUE(other.ok());
  EXPECT_NE(a->ttft_p99_ms, other->ttft_p99_ms);
}

TEST(RoutingSim, DecodeStepTimeInterpolatesItsPoints) {
  CostModel m;
  m.decode_step_ms = {{1, 9.5}, {8, 46}, {32, 152}};
  EXPECT_DOUBLE_EQ(m.DecodeStepMs(1), 9.5);
  EXPECT_DOUBLE_EQ(m.DecodeStepMs(8), 46);
  EXPECT_NEAR(m.DecodeStepMs(20), 46 + 12 * (106.0 / 24), 1e-9);
  EXPECT_NEAR(m.DecodeStepMs(64), 152 + 32 * (106.0 / 24), 1e-9);
}

TEST(RoutingSim, TracksCarryTheirMeasuredCosts) {
  CostModel m;
  ASSERT_TRUE(m.ForTrack("int8").ok());
  EXPECT_NEAR(m.kv_bytes_per_token, 23040 * 0.508, 1);
  const double int8_live = m.transfer_bytes_per_s;
  ASSERT_TRUE(m.ForTrack("ac").ok());
  EXPECT_LT(m.transfer_bytes_per_s, int8_live);  // its coder is the limit on this CPU
  EXPECT_EQ(m.ForTrack("zip").code(), absl::StatusCode::kNotFound);
}

TEST(RoutingSim, RefusesWhatCannotRun) {
  Workload w = Small();
  Cluster c = Cluster4x4();
  c.decode_pages = 10;  // a 2K-token prompt needs 150
  EXPECT_EQ(Simulate(Policy::kKvcast, w, c, CostModel()).status().code(),
            absl::StatusCode::kInvalidArgument);
  w.user_tokens_max = 0;
  EXPECT_EQ(Simulate(Policy::kKvcast, w, Cluster4x4(), CostModel()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A short day: arrivals rise 4x and fall, and prompts grow halfway.
Workload ShortDay() {
  Workload w;
  w.day_s = 900;
  w.peak = 4;
  w.system_prompts = 16;
  w.shift_at = 0.5;
  w.shift_user_tokens = 2;
  w.shift_system_prompts = 32;
  w.warmup_fraction = 0;
  Cluster two;
  two.prefill = 2;
  w.rate = DefaultRate(w, two, CostModel(), 0.6);
  return w;
}

TEST(RoutingSim, ThePlannerFollowsTheDayAndDrainedWorkersFinishTheirWork) {
  const Workload w = ShortDay();
  Cluster c;
  c.prefill = 10;
  c.decode = 6;
  auto fixed = Simulate(Policy::kKvcast, w, c, CostModel());
  Scaling s;
  s.scaler = Scaler::kPlanner;
  s.start_latency_s = 30;
  auto planned = Simulate(Policy::kKvcast, w, c, CostModel(), s);
  // Every request ended (Simulate fails otherwise), also those routed to
  // workers scaled down before they finished.
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  ASSERT_TRUE(planned.ok()) << planned.status();
  EXPECT_EQ(planned->requests, fixed->requests);
  EXPECT_NEAR(fixed->prefill_worker_hours, 10 * fixed->simulated_s / 3600, 0.05);
  EXPECT_EQ(fixed->prefill_changes, 0);
  EXPECT_TRUE(fixed->timeline.empty());
  // The planner's counts rise toward midday and fall after it.
  ASSERT_GE(planned->timeline.size(), 30u);  // 900 s in 30 s intervals, and the last ones' ends
  int most = 0, at = 0;
  for (size_t i = 0; i < planned->timeline.size(); ++i) {
    if (planned->timeline[i].prefill > most) most = planned->timeline[i].prefill, at = int(i);
  }
  EXPECT_GT(most, planned->timeline.front().prefill);
  EXPECT_GT(most, planned->timeline.back().prefill);
  EXPECT_GT(at, 5);
  EXPECT_LT(at, 25);
  EXPECT_GT(planned->prefill_changes, 2);
  EXPECT_LT(planned->prefill_worker_hours, fixed->prefill_worker_hours);
  EXPECT_GT(planned->slo_met, 0.5);
}

TEST(RoutingSim, AHopelessRunStopsAtItsMisses) {
  const Workload w = ShortDay();
  Cluster c;
  c.prefill = 1;  // a quarter of midday's work
  c.decode = 1;
  Scaling s;
  s.max_misses = 100;
  auto r = Simulate(Policy::kKvcast, w, c, CostModel(), s);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->abandoned);
  EXPECT_LT(r->simulated_s, w.day_s);
  EXPECT_NEAR(r->slo_met, 1 - 101.0 / r->requests, 1e-9);
  s.scaler = Scaler::kHpa;
  s.max_misses = -1;
  EXPECT_EQ(Simulate(Policy::kLlmd, w, c, CostModel(), s).status().code(),
            absl::StatusCode::kInvalidArgument);  // scaling needs the kvcast policy
}

}  // namespace
}  // namespace kvcast::sim
