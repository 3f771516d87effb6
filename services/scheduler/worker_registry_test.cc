#include "services/scheduler/worker_registry.h"

#include <thread>

#include "gtest/gtest.h"

namespace kvcast::scheduler {
namespace {

constexpr int kChunk = 128;

class WorkerRegistryTest : public testing::Test {
 protected:
  WorkerRegistryTest() {
    WorkerRegistry::Options o;
    o.make_channel = [](const std::string&) { return nullptr; };
    registry_ = std::make_unique<WorkerRegistry>(std::move(o));
    Register("prefill-a", v1::WORKER_ROLE_PREFILL, {});
    Register("prefill-b", v1::WORKER_ROLE_PREFILL, {});
    Register("decode", v1::WORKER_ROLE_DECODE, {});
  }

  void Register(const std::string& id, v1::WorkerRole role, const std::vector<Hash128>& held,
                v1::KvTier tier = v1::KV_TIER_GPU) {
    v1::RegisterRequest req;
    v1::WorkerInfo* info = req.mutable_worker();
    info->set_worker_id(id);
    info->set_role(role);
    info->set_grpc_address(id + ":1");
    info->set_model_id(Hash128{1, 2}.ToHex());
    info->set_chunk_tokens(kChunk);
    info->set_page_tokens(16);
    req.mutable_load()->set_free_pages(1000);
    for (const Hash128& h : held) {
      req.add_cached_chunks(HashToBytes(h));
      req.add_cached_chunk_tiers(tier);
    }
    v1::RegisterResponse resp;
    ASSERT_TRUE(registry_->Register(nullptr, &req, &resp).ok());
  }

  void Report(const std::string& id, int64_t queued_tokens, int queued) {
    v1::HeartbeatRequest req;
    req.set_worker_id(id);
    req.mutable_load()->set_free_pages(1000);
    req.mutable_load()->set_queued(queued);
    req.mutable_load()->set_queued_tokens(queued_tokens);
    v1::HeartbeatResponse resp;
    ASSERT_TRUE(registry_->Heartbeat(nullptr, &req, &resp).ok());
  }

  // A heartbeat with the worker's cumulative totals.
  void ReportTotals(const std::string& id, int64_t sequences, int64_t prompt_tokens,
                    int64_t generated, double step_seconds = 0, int64_t steps = 0) {
    v1::HeartbeatRequest req;
    req.set_worker_id(id);
    v1::WorkerLoad* load = req.mutable_load();
    load->set_free_pages(1000);
    load->set_sequences_total(sequences);
    load->set_prompt_tokens_computed_total(prompt_tokens);
    load->set_tokens_generated_total(generated);
    load->set_step_seconds_total(step_seconds);
    load->set_steps_total(steps);
    load->set_step_sequences_total(2 * steps);
    v1::HeartbeatResponse resp;
    ASSERT_TRUE(registry_->Heartbeat(nullptr, &req, &resp).ok());
  }

  // The prefill worker a fresh 1000-token prompt goes to.
  Route Cold(uint64_t salt) {
    std::vector<Hash128> chain;
    for (int i = 0; i < 7; ++i) chain.push_back(Hash128{salt, uint64_t(i)});
    auto route = registry_->Choose(chain, 1000, 16, {});
    EXPECT_TRUE(route.ok() && route->prefill);
    return *route;
  }

