// The scheduler's orchestration of a request, driven with in-process fake
// prefill and decode workers (testing/fake_worker.h) speaking the real
// protocol: routing, handoff, PD fusion, retries, stall resume,
// cancellation and admission, without processes or a model.
#include "services/scheduler/generation_service.h"

#include <chrono>
#include <map>
#include <thread>

#include "gtest/gtest.h"
#include "services/scheduler/testing/fake_cluster.h"

namespace kvcast::scheduler {
namespace {

using testing::Eventually;
using testing::FakeScript;
using testing::FakeWorker;
using testing::NextToken;
using Fault = FakeScript::Fault;

std::vector<int32_t> Prompt(int n) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(10 + (i * 31) % 900);
  return p;
}

// What an uninterrupted generation of `max_tokens` after an n-token prompt is.
std::vector<int32_t> Expected(int n, int max_tokens) {
  std::vector<int32_t> out;
  for (int i = 0; i < max_tokens; ++i) out.push_back(NextToken(size_t(n + i)));
  return out;
}

std::shared_ptr<std::atomic<int>> Faults(int n) { return std::make_shared<std::atomic<int>>(n); }

struct Outcome {
  grpc::Status status;
  std::vector<int32_t> tokens;
  v1::Final final;
  std::map<std::string, std::string> trailers;
  std::string Trailer(const std::string& key) const {
    auto it = trailers.find(key);
    return it == trailers.end() ? "" : it->second;
  }
};

class GenerationServiceTest : public ::testing::Test {
 protected:
  ~GenerationServiceTest() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now());
  }

  FakeWorker* Prefill(const std::string& id, FakeScript script = {}) {
    return cluster_.Prefill(id, std::move(script));
  }
  FakeWorker* Decode(const std::string& id, FakeScript script = {}) {
    return cluster_.Decode(id, std::move(script));
  }
  void Heartbeat(const std::string& id) { cluster_.Heartbeat(id); }

  void Start(GenerationOptions options = {}) {
    service_ = std::make_unique<GenerationService>(cluster_.registry(), nullptr, &metrics_,
                                                   std::move(options));
    grpc::ServerBuilder b;
    b.RegisterService(service_.get());
    server_ = b.BuildAndStart();
    stub_ = v1::Generation::NewStub(server_->InProcessChannel(grpc::ChannelArguments()));
  }

  static v1::GenerateRequest Request(int prompt_tokens, int max_tokens, std::string tenant = "") {
    v1::GenerateRequest r;
    for (int32_t t : Prompt(prompt_tokens)) r.mutable_token_ids()->add_ids(t);
    r.set_max_tokens(max_tokens);
    r.set_tenant(std::move(tenant));
    return r;
  }

  // Runs a request to its end. `after_tokens`: called once when that many
  // tokens arrived (e.g. to cancel).
  Outcome Generate(const v1::GenerateRequest& r, grpc::ClientContext* ctx = nullptr,
                   int after_tokens = -1, std::function<void()> then = {}) {
    grpc::ClientContext own;
    if (ctx == nullptr) ctx = &own;
    Outcome out;
    auto reader = stub_->Generate(ctx, r);
    v1::GenerateResponse msg;
    while (reader->Read(&msg)) {
      if (msg.has_final()) out.final = msg.final();
      for (int32_t t : msg.delta().token_ids()) {
        out.tokens.push_back(t);
        if (int(out.tokens.size()) == after_tokens) then();
      }
    }
    out.status = reader->Finish();
    for (const auto& [k, v] : ctx->GetServerTrailingMetadata()) {
      out.trailers[std::string(k.data(), k.size())] = std::string(v.data(), v.size());
    }
    return out;
  }

  // Starts a request in the background that holds its admission until the
  // test cancels it (its decode worker must stall), once it has a token.
  struct Held {
    grpc::ClientContext ctx;
    std::thread thread;
    Outcome outcome;
    std::atomic<bool> started{false};
  };
  void Hold(Held* held, const v1::GenerateRequest& r) {
    held->thread = std::thread([this, held, r] {
      held->outcome = Generate(r, &held->ctx, 1, [held] { held->started = true; });
    });
    ASSERT_TRUE(Eventually([held] { return held->started.load(); }));
  }
  void Release(Held* held) {
    held->ctx.TryCancel();
    held->thread.join();
  }

  std::string Metrics() const { return metrics_.Render(); }

  testing::FakeCluster cluster_;
  services::MetricsRegistry metrics_;
  std::unique_ptr<GenerationService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Generation::Stub> stub_;
};

