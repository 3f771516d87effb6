#include "services/scheduler/scheduler_server.h"

#include <thread>

#include "gtest/gtest.h"

namespace kvcast::scheduler {
namespace {

SchedulerServerOptions Loopback() {
  SchedulerServerOptions o;
  o.grpc_listen = "127.0.0.1:0";
  o.metrics_listen = "127.0.0.1:0";
  o.http_listen = "127.0.0.1:0";
  o.drain = absl::Seconds(1);
  return o;
}

std::string Refusal(const SchedulerServerOptions& o) {
  const absl::Status s = ValidateSchedulerOptions(o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  return std::string(s.message());
}

TEST(SchedulerServerTest, EachBadOptionIsRefusedNamingItsFlag) {
  EXPECT_TRUE(ValidateSchedulerOptions(Loopback()).ok());
  SchedulerServerOptions o = Loopback();
  o.generation.max_queue = 0;
  EXPECT_NE(Refusal(o).find("--max_queue"), std::string::npos);
  o = Loopback();
  o.generation.tenant_limits.max_in_flight = -1;
  EXPECT_NE(Refusal(o).find("--tenant_max_in_flight"), std::string::npos);
  o = Loopback();
  o.generation.compression = "fp7";
  EXPECT_NE(Refusal(o).find("--kv_compression"), std::string::npos);
  o = Loopback();
  o.registry.router.fuse_tokens = -1;
  EXPECT_NE(Refusal(o).find("--pd_fusion_tokens"), std::string::npos);
  o = Loopback();
  o.generation.decode_stall_floor = absl::ZeroDuration();
  EXPECT_NE(Refusal(o).find("--decode_stall_s"), std::string::npos);
  o = Loopback();
  o.generation.kv_token_ttl = absl::ZeroDuration();
  EXPECT_NE(Refusal(o).find("--kv_token_ttl_s"), std::string::npos);
  o = Loopback();
  o.planner.slo_itl_ms = 0;
  EXPECT_NE(Refusal(o).find("--slo_itl_ms"), std::string::npos);
  o = Loopback();
  o.planner.interval = absl::Seconds(-1);
  EXPECT_NE(Refusal(o).find("--planner_interval_s"), std::string::npos);
}

TEST(SchedulerServerTest, ServesUntilShutdownThenDrains) {
  auto signal = services::ShutdownSignal::Create();
  ASSERT_TRUE(signal.ok()) << signal.status();
  absl::Status result = absl::UnknownError("still running");
  std::thread run([&] { result = RunScheduler(Loopback(), signal->get()); });
  absl::SleepFor(absl::Milliseconds(300));
  (*signal)->Trigger();
  run.join();
  EXPECT_TRUE(result.ok()) << result;
}

TEST(SchedulerServerTest, AFileItCannotReadEndsItBeforeServing) {
  auto signal = services::ShutdownSignal::Create();
  ASSERT_TRUE(signal.ok()) << signal.status();
  SchedulerServerOptions o = Loopback();
  o.api_keys_file = "/nonexistent/keys";
  const absl::Status s = RunScheduler(o, signal->get());  // returns at once
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("/nonexistent/keys"), std::string::npos) << s;
  o = Loopback();
  o.generation.max_queue = 0;
  EXPECT_EQ(RunScheduler(o, signal->get()).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvcast::scheduler
