// Starts real kvcast binaries (paths from --scheduler_bin etc., given by the
// BUILD rule) as a 1 prefill + 1 decode cluster with a relay.
#include "tools/cluster/local_cluster.h"

#include <errno.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "kvcast/v1/generation.grpc.pb.h"
#include "tools/cluster/metrics_scrape.h"
#include "tools/tiny_model/tiny_model.h"

namespace kvcast::cluster {
namespace {

std::string g_scheduler_bin, g_prefill_bin, g_decode_bin, g_relay_bin;

std::string TmpDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t != nullptr ? t : "/tmp";
}

ClusterOptions Options(const std::string& name) {
  ClusterOptions o;
  o.model_dir = TmpDir() + "/tiny";
  o.work_dir = TmpDir() + "/" + name;
  o.kv_cache_mb = 64;
  o.scheduler_bin = g_scheduler_bin;
  o.prefill_bin = g_prefill_bin;
  o.decode_bin = g_decode_bin;
  o.relay_bin = g_relay_bin;
  return o;
}

class LocalClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::Status s = WriteTinyModel(TinyModelOptions{}, TmpDir() + "/tiny");
    ASSERT_TRUE(s.ok()) << s;
  }
};

TEST_F(LocalClusterTest, GeneratesThroughTheRelayAndStopsCleanly) {
  auto cluster = LocalCluster::Start(Options("cluster"));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  LocalCluster& c = **cluster;
  ASSERT_NE(c.relay(), nullptr);
  EXPECT_EQ(c.num_workers(Role::kPrefill), 1);
  EXPECT_EQ(c.num_workers(Role::kDecode), 1);
  EXPECT_EQ(c.processes().size(), 4u);

  auto stub = v1::Generation::NewStub(
      grpc::CreateChannel(c.scheduler_address(), grpc::InsecureChannelCredentials()));
  v1::GenerateRequest req;
  for (int i = 0; i < 40; ++i) req.mutable_token_ids()->add_ids(10 + (i * 37) % 240);
  req.set_max_tokens(8);
  req.set_ignore_eos(true);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto reader = stub->Generate(&ctx, req);
  v1::GenerateResponse resp;
  int streamed_tokens = 0;
  v1::Final final;
  bool got_final = false;
  while (reader->Read(&resp)) {
    if (resp.has_delta()) streamed_tokens += resp.delta().token_ids_size();
    if (resp.has_final()) {
      final = resp.final();
      got_final = true;
    }
  }
  grpc::Status st = reader->Finish();
  ASSERT_TRUE(st.ok()) << st.error_code() << ": " << st.error_message() << "\n"
                       << LocalCluster::LogTail(c.scheduler());
  ASSERT_TRUE(got_final);
  EXPECT_EQ(streamed_tokens, 8);
  EXPECT_EQ(final.finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(final.usage().prompt_tokens(), 40);
  EXPECT_EQ(final.usage().generated_tokens(), 8);
  // A fresh cluster holds no chunk of any prompt (and 40 tokens fill none).
  EXPECT_EQ(final.usage().cached_prompt_tokens(), 0);
  EXPECT_GT(final.timings().ttft_ms(), 0);
  EXPECT_GT(final.timings().transfer_bytes(), 0);
  EXPECT_FALSE(final.prefill_worker().empty());
  EXPECT_FALSE(final.decode_worker().empty());

  auto metrics = HttpGet(c.worker(Role::kPrefill, 0).metrics_address, "/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  auto computed = ScrapeMetric(*metrics, "kvcast_prefill_tokens_total", {{"origin", "computed"}});
  ASSERT_TRUE(computed.ok()) << computed.status();
  EXPECT_GT(*computed, 0);

  // A killed worker is reaped at once; the rest stop on SIGTERM.
  const pid_t decode_pid = c.worker(Role::kDecode, 0).pid;
  ASSERT_TRUE(c.Kill(Role::kDecode, 0).ok());
  EXPECT_FALSE(c.Running(Role::kDecode, 0));
  EXPECT_EQ(kill(decode_pid, 0), -1);
  EXPECT_EQ(c.Kill(Role::kDecode, 0).code(), absl::StatusCode::kFailedPrecondition);

  // Restarted with the same flags and ports, it registers again.
  EXPECT_EQ(c.Restart(Role::kPrefill, 0).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(c.Restart(Role::kDecode, 0).ok());
  EXPECT_NE(c.worker(Role::kDecode, 0).pid, decode_pid);
  EXPECT_EQ(c.worker(Role::kDecode, 0).restarts, 1);
  // The only decode worker is the restarted one: a request succeeds again
  // (the first tries may still meet the dead registration).
  grpc::Status again;
  for (int attempt = 0; attempt < 60; ++attempt) {
    grpc::ClientContext ctx2;
    ctx2.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::GenerateResult unary;
    again = stub->GenerateUnary(&ctx2, req, &unary);
    if (again.ok()) break;
    absl::SleepFor(absl::Milliseconds(500));
  }
  EXPECT_TRUE(again.ok()) << again.error_message() << "\n" << LocalCluster::LogTail(c.scheduler());

  // Killed and restarted once more, then stopped at once: the SIGTERM
  // reaches it while it starts (before its handler, which then kills it,
  // or after, when it drains as it would serving): a clean stop either way.
  ASSERT_TRUE(c.Kill(Role::kDecode, 0).ok());
  ASSERT_TRUE(c.Restart(Role::kDecode, 0).ok());
  std::vector<pid_t> pids;
  for (const Process* p : c.processes()) pids.push_back(p->pid);
  absl::Status stopped = c.Stop();
  EXPECT_TRUE(stopped.ok()) << stopped;
  for (pid_t pid : pids) {
    errno = 0;
    EXPECT_EQ(kill(-pid, 0), -1) << "process group " << pid << " still has processes";
    EXPECT_EQ(errno, ESRCH);
  }
  int status;
  EXPECT_EQ(waitpid(-1, &status, WNOHANG), -1);  // no children left at all
  EXPECT_EQ(errno, ECHILD);
}

TEST_F(LocalClusterTest, AnAddedWorkerRegistersAndADrainedOneLeaves) {
  auto cluster = LocalCluster::Start(Options("scaling"));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  LocalCluster& c = **cluster;
  auto added = c.AddWorker(Role::kPrefill);
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_EQ(*added, 1);
  ASSERT_TRUE(c.WaitForWorkers(2, 1, absl::Seconds(60)).ok());
  EXPECT_EQ(c.serving_workers(Role::kPrefill), 2);
  EXPECT_EQ(c.AddWorker(Role::kRelay).status().code(), absl::StatusCode::kInvalidArgument);

  // The newest prefill worker drains: it deregisters and exits 0, which the
  // cluster expects (WaitForWorkers does not call it a crash).
  auto drained = c.DrainWorker(Role::kPrefill);
  ASSERT_TRUE(drained.ok()) << drained.status();
  EXPECT_EQ(*drained, 1);
  EXPECT_EQ(c.serving_workers(Role::kPrefill), 1);
  for (int i = 0; i < 300 && c.Running(Role::kPrefill, 1); ++i) absl::SleepFor(absl::Milliseconds(100));
  ASSERT_FALSE(c.Running(Role::kPrefill, 1)) << LocalCluster::LogTail(c.worker(Role::kPrefill, 1));
  const int status = c.worker(Role::kPrefill, 1).wait_status;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  absl::Status left = c.WaitForWorkers(1, 1, absl::Seconds(30));
  EXPECT_TRUE(left.ok()) << left;
  // The last one of a role can be drained too; then none is left to drain.
  ASSERT_TRUE(c.DrainWorker(Role::kPrefill).ok());
  EXPECT_EQ(c.DrainWorker(Role::kPrefill).status().code(), absl::StatusCode::kFailedPrecondition);
  // Stopped while that one still drains: it is not signalled again.
  absl::Status stopped = c.Stop();
  EXPECT_TRUE(stopped.ok()) << stopped;
}

TEST_F(LocalClusterTest, StartFailsWithTheLogOfAChildThatExits) {
  ClusterOptions o = Options("bad");
  o.relay = false;
  o.scheduler_flags = {"--max_queue=0"};
  auto cluster = LocalCluster::Start(o);
  ASSERT_FALSE(cluster.ok());
  EXPECT_EQ(cluster.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(cluster.status().message(), "scheduler")) << cluster.status();
  EXPECT_TRUE(absl::StrContains(cluster.status().message(), "max_queue")) << cluster.status();
  int status;
  EXPECT_EQ(waitpid(-1, &status, WNOHANG), -1);
}

TEST_F(LocalClusterTest, MissingBinaryIsNotFound) {
  ClusterOptions o = Options("missing");
  o.scheduler_bin = TmpDir() + "/no-such-scheduler";
  auto cluster = LocalCluster::Start(o);
  EXPECT_EQ(cluster.status().code(), absl::StatusCode::kNotFound) << cluster.status();
}

}  // namespace
}  // namespace kvcast::cluster

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  using namespace kvcast::cluster;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    for (auto [flag, dest] : {std::pair{"--scheduler_bin=", &g_scheduler_bin},
                              std::pair{"--prefill_bin=", &g_prefill_bin},
                              std::pair{"--decode_bin=", &g_decode_bin},
                              std::pair{"--relay_bin=", &g_relay_bin}}) {
      if (absl::StartsWith(a, flag)) *dest = a.substr(std::string(flag).size());
    }
  }
  return RUN_ALL_TESTS();
}