TEST_F(GenerationServiceTest, APromptIsPrefilledOnceAndItsKvHandedToDecode) {
  FakeWorker* p = Prefill("prefill-0");
  FakeWorker* d = Decode("decode-0");
  Start();
  Outcome o = Generate(Request(300, 8));
  ASSERT_TRUE(o.status.ok()) << o.status.error_message();
  EXPECT_EQ(o.tokens, Expected(300, 8));
  EXPECT_EQ(o.final.prefill_worker(), "prefill-0");
  EXPECT_EQ(o.final.decode_worker(), "decode-0");
  EXPECT_EQ(o.final.retries(), 0);
  EXPECT_EQ(o.final.usage().prompt_tokens(), 300);
  EXPECT_EQ(o.final.usage().generated_tokens(), 8);
  EXPECT_EQ(o.final.finish_reason(), v1::FINISH_REASON_LENGTH);
  ASSERT_EQ(p->prefill_calls(), 1);
  EXPECT_EQ(p->prefill_requests()[0].tokens_size(), 300);
  ASSERT_EQ(d->decode_starts().size(), 1u);
  const v1::DecodeStart s = d->decode_starts()[0];
  EXPECT_EQ(s.prompt_size(), 300);
  EXPECT_EQ(s.kv_tokens(), 300);
  EXPECT_EQ(s.kv().moqt_address(), "prefill-0:moqt");
  EXPECT_EQ(s.kv().groups(), 3);
  EXPECT_EQ(s.max_tokens(), 8);
}

TEST_F(GenerationServiceTest, AShortPromptRunsOnItsDecodeWorkerAlone) {
  FakeWorker* p = Prefill("prefill-0");
  FakeWorker* d = Decode("decode-0");
  Start();
  Outcome o = Generate(Request(20, 5));
  ASSERT_TRUE(o.status.ok()) << o.status.error_message();
  EXPECT_EQ(o.tokens, Expected(20, 5));
  EXPECT_EQ(p->prefill_calls(), 0);
  EXPECT_EQ(o.final.prefill_worker(), "");
  ASSERT_EQ(d->decode_starts().size(), 1u);
  EXPECT_EQ(d->decode_starts()[0].kv_tokens(), 0);
  EXPECT_NE(Metrics().find("kvcast_fused_requests_total 1"), std::string::npos);
}

TEST_F(GenerationServiceTest, AFailedPrefillIsRetriedOnAnotherWorker) {
  auto faults = Faults(1);
  FakeWorker* p0 = Prefill("prefill-0", {Fault::kUnavailable, Fault::kNone, 0, faults});
  FakeWorker* p1 = Prefill("prefill-1", {Fault::kUnavailable, Fault::kNone, 0, faults});
  Decode("decode-0");
  Start();
  Outcome o = Generate(Request(300, 6));
  ASSERT_TRUE(o.status.ok()) << o.status.error_message();
  EXPECT_EQ(o.tokens, Expected(300, 6));
  EXPECT_EQ(o.final.retries(), 1);
  EXPECT_EQ(p0->prefill_calls(), 1);
  EXPECT_EQ(p1->prefill_calls(), 1);
}

TEST_F(GenerationServiceTest, WithNoPrefillWorkerLeftDecodeComputesThePrompt) {
  Prefill("prefill-0", {Fault::kUnavailable});
  FakeWorker* d = Decode("decode-0");
  Start();
  Outcome o = Generate(Request(300, 6));
  ASSERT_TRUE(o.status.ok()) << o.status.error_message();
  EXPECT_EQ(o.tokens, Expected(300, 6));
  EXPECT_EQ(o.final.retries(), 1);
  EXPECT_EQ(o.final.prefill_worker(), "");
  // The first attempt's decode call (waiting for the failed prefill's KV)
  // was cancelled, maybe before the worker read its start; the second
  // computes the whole prompt.
  const std::vector<v1::DecodeStart> starts = d->decode_starts();
  ASSERT_GE(starts.size(), 1u);
  ASSERT_LE(starts.size(), 2u);
  EXPECT_EQ(starts.back().kv_tokens(), 0);
  EXPECT_FALSE(starts.back().has_kv());
}

TEST_F(GenerationServiceTest, ADecodeWorkerLostMidStreamIsResumedWhereItStopped) {
  auto faults = Faults(1);
  FakeWorker* d0 = Decode("decode-0", {Fault::kNone, Fault::kUnavailable, 3, faults});
  FakeWorker* d1 = Decode("decode-1", {Fault::kNone, Fault::kUnavailable, 3, faults});
  Prefill("prefill-0");
  Start();
  Outcome o = Generate(Request(300, 12));
  ASSERT_TRUE(o.status.ok()) << o.status.error_message();
  EXPECT_EQ(o.tokens, Expected(300, 12));
  EXPECT_EQ(o.final.retries(), 1);
  std::vector<v1::DecodeStart> starts = d0->decode_starts();
  for (const auto& s : d1->decode_starts()) starts.push_back(s);
  ASSERT_EQ(starts.size(), 2u);
  // The resumed start: the prompt with the 4 tokens so far (the prefill's
  // first and 3 decoded), the rest of max_tokens, the prompt's published KV.
  const v1::DecodeStart& resumed = starts[0].prompt_size() == 300 ? starts[1] : starts[0];
  EXPECT_EQ(resumed.prompt_size(), 304);
  EXPECT_EQ(resumed.max_tokens(), 8);
  EXPECT_EQ(resumed.sampling().response_format().generated_tokens(), 4);
  EXPECT_EQ(resumed.kv_tokens(), 300);
  EXPECT_EQ(resumed.kv().moqt_address(), "prefill-0:moqt");
}

