// DecodeService on a real worker runtime (the tiny model): a prompt it
// computes itself, its prefix cache on a repeat, KV that cannot land
// computed instead, one prompt landed once for requests that carry it at
// once, and starts it refuses.
#include "services/decode/decode_service.h"

#include <thread>

#include "gtest/gtest.h"
#include "services/prefill/prefill_service.h"
#include "services/worker/testing/test_worker.h"

namespace kvcast::decode {
namespace {

using worker::testing::MetricOf;

v1::DecodeStart Start(int prompt_tokens, int max_tokens) {
  v1::DecodeStart s;
  s.set_request_id("req-t");
  for (int i = 0; i < prompt_tokens; ++i) s.add_prompt(3 + (i * 11) % 250);
  s.set_max_tokens(max_tokens);
  s.set_ignore_eos(true);
  return s;
}

// Decode serves no MoQT requests.
class NoRequests : public moqt::RequestHandler {};

class DecodeServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto rt = worker::testing::StartTestWorker(v1::WORKER_ROLE_DECODE,
                                               ::testing::TempDir() + "/decode_worker");
    ASSERT_TRUE(rt.ok()) << rt.status();
    rt_ = std::move(*rt);
    auto service = DecodeService::Create(rt_.get(), DecodeService::Options());
    ASSERT_TRUE(service.ok()) << service.status();
    service_ = std::move(*service);
    ASSERT_TRUE(rt_->Serve(&handler_, {{v1::Decode::service_full_name(), service_.get()}}).ok());
    stub_ = v1::Decode::NewStub(worker::testing::ChannelTo(*rt_));
  }
  void TearDown() override {
    if (rt_ != nullptr) rt_->Shutdown(absl::ZeroDuration());
    service_.reset();
  }

  struct Call {
    std::vector<v1::DecodeResponse> messages;
    std::vector<int32_t> tokens;
    v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
    grpc::Status status;
  };
  // Sends `first` (and `first_token` when >= 0), then reads to the end.
  Call Decode(const v1::DecodeRequest& first, int32_t first_token = -1) {
    grpc::ClientContext ctx;
    auto stream = stub_->Decode(&ctx);
    stream->Write(first);
    if (first_token >= 0) {
      v1::DecodeRequest t;
      t.set_first_token(first_token);
      stream->Write(t);
    }
    stream->WritesDone();
    Call call;
    v1::DecodeResponse r;
    while (stream->Read(&r)) {
      call.messages.push_back(r);
      call.tokens.insert(call.tokens.end(), r.token_ids().begin(), r.token_ids().end());
      if (r.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) call.finish = r.finish_reason();
    }
    call.status = stream->Finish();
    return call;
  }
  static v1::DecodeRequest Of(const v1::DecodeStart& s) {
    v1::DecodeRequest r;
    *r.mutable_start() = s;
    return r;
  }

  NoRequests handler_;
  std::unique_ptr<worker::WorkerRuntime> rt_;
  std::unique_ptr<DecodeService> service_;
  std::unique_ptr<v1::Decode::Stub> stub_;
};

