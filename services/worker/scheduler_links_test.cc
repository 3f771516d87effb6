#include "services/worker/scheduler_links.h"

#include <thread>

#include "gtest/gtest.h"
#include "services/common/grpc_server.h"
#include "services/scheduler/worker_registry.h"

namespace kvcast::worker {
namespace {

// A scheduler replica: the real Registry service on a loopback port.
struct Replica {
  Replica() {
    scheduler::WorkerRegistry::Options o;
    o.make_channel = [](const std::string&) { return nullptr; };
    registry = std::make_unique<scheduler::WorkerRegistry>(std::move(o));
    auto s = services::GrpcServer::Start(
        {"127.0.0.1:0"}, {{v1::Registry::service_full_name(), registry.get()}});
    EXPECT_TRUE(s.ok()) << s.status();
    server = std::move(*s);
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(server->port()); }
  std::unique_ptr<scheduler::WorkerRegistry> registry;
  std::unique_ptr<services::GrpcServer> server;
};

v1::WorkerInfo Info() {
  v1::WorkerInfo info;
  info.set_worker_id("w1");
  info.set_role(v1::WORKER_ROLE_PREFILL);
  info.set_grpc_address("127.0.0.1:1");
  info.set_model_id(Hash128{1, 2}.ToHex());
  info.set_chunk_tokens(128);
  info.set_page_tokens(16);
  return info;
}

SchedulerLinks::Options OptionsFor(const std::string& scheduler) {
  SchedulerLinks::Options o;
  o.scheduler = scheduler;
  o.creds = grpc::InsecureChannelCredentials();
  o.heartbeat = absl::Milliseconds(50);
  o.worker_id = "w1";
  o.info = Info;
  o.load = [] { return v1::WorkerLoad(); };
  return o;
}

// Polls `done` for up to 10 s.
bool Eventually(const std::function<bool()>& done) {
  for (int i = 0; i < 200; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return done();
}

TEST(SchedulerLinksTest, EveryReplicaGetsTheSnapshotAndTheEvents) {
  Replica a, b;
  SchedulerLinks links;
  links.Record(true, Hash128{7, 0}, v1::KV_TIER_DISK);  // held before registering
  ASSERT_TRUE(links.Start(OptionsFor(a.address() + "," + b.address())).ok());
  ASSERT_TRUE(Eventually([&] { return links.registered() == 2; }));
  for (Replica* r : {&a, &b}) {
    EXPECT_EQ(r->registry->counts().prefill, 1);
    EXPECT_EQ(r->registry->counts().prefill_chunks, 1u);
  }
  links.Record(true, Hash128{8, 0}, v1::KV_TIER_HOST);
  links.Record(true, Hash128{9, 0}, v1::KV_TIER_HOST);
  links.Record(false, Hash128{7, 0}, v1::KV_TIER_DISK);
  links.Record(false, Hash128{7, 0}, v1::KV_TIER_DISK);  // not held: no event
  for (Replica* r : {&a, &b}) {
    EXPECT_TRUE(Eventually([&] { return r->registry->counts().prefill_chunks == 2; }));
  }
  links.Stop();
  EXPECT_EQ(links.registered(), 0);
  for (Replica* r : {&a, &b}) EXPECT_EQ(r->registry->counts().prefill, 0) << "deregistered";
}

TEST(SchedulerLinksTest, APublishedPromptReachesEveryReplica) {
  Replica a, b;
  SchedulerLinks links;
  ASSERT_TRUE(links.Start(OptionsFor(a.address() + "," + b.address())).ok());
  ASSERT_TRUE(Eventually([&] { return links.registered() == 2; }));
  std::vector<Hash128> chain;
  for (int i = 0; i < 3; ++i) chain.push_back(Hash128{31, uint64_t(i)});
  links.Published(std::string(32, 'd'), chain);
  for (Replica* r : {&a, &b}) {
    // A decode worker, so that the replica routes.
    v1::RegisterRequest req;
    *req.mutable_worker() = Info();
    req.mutable_worker()->set_worker_id("d1");
    req.mutable_worker()->set_role(v1::WORKER_ROLE_DECODE);
    v1::RegisterResponse resp;
    ASSERT_TRUE(r->registry->Register(nullptr, &req, &resp).ok());
    // A longer prompt sharing the 3 chunks: the replica knows where to fetch them.
    std::vector<Hash128> longer = chain;
    longer.push_back(Hash128{99, 9});
    EXPECT_TRUE(Eventually([&] {
      auto route = r->registry->Choose(longer, 5 * 128, 4, {});
      bool hit = route.ok() && route->reuse.groups == 3 &&
                 route->reuse.prompt_digest == std::string(32, 'd');
      if (route.ok()) r->registry->Release(&*route);
      return hit;
    }));
  }
  links.Stop();
}

TEST(SchedulerLinksTest, AReplicaThatComesBackGetsAFreshSnapshot) {
  auto a = std::make_unique<Replica>();
  const std::string address = a->address();
  SchedulerLinks links;
  ASSERT_TRUE(links.Start(OptionsFor(address)).ok());
  ASSERT_TRUE(Eventually([&] { return links.registered() == 1; }));
  // The replica restarts (an empty registry on the same port) while the
  // worker stores a chunk: the new one learns it from the registration.
  const int port = a->server->port();
  a.reset();
  links.Record(true, Hash128{5, 5}, v1::KV_TIER_HOST);
  scheduler::WorkerRegistry::Options ro;
  ro.make_channel = [](const std::string&) { return nullptr; };
  scheduler::WorkerRegistry registry(std::move(ro));
  auto server = services::GrpcServer::Start({"127.0.0.1:" + std::to_string(port)},
                                            {{v1::Registry::service_full_name(), &registry}});
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_TRUE(Eventually([&] { return registry.counts().prefill_chunks == 1; }));
  links.Stop();
}

TEST(SchedulerLinksTest, TargetsAreParsedAndResolved) {
  auto t = ParseSchedulerTargets("a.example:1, [::1]:50052,10.0.0.1:9");
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->size(), 3u);
  EXPECT_EQ((*t)[0].host, "a.example");
  EXPECT_EQ((*t)[1].host, "::1");
  EXPECT_EQ((*t)[1].port, 50052);
  for (const char* bad : {"", "host", "host:0", "host:70000", ":5", "[::1:5"}) {
    EXPECT_FALSE(ParseSchedulerTargets(bad).ok()) << bad;
  }
  auto r = ResolveReplicas({"localhost", 7});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, std::vector<std::string>{"127.0.0.1:7"}) << "IPv4 first, no ::1 twin";
  r = ResolveReplicas({"::1", 7});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, std::vector<std::string>{"[::1]:7"});
  EXPECT_FALSE(ResolveReplicas({"no-such-host.invalid", 7}).ok());
}

}  // namespace
}  // namespace kvcast::worker