TEST_F(GenerationServiceTest, AStalledDecodeIsCancelledAndResumedElsewhere) {
  auto faults = Faults(1);
  FakeWorker* d0 = Decode("decode-0", {Fault::kNone, Fault::kStall, 2, faults});
  FakeWorker* d1 = Decode("decode-1", {Fault::kNone, Fault::kStall, 2, faults});
  Prefill("prefill-0");
  GenerationOptions options;
  options.decode_stall_floor = absl::Milliseconds(300);
  options.decode_first_message = absl::Seconds(1);
  Start(options);
  Outcome o = Generate(Request(300, 10));
  ASSERT_TRUE(o.status.ok()) << o.status.error_message();
  EXPECT_EQ(o.tokens, Expected(300, 10));
  EXPECT_EQ(o.final.retries(), 1);
  EXPECT_TRUE(Eventually([&] { return d0->cancelled_calls() + d1->cancelled_calls() >= 1; }));
  EXPECT_NE(Metrics().find("kvcast_stalls_total{phase=\"decode\"} 1"), std::string::npos);
}

TEST_F(GenerationServiceTest, AStalledPrefillIsRetriedElsewhereFetchingWhatItPublished) {
  auto faults = Faults(1);
  FakeWorker* p0 = Prefill("prefill-0", {Fault::kStall, Fault::kNone, 0, faults});
  FakeWorker* p1 = Prefill("prefill-1", {Fault::kStall, Fault::kNone, 0, faults});
  Decode("decode-0");
  GenerationOptions options;
  options.prefill_stall_floor = absl::Milliseconds(300);
  Start(options);
  // 500 tokens: the stalled worker reported 384 done before going silent.
  Outcome o = Generate(Request(500, 4));
  ASSERT_TRUE(o.status.ok()) << o.status.error_message();
  EXPECT_EQ(o.tokens, Expected(500, 4));
  EXPECT_EQ(o.final.retries(), 1);
  ASSERT_EQ(p0->prefill_calls() + p1->prefill_calls(), 2);
  EXPECT_TRUE(Eventually([&] { return p0->cancelled_calls() + p1->cancelled_calls() == 1; }));
  EXPECT_NE(Metrics().find("kvcast_stalls_total{phase=\"prefill\"} 1"), std::string::npos);
  // The retry fetches the chunks the stalled worker published, but the
  // last one it reported (it may not have left whole): 2 of 3.
  FakeWorker* stalled = p0->cancelled_calls() == 1 ? p0 : p1;
  FakeWorker* retry = stalled == p0 ? p1 : p0;
  const v1::PrefillRequest r = retry->prefill_requests().back();
  ASSERT_TRUE(r.has_reuse());
  EXPECT_EQ(r.reuse().groups(), 2);
  EXPECT_EQ(r.reuse().moqt_address(), stalled->id() + ":moqt");
  EXPECT_EQ(r.reuse().prompt_digest().size(), 32u);
}

TEST_F(GenerationServiceTest, ARequestsOwnFaultIsReturnedOnceNotRetried) {
  FakeWorker* d0 = Decode("decode-0", {Fault::kNone, Fault::kOutOfRange});
  FakeWorker* d1 = Decode("decode-1", {Fault::kNone, Fault::kOutOfRange});
  Prefill("prefill-0");
  Start();
  Outcome o = Generate(Request(300, 4));
  EXPECT_EQ(o.status.error_code(), grpc::OUT_OF_RANGE) << o.status.error_message();
  EXPECT_EQ(d0->decode_starts().size() + d1->decode_starts().size(), 1u);
}