  std::unique_ptr<WorkerRegistry> registry_;
};

TEST_F(WorkerRegistryTest, WorkDoneAddsWhatEachWorkersTotalsGrewBy) {
  ReportTotals("prefill-a", 1, 1000, 1, 0.5, 8);
  ReportTotals("decode", 1, 0, 10, 0.2, 10);
  ReportTotals("prefill-a", 2, 1500, 2, 0.75, 12);
  ReportTotals("prefill-b", 1, 300, 1, 0.25, 3);
  WorkerRegistry::Work w = registry_->WorkDone();
  EXPECT_EQ(w.requests, 1);  // requests are counted where they decode
  EXPECT_EQ(w.prefill_prompt_tokens, 1800);
  EXPECT_EQ(w.generated_tokens, 13);
  EXPECT_DOUBLE_EQ(w.prefill_step_seconds, 1.0);
  EXPECT_EQ(w.decode_steps, 10);
  EXPECT_EQ(w.decode_step_sequences, 20);
  EXPECT_DOUBLE_EQ(w.decode_step_seconds, 0.2);
  // A worker older than this scheduler: only what it does from now on.
  v1::RegisterRequest req;
  v1::WorkerInfo* info = req.mutable_worker();
  info->set_worker_id("decode-old");
  info->set_role(v1::WORKER_ROLE_DECODE);
  info->set_grpc_address("decode-old:1");
  info->set_model_id(Hash128{1, 2}.ToHex());
  info->set_chunk_tokens(kChunk);
  info->set_page_tokens(16);
  req.mutable_load()->set_sequences_total(500);
  req.mutable_load()->set_tokens_generated_total(50000);
  v1::RegisterResponse resp;
  ASSERT_TRUE(registry_->Register(nullptr, &req, &resp).ok());
  ReportTotals("decode-old", 503, 0, 50040);
  w = registry_->WorkDone();
  EXPECT_EQ(w.requests, 4);
  EXPECT_EQ(w.generated_tokens, 53);
}

TEST_F(WorkerRegistryTest, APromptsWorkCountsOnItsPrefillWorkerUntilItAnswers) {
  Route first = Cold(1);
  Route second = Cold(2);
  EXPECT_NE(first.prefill->worker_id, second.prefill->worker_id);
  EXPECT_DOUBLE_EQ(first.prefill_plan.work, 1000);
  // The second prefill answered: its worker is free again while the
  // request still decodes, and takes the next prompt (a tie would go where
  // the first went).
  registry_->PrefillAnswered(&second);
  Route third = Cold(3);
  EXPECT_EQ(third.prefill->worker_id, second.prefill->worker_id);
  registry_->Release(&first);
  registry_->Release(&second);
  registry_->Release(&third);
  // Everything released: a tie again.
  EXPECT_EQ(Cold(4).prefill->worker_id, first.prefill->worker_id);
}

TEST_F(WorkerRegistryTest, AReportedQueueAndTheDispatchedWorkAreNotAddedUp) {
  Route first = Cold(1);
  const std::string x = first.prefill->worker_id;
  const std::string y = x == "prefill-a" ? "prefill-b" : "prefill-a";
  // x's heartbeat now reports that same prompt as queued; y has 1500 tokens
  // queued by another scheduler.
  Report(x, 1000, 1);
  Report(y, 1500, 1);
  // x: 1000 + max(1000, 1000) = 2000 < y: 1000 + 1500 (counting x's prompt
  // twice would give 3000).
  EXPECT_EQ(Cold(2).prefill->worker_id, x);
}

// A worker's report lags: requests this scheduler saw end since it are
// taken off it at once, while load from other schedulers in it still
// counts.
TEST_F(WorkerRegistryTest, RequestsEndedSinceAReportComeOffItsLoadAtOnce) {
  Register("decode-b", v1::WORKER_ROLE_DECODE, {});
  auto report = [&](const std::string& id, int running, int free_pages) {
    v1::HeartbeatRequest req;
    req.set_worker_id(id);
    req.mutable_load()->set_free_pages(free_pages);
    req.mutable_load()->set_running(running);
    v1::HeartbeatResponse resp;
    ASSERT_TRUE(registry_->Heartbeat(nullptr, &req, &resp).ok());
  };
  // decode-b runs two requests of another scheduler's (and has more free
  // pages, which only breaks ties).
  report("decode-b", 2, 2000);
  Route first = Cold(1), second = Cold(2);
  ASSERT_EQ(first.decode.worker_id, "decode");
  ASSERT_EQ(second.decode.worker_id, "decode");
  report("decode", 2, 1000);  // those two
  registry_->Release(&first);
  registry_->Release(&second);
  // Before decode's next heartbeat it is idle, against decode-b's two (its
  // report taken as it is would tie them, and the tie go to decode-b).
  Route third = Cold(3);
  EXPECT_EQ(third.decode.worker_id, "decode");
  // decode-b's requests still count: with one of ours on decode, the next
  // goes there too (1 < 2), not to decode-b as if idle.
  Route fourth = Cold(4);
  EXPECT_EQ(fourth.decode.worker_id, "decode");
  registry_->Release(&third);
  registry_->Release(&fourth);
}

TEST_F(WorkerRegistryTest, TheHolderOfAPrefixKeepsItUnderModerateLoad) {
  std::vector<Hash128> chain;
  for (int i = 0; i < 7; ++i) chain.push_back(Hash128{9, uint64_t(i)});
  Register("prefill-b", v1::WORKER_ROLE_PREFILL, chain);  // b restarts holding it
  Report("prefill-b", 1500, 3);
  auto route = registry_->Choose(chain, 1000, 16, {});
  ASSERT_TRUE(route.ok());
  // b computes 104 tokens after 1500 queued; a would compute 1000 at once,
  // 896 more tokens of cluster work, charged 5x: b keeps it.
  EXPECT_EQ(route->prefill->worker_id, "prefill-b");
  EXPECT_EQ(route->prefill_plan.cached_chunks, 7);
  // Queued far enough, it spills.
  Report("prefill-b", 6000, 12);
  route = registry_->Choose(chain, 1000, 16, {});
  ASSERT_TRUE(route.ok());
  EXPECT_EQ(route->prefill->worker_id, "prefill-a");
}

TEST_F(WorkerRegistryTest, AHolderInItsPoolBeatsOneThatMustPromoteFromDisk) {
  std::vector<Hash128> chain;
  for (int i = 0; i < 7; ++i) chain.push_back(Hash128{11, uint64_t(i)});
  Register("prefill-a", v1::WORKER_ROLE_PREFILL, chain, v1::KV_TIER_DISK);
  Register("prefill-b", v1::WORKER_ROLE_PREFILL, chain, v1::KV_TIER_GPU);
  auto route = registry_->Choose(chain, 1000, 16, {});
  ASSERT_TRUE(route.ok());
  EXPECT_EQ(route->prefill->worker_id, "prefill-b");
  // a's chunks come up to its pool (a heartbeat's KV event): a tie, and a
  // was registered first.
  v1::HeartbeatRequest hb;
  hb.set_worker_id("prefill-a");
  v1::KvEvent* e = hb.add_events();
  e->set_kind(v1::KvEvent::KIND_STORED);
  e->set_tier(v1::KV_TIER_GPU);
  for (const Hash128& h : chain) e->add_chunk_hashes(HashToBytes(h));
  v1::HeartbeatResponse resp;
  ASSERT_TRUE(registry_->Heartbeat(nullptr, &hb, &resp).ok());
  registry_->Release(&*route);
  route = registry_->Choose(chain, 1000, 16, {});
  ASSERT_TRUE(route.ok());
  EXPECT_EQ(route->prefill->worker_id, "prefill-a");
}

// Speculative prefixes: a prompt routed to a worker counts as held there
// before the worker's KV events can say so, and only until they can.
TEST_F(WorkerRegistryTest, ARoutedPromptCountsAsHeldOnItsWorkerUntilItsEventsCanSaySo) {
  std::vector<Hash128> chain;
  for (int i = 0; i < 8; ++i) chain.push_back(Hash128{21, uint64_t(i)});
  auto first = registry_->Choose(chain, 1000, 16, {});
  ASSERT_TRUE(first.ok() && first->prefill);
  EXPECT_EQ(first->prefill_plan.cached_chunks, 0);
  const std::string x = first->prefill->worker_id;
  registry_->PrefillAnswered(&*first);
  // The next prompt with the same 7 reusable chunks (1000 tokens: the last
  // chunk is computed) goes to x and reuses them, though x has reported
  // nothing yet.
  chain.back() = Hash128{22, 7};
  auto second = registry_->Choose(chain, 1000, 16, {});
  ASSERT_TRUE(second.ok() && second->prefill);
  EXPECT_EQ(second->prefill->worker_id, x);
  EXPECT_EQ(second->prefill_plan.cached_chunks, 7);
  registry_->Release(&*first);
  registry_->Release(&*second);
  // x heartbeats twice after both prefills answered, without a KV event
  // for them: it did not keep them, and nothing is held any more.
  Report(x, 0, 0);
  Report(x, 0, 0);
  auto third = registry_->Choose(chain, 1000, 16, {});
  ASSERT_TRUE(third.ok() && third->prefill);
  EXPECT_EQ(third->prefill_plan.cached_chunks, 0);
}

}  // namespace
}  // namespace kvcast::scheduler

