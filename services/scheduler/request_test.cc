// RequestRun driven directly (no Generation server): what the client is
// sent, message by message; what a refusal carries; a client that goes away;
// waiting for a decode worker. The workers are in-process fakes speaking
// the real protocol (testing/fake_cluster.h); the orchestration through the
// service (retries, stalls, PD fusion) is generation_service_test's.
#include "services/scheduler/request.h"

#include <chrono>
#include <map>
#include <thread>

#include "grpcpp/test/server_context_test_spouse.h"
#include "gtest/gtest.h"
#include "services/scheduler/testing/fake_cluster.h"

namespace kvcast::scheduler {
namespace {

using testing::Eventually;
using testing::FakeScript;
using testing::FakeWorker;
using testing::NextToken;
using Fault = FakeScript::Fault;

v1::GenerateRequest Request(int prompt_tokens, int max_tokens, std::string tenant = "") {
  v1::GenerateRequest r;
  for (int i = 0; i < prompt_tokens; ++i) r.mutable_token_ids()->add_ids(10 + (i * 31) % 900);
  r.set_max_tokens(max_tokens);
  r.set_tenant(std::move(tenant));
  return r;
}

struct Ran {
  grpc::Status status;
  std::vector<v1::GenerateResponse> messages;  // as emitted
  bool queue_full = false;
  std::multimap<std::string, std::string> trailers;
  double seconds = 0;
  std::string Trailer(const std::string& key) const {
    auto it = trailers.find(key);
    return it == trailers.end() ? "" : it->second;
  }
};

class RequestRunTest : public ::testing::Test {
 protected:
  RequestRunTest() : metrics_(RegisterSchedulerMetrics(&registry_)) {}

  // Runs `r` to its end on this thread; `client` sees each message and
  // returns false once it has gone away.
  Ran Run(const v1::GenerateRequest& r,
          std::function<bool(const v1::GenerateResponse&)> client = nullptr) {
    if (!admission_) admission_ = std::make_unique<Admission>(options_.max_queue, options_.tenant_limits);
    const RequestServices services{cluster_.registry(), nullptr,    &options_, admission_.get(),
                                   &grammars_,          &watchdog_, &metrics_};
    Ran out;
    const RequestRun::Emit emit = [&](const v1::GenerateResponse& m) {
      out.messages.push_back(m);
      return client == nullptr || client(m);
    };
    grpc::ServerContext ctx;
    RequestRun run(services, &ctx, r, "req-test", emit);
    const auto t0 = std::chrono::steady_clock::now();
    out.status = run.Run();
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    out.queue_full = run.queue_full();
    out.trailers = grpc::testing::ServerContextTestSpouse(&ctx).GetTrailingMetadata();
    return out;
  }