TEST_F(GenerationServiceTest, EveryDecodeWorkerFailingEndsUnavailableNamingTheLastFailure) {
  Decode("decode-0", {Fault::kNone, Fault::kUnavailable, 1});
  Prefill("prefill-0");
  Start();
  const auto t0 = std::chrono::steady_clock::now();
  Outcome o = Generate(Request(300, 8));
  EXPECT_EQ(o.status.error_code(), grpc::UNAVAILABLE);
  EXPECT_NE(o.status.error_message().find("decode-0 is going away"), std::string::npos)
      << o.status.error_message();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

TEST_F(GenerationServiceTest, AFailedDecodeWorkerThatHeartbeatsAgainGetsTheRetry) {
  FakeWorker* d = Decode("decode-0", {Fault::kNone, Fault::kUnavailable, 2, Faults(1)});
  Prefill("prefill-0");
  Start();
  // The worker's next heartbeat revives it (it was suspended by the failure).
  std::thread heartbeat([this] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    Heartbeat("decode-0");
  });
  Outcome o = Generate(Request(300, 8));
  heartbeat.join();
  ASSERT_TRUE(o.status.ok()) << o.status.error_message();
  EXPECT_EQ(o.tokens, Expected(300, 8));
  EXPECT_EQ(o.final.retries(), 1);
  EXPECT_EQ(d->decode_starts().size(), 2u);
}

TEST_F(GenerationServiceTest, TheClientCancellingReachesTheDecodeWorker) {
  FakeWorker* d = Decode("decode-0", {Fault::kNone, Fault::kStall, 2});
  Prefill("prefill-0");
  GenerationOptions options;
  options.decode_stall_floor = absl::Seconds(30);
  Start(options);
  grpc::ClientContext ctx;
  Outcome o = Generate(Request(300, 50), &ctx, 3, [&ctx] { ctx.TryCancel(); });
  EXPECT_EQ(o.status.error_code(), grpc::CANCELLED);
  EXPECT_EQ(o.tokens.size(), 3u);
  EXPECT_TRUE(Eventually([d] { return d->cancelled_calls() == 1; }));
}

TEST_F(GenerationServiceTest, ATenantOverItsLimitIsRefusedWhileOthersAreServed) {
  Decode("decode-0", {Fault::kNone, Fault::kStall, 1, Faults(1)});
  Prefill("prefill-0");
  GenerationOptions options;
  options.decode_stall_floor = absl::Seconds(30);
  options.tenant_limits.max_in_flight = 1;
  Start(options);
  Held held;
  Hold(&held, Request(300, 50, "acme"));
  Outcome refused = Generate(Request(300, 4, "acme"));
  EXPECT_EQ(refused.status.error_code(), grpc::RESOURCE_EXHAUSTED);
  EXPECT_EQ(refused.Trailer("kvcast-limit"), "tenant");
  EXPECT_FALSE(refused.Trailer("retry-after").empty());
  Outcome other = Generate(Request(300, 4, "globex"));
  EXPECT_TRUE(other.status.ok()) << other.status.error_message();
  Release(&held);
  EXPECT_EQ(held.outcome.status.error_code(), grpc::CANCELLED);
  // Its slot is free again once the scheduler saw the cancellation (the
  // client's call ends before that).
  EXPECT_TRUE(Eventually([&] { return Generate(Request(300, 4, "acme")).status.ok(); }));
}

TEST_F(GenerationServiceTest, AFullQueueRefusesWithRetryAfterAndFreesOnCompletion) {
  Decode("decode-0", {Fault::kNone, Fault::kStall, 1, Faults(1)});
  Prefill("prefill-0");
  GenerationOptions options;
  options.decode_stall_floor = absl::Seconds(30);
  options.max_queue = 1;
  Start(options);
  Held held;
  Hold(&held, Request(300, 50));
  Outcome refused = Generate(Request(300, 4));
  EXPECT_EQ(refused.status.error_code(), grpc::RESOURCE_EXHAUSTED);
  EXPECT_NE(refused.status.error_message().find("--max_queue"), std::string::npos);
  EXPECT_EQ(refused.Trailer("retry-after"), "1");
  EXPECT_NE(Metrics().find("kvcast_requests_total{result=\"rejected\"} 1"), std::string::npos);
  Release(&held);
  EXPECT_TRUE(Eventually([&] { return Generate(Request(300, 4)).status.ok(); }));
}

TEST_F(GenerationServiceTest, BadRequestsAreRefusedNamingTheField) {
  FakeWorker* decode = Decode("decode-0");
  Start();
  v1::GenerateRequest r = Request(10, 0);
  EXPECT_NE(Generate(r).status.error_message().find("max_tokens"), std::string::npos);
  r = Request(10, 4);
  r.mutable_token_ids()->add_ids(testing::kFakeVocab);
  EXPECT_NE(Generate(r).status.error_message().find("outside the vocabulary"), std::string::npos);
  r = Request(10, 4);
  r.add_stop("x");
  EXPECT_NE(Generate(r).status.error_message().find("tokenizer"), std::string::npos);
  r = Request(testing::kFakeContext, 4);
  Outcome o = Generate(r);
  EXPECT_EQ(o.status.error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_NE(o.status.error_message().find("context"), std::string::npos);
  EXPECT_EQ(decode->decode_starts().size(), 0u);
}

}  // namespace
}  // namespace kvcast::scheduler