namespace kvcast::scheduler {
namespace {

TEST_F(WorkerRegistryTest, ALeaseCountsItsRouteUntilItEndsAndReleasesOnce) {
  std::vector<Hash128> chain;
  for (int i = 0; i < 7; ++i) chain.push_back(Hash128{9, uint64_t(i)});
  {
    auto lease = registry_->Lease(chain, 1000, 16, {});
    ASSERT_TRUE(lease.ok() && (*lease)->prefill);
    EXPECT_EQ((*lease)->prefill->worker_id, "prefill-a");
    // While held, prefill-a is busier: the next prompt goes to prefill-b.
    Route other = Cold(1);
    EXPECT_EQ(other.prefill->worker_id, "prefill-b");
    registry_->Release(&other);
    RouteLease moved = std::move(*lease);  // released once, by `moved`
  }
  // Released: a tie again, which goes to prefill-a (a leaked lease would
  // send it to prefill-b)...
  Route a = Cold(2);
  EXPECT_EQ(a.prefill->worker_id, "prefill-a");
  // ...which now holds exactly that one (a double release would have left
  // it below zero, and it would take this one too).
  EXPECT_EQ(Cold(3).prefill->worker_id, "prefill-b");
}

TEST_F(WorkerRegistryTest, AwaitChangeWakesWhenASuspendedWorkerHeartbeats) {
  auto route = registry_->Choose({}, 10, 4, {});
  ASSERT_TRUE(route.ok());
  registry_->MarkFailed(route->decode.slot);
  registry_->Release(&*route);
  EXPECT_FALSE(registry_->Choose({}, 10, 4, {}).ok());  // the only decode worker
  const uint64_t seen = registry_->version();
  // Nothing changes: the wait ends at its deadline.
  EXPECT_FALSE(registry_->AwaitChange(seen, absl::Now() + absl::Milliseconds(50)));
  // A heartbeat that does not revive anyone (a prefill worker) is no change.
  Report("prefill-a", 0, 0);
  EXPECT_FALSE(registry_->AwaitChange(seen, absl::Now() + absl::Milliseconds(50)));
  std::thread beat([this] {
    absl::SleepFor(absl::Milliseconds(50));
    Report("decode", 0, 0);
  });
  const absl::Time t0 = absl::Now();
  EXPECT_TRUE(registry_->AwaitChange(seen, absl::Now() + absl::Seconds(10)));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
  beat.join();
  EXPECT_TRUE(registry_->Choose({}, 10, 4, {}).ok());
}

}  // namespace
}  // namespace kvcast::scheduler