  testing::FakeCluster cluster_;
  GenerationOptions options_;
  std::unique_ptr<Admission> admission_;  // from options_, at the first Run
  GrammarCache grammars_;
  StallWatchdog watchdog_;
  services::MetricsRegistry registry_;
  SchedulerMetrics metrics_;
};

TEST_F(RequestRunTest, TheClientGetsTheFirstTokenThenOneDeltaPerTokenThenAFinal) {
  cluster_.Prefill("prefill-0");
  cluster_.Decode("decode-0");
  const Ran ran = Run(Request(300, 6));
  ASSERT_TRUE(ran.status.ok()) << ran.status.error_message();
  ASSERT_EQ(ran.messages.size(), 7u);
  for (int i = 0; i < 6; ++i) {
    const v1::GenerateResponse& m = ran.messages[i];
    ASSERT_TRUE(m.has_delta()) << i;
    ASSERT_EQ(m.delta().token_ids_size(), 1) << i;
    EXPECT_EQ(m.delta().token_ids(0), NextToken(300 + i)) << i;
    // The prompt's counts come with the first token (TTFT), once.
    EXPECT_EQ(m.delta().prompt_tokens(), i == 0 ? 300 : 0) << i;
    EXPECT_FALSE(m.has_final()) << i;
  }
  const v1::Final& f = ran.messages.back().final();
  EXPECT_EQ(f.finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(f.request_id(), "req-test");
  EXPECT_EQ(f.prefill_worker(), "prefill-0");
  EXPECT_EQ(f.decode_worker(), "decode-0");
  EXPECT_EQ(f.retries(), 0);
  EXPECT_EQ(f.usage().prompt_tokens(), 300);
  EXPECT_EQ(f.usage().generated_tokens(), 6);
  EXPECT_GT(f.timings().ttft_ms(), 0);
  EXPECT_GE(f.timings().e2e_ms(), f.timings().ttft_ms());
  EXPECT_GT(f.timings().mean_tbt_ms(), 0);
  EXPECT_EQ(admission_->in_flight(), 0);  // its ticket given back
  const std::string text = registry_.Render();
  EXPECT_NE(text.find("kvcast_generated_tokens_total 6\n"), std::string::npos) << text;
  EXPECT_NE(text.find("kvcast_prompt_tokens_total 300\n"), std::string::npos) << text;
}

TEST_F(RequestRunTest, AClientThatGoesAwayIsSentNothingMoreAndItsDecodeCallEnds) {
  // Decode sends two tokens, then stays silent until cancelled.
  FakeWorker* decode = cluster_.Decode("decode-0", {Fault::kNone, Fault::kStall, 2});
  cluster_.Prefill("prefill-0");
  options_.decode_stall_floor = absl::Seconds(30);
  int seen = 0;
  const Ran ran = Run(Request(300, 50), [&seen](const v1::GenerateResponse&) {
    return ++seen < 3;  // gone at the third token
  });
  EXPECT_FALSE(ran.status.ok());
  EXPECT_EQ(ran.messages.size(), 3u);
  for (const auto& m : ran.messages) EXPECT_FALSE(m.has_final());
  EXPECT_LT(ran.seconds, 5);  // not the stall bound
  EXPECT_TRUE(Eventually([decode] { return decode->cancelled_calls() == 1; }));
  EXPECT_EQ(admission_->in_flight(), 0);
}

TEST_F(RequestRunTest, AClientGoneBeforeTheFinalIsNotASuccess) {
  cluster_.Decode("decode-0");
  cluster_.Prefill("prefill-0");
  const Ran ran = Run(Request(300, 4), [](const v1::GenerateResponse& m) { return !m.has_final(); });
  EXPECT_EQ(ran.messages.size(), 5u);
  EXPECT_FALSE(ran.status.ok());
}

TEST_F(RequestRunTest, RefusalsCarryRetryAfterAndWhoseLimitItIs) {
  FakeWorker* decode = cluster_.Decode("decode-0");
  options_.max_queue = 1;
  options_.tenant_limits.max_in_flight = 1;
  admission_ = std::make_unique<Admission>(options_.max_queue, options_.tenant_limits);
  {
    Admission::Refusal refusal;
    absl::StatusOr<Admission::Ticket> held = admission_->Admit("acme", 300, &refusal);
    ASSERT_TRUE(held.ok());
    // The tenant's own limit, then the queue's for another tenant.
    Ran tenant = Run(Request(300, 4, "acme"));
    EXPECT_EQ(tenant.status.error_code(), grpc::RESOURCE_EXHAUSTED);
    EXPECT_FALSE(tenant.queue_full);
    EXPECT_EQ(tenant.Trailer("kvcast-limit"), "tenant");
    EXPECT_FALSE(tenant.Trailer("retry-after").empty());
    Ran queue = Run(Request(300, 4, "globex"));
    EXPECT_EQ(queue.status.error_code(), grpc::RESOURCE_EXHAUSTED);
    EXPECT_TRUE(queue.queue_full);
    EXPECT_EQ(queue.Trailer("kvcast-limit"), "");
    EXPECT_EQ(queue.Trailer("retry-after"), "1");
    EXPECT_TRUE(tenant.messages.empty() && queue.messages.empty());
    EXPECT_TRUE(decode->decode_starts().empty());
    EXPECT_NE(registry_.Render().find("kvcast_requests_total{result=\"rejected\"} 2\n"),
              std::string::npos);
  }
  // The held ticket gone, both pass.
  EXPECT_TRUE(Run(Request(300, 4, "acme")).status.ok());
  EXPECT_TRUE(Run(Request(300, 4, "globex")).status.ok());
}

TEST_F(RequestRunTest, WithoutADecodeWorkerItWaitsForOneThenGivesUp) {
  Ran none = Run(Request(300, 4));
  EXPECT_EQ(none.status.error_code(), grpc::UNAVAILABLE);
  EXPECT_NE(none.status.error_message().find("no worker has registered"), std::string::npos);

  cluster_.Prefill("prefill-0");
  options_.route_wait = absl::Milliseconds(400);
  Ran alone = Run(Request(300, 4));
  EXPECT_EQ(alone.status.error_code(), grpc::UNAVAILABLE) << alone.status.error_message();
  EXPECT_GE(alone.seconds, 0.4);
  EXPECT_LT(alone.seconds, 2.0);

  // A decode worker registering while it waits takes the request at once.
  options_.route_wait = absl::Seconds(10);
  std::thread late([this] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    cluster_.Decode("decode-0");
  });
  Ran waited = Run(Request(300, 4));
  late.join();
  ASSERT_TRUE(waited.status.ok()) << waited.status.error_message();
  EXPECT_EQ(waited.messages.back().final().decode_worker(), "decode-0");
  EXPECT_GE(waited.seconds, 0.3);
  EXPECT_LT(waited.seconds, 3.0);
}

}  // namespace
}  // namespace kvcast::scheduler