TEST_F(DecodeServiceTest, APromptItComputesItselfStreamsMaxTokensThenLength) {
  Call c = Decode(Of(Start(300, 12)));
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  ASSERT_FALSE(c.messages.empty());
  EXPECT_TRUE(c.messages[0].kv_ready()) << "the KV state comes first";
  EXPECT_EQ(c.messages[0].local_cached_tokens(), 0);
  EXPECT_EQ(c.tokens.size(), 12u);
  EXPECT_EQ(c.finish, v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(MetricOf(*rt_, "kvcast_decode_tokens_total"), 12);
  // The same prompt again: its full chunks come from the prefix cache, and
  // greedy decoding gives the same tokens.
  Call again = Decode(Of(Start(300, 12)));
  ASSERT_TRUE(again.status.ok()) << again.status.error_message();
  EXPECT_EQ(again.messages[0].local_cached_tokens(), 256);
  EXPECT_EQ(again.tokens, c.tokens);
}

// Requests that land one prompt at once (the n choices of a request): one
// lands it, the others wait and take its full chunks from the prefix
// cache, landing only the last, partial chunk; all generate alike.
TEST_F(DecodeServiceTest, RequestsLandingOnePromptAtOnceLandItOnce) {
  // A prefill worker computes and publishes the prompts (kept 60 s).
  auto prt = worker::testing::StartTestWorker(v1::WORKER_ROLE_PREFILL,
                                              ::testing::TempDir() + "/prefill_worker");
  ASSERT_TRUE(prt.ok()) << prt.status();
  std::unique_ptr<worker::WorkerRuntime> prefill_rt = std::move(*prt);
  prefill::PrefillService prefill(prefill_rt.get(), absl::Seconds(60));
  ASSERT_TRUE(prefill_rt
                  ->Serve(prefill.moqt_handler(), {{v1::Prefill::service_full_name(), &prefill}})
                  .ok());
  auto prefill_stub = v1::Prefill::NewStub(worker::testing::ChannelTo(*prefill_rt));
  constexpr int kPrompt = 300, kChoices = 3;
  for (int round = 0; round < 3; ++round) {
    v1::DecodeStart s = Start(kPrompt, 8);
    s.set_prompt(0, 200 + round);  // a prompt this worker has not seen
    v1::PrefillRequest p;
    p.set_request_id("prefill");
    *p.mutable_tokens() = s.prompt();
    grpc::ClientContext ctx;
    auto reader = prefill_stub->Prefill(&ctx, p);
    v1::PrefillReply reply;
    v1::PrefillResponse result;
    while (reader->Read(&reply)) {
      if (reply.has_result()) result = reply.result();
    }
    ASSERT_TRUE(reader->Finish().ok());
    s.set_kv_tokens(kPrompt);
    v1::KvSource* kv = s.mutable_kv();
    kv->set_prompt_digest(result.prompt_digest());
    kv->set_groups(3);
    kv->set_compression("fp16");
    kv->set_moqt_address(absl::StrCat("127.0.0.1:", prefill_rt->moqt_port()));
    std::vector<Call> calls(kChoices);
    std::vector<std::thread> threads;
    for (Call& c : calls) {
      threads.emplace_back([&, &c = c] { c = Decode(Of(s), result.first_token()); });
    }
    for (std::thread& t : threads) t.join();
    int landed = 0, shared = 0;
    for (const Call& c : calls) {
      ASSERT_TRUE(c.status.ok()) << c.status.error_message();
      for (const v1::DecodeResponse& m : c.messages) {
        if (!m.kv_ready()) continue;
        landed += m.landed_tokens();
        shared += m.local_cached_tokens();
      }
      EXPECT_EQ(c.tokens, calls[0].tokens);
      EXPECT_EQ(c.tokens.size(), 7u);  // the first came from the prefill
    }
    // The prompt once, then the 44-token tail for each other choice.
    EXPECT_EQ(landed, kPrompt + (kChoices - 1) * 44) << "round " << round;
    EXPECT_EQ(shared, (kChoices - 1) * 256) << "round " << round;
  }
  prefill_rt->Shutdown(absl::ZeroDuration());
}

TEST_F(DecodeServiceTest, KvThatCannotLandIsComputedHereFromTheFirstToken) {
  v1::DecodeStart s = Start(300, 6);
  s.set_kv_tokens(300);
  v1::KvSource* kv = s.mutable_kv();
  kv->set_prompt_digest(std::string(32, 'b'));
  kv->set_groups(3);
  kv->set_moqt_address("127.0.0.1:9");  // nobody publishes there
  Call c = Decode(Of(s), /*first_token=*/42);
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  ASSERT_FALSE(c.messages.empty());
  EXPECT_TRUE(c.messages[0].kv_ready());
  EXPECT_EQ(c.messages[0].landed_tokens(), 0);
  EXPECT_EQ(c.tokens.size(), 5u) << "the first token was the prefill's";
  EXPECT_EQ(c.finish, v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(MetricOf(*rt_, "kvcast_kv_transfer_failures_total"), 1);
}

TEST_F(DecodeServiceTest, BadStartsAreRefusedNamingTheField) {
  v1::DecodeRequest not_a_start;
  not_a_start.set_first_token(1);
  Call c = Decode(not_a_start);
  EXPECT_EQ(c.status.error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_NE(c.status.error_message().find("must be `start`"), std::string::npos);
  v1::DecodeStart s = Start(10, 4);
  s.set_kv_tokens(11);
  c = Decode(Of(s));
  EXPECT_EQ(c.status.error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_NE(c.status.error_message().find("kv_tokens 11 outside [0, 10]"), std::string::npos);
  c = Decode(Of(Start(10, 0)));
  EXPECT_NE(c.status.error_message().find("max_tokens must be at least 1"), std::string::npos);
  c = Decode(Of(Start(0, 4)));
  EXPECT_NE(c.status.error_message().find("empty prompt"), std::string::npos);
}

}  // namespace
}  // namespace kvcast::decode
