// PrefillService on a real worker runtime (the tiny model): progress then
// the first token, the prefix cache on a repeat, a prefix it cannot fetch
// computed instead, and bad requests.
#include "services/prefill/prefill_service.h"

#include "gtest/gtest.h"
#include "services/worker/testing/test_worker.h"

namespace kvcast::prefill {
namespace {

using worker::testing::MetricOf;

v1::PrefillRequest Request(int tokens) {
  v1::PrefillRequest r;
  r.set_request_id("req-t");
  for (int i = 0; i < tokens; ++i) r.add_tokens(3 + (i * 7) % 250);
  return r;
}

class PrefillServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto rt = worker::testing::StartTestWorker(v1::WORKER_ROLE_PREFILL,
                                               ::testing::TempDir() + "/prefill_worker");
    ASSERT_TRUE(rt.ok()) << rt.status();
    rt_ = std::move(*rt);
    service_ = std::make_unique<PrefillService>(rt_.get(), absl::Seconds(60));
    ASSERT_TRUE(rt_->Serve(service_->moqt_handler(),
                           {{v1::Prefill::service_full_name(), service_.get()}})
                    .ok());
    stub_ = v1::Prefill::NewStub(worker::testing::ChannelTo(*rt_));
  }
  void TearDown() override {
    if (rt_ != nullptr) rt_->Shutdown(absl::ZeroDuration());
    service_.reset();
  }

  struct Call {
    std::vector<int> progress;  // done_tokens of each progress message
    bool answered = false;
    v1::PrefillResponse result;
    grpc::Status status;
  };
  Call Prefill(const v1::PrefillRequest& request) {
    grpc::ClientContext ctx;
    auto reader = stub_->Prefill(&ctx, request);
    Call call;
    v1::PrefillReply reply;
    while (reader->Read(&reply)) {
      if (reply.has_progress()) call.progress.push_back(reply.progress().done_tokens());
      if (reply.has_result()) {
        call.result = reply.result();
        call.answered = true;
      }
    }
    call.status = reader->Finish();
    return call;
  }

  std::unique_ptr<worker::WorkerRuntime> rt_;
  std::unique_ptr<PrefillService> service_;
  std::unique_ptr<v1::Prefill::Stub> stub_;
};

// Published prompts stay fetchable for --retain_s, but not at the cost of
// the prompts that come next: with more distinct prompts than the page pool
// holds, the oldest retained ones make room (their KV is at the relay or
// computed again), and no prefill fails for want of pages.
TEST_F(PrefillServiceTest, RetainedPromptsMakeRoomForNewOnes) {
  const KvPagePool& pool = rt_->engine().pool();
  const int prompt_tokens = 300;
  const int pages_each = (prompt_tokens + pool.layout().page_tokens - 1) / pool.layout().page_tokens;
  const int prompts = 2 * pool.num_pages() / pages_each + 2;
  for (int p = 0; p < prompts; ++p) {
    v1::PrefillRequest r;
    r.set_request_id("req-" + std::to_string(p));
    for (int i = 0; i < prompt_tokens; ++i) r.add_tokens(3 + (i * 7 + p * 13) % 250);
    Call c = Prefill(r);
    ASSERT_TRUE(c.status.ok()) << "prompt " << p << " of " << prompts << ": "
                               << c.status.error_message();
  }
}

TEST_F(PrefillServiceTest, ProgressComesChunkByChunkThenTheFirstToken) {
  Call c = Prefill(Request(600));
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  ASSERT_TRUE(c.answered);
  ASSERT_FALSE(c.progress.empty());
  for (size_t i = 0; i < c.progress.size(); ++i) {
    // Tokens whose KV is in place: whole chunks, or the whole prompt.
    EXPECT_TRUE(c.progress[i] % 128 == 0 || c.progress[i] == 600) << c.progress[i];
    EXPECT_LE(c.progress[i], 600);
    if (i > 0) EXPECT_GE(c.progress[i], c.progress[i - 1]);
  }
  EXPECT_GE(c.result.first_token(), 0);
  EXPECT_EQ(c.result.prompt_digest().size(), 32u);
  EXPECT_EQ(c.result.computed_tokens(), 600);
  EXPECT_EQ(c.result.cached_tokens(), 0);
  EXPECT_EQ(MetricOf(*rt_, "kvcast_prefill_requests_total", {{"result", "ok"}}), 1);
}

TEST_F(PrefillServiceTest, ARepeatedPromptComputesOnlyWhatItsCachedChunksLeave) {
  Call first = Prefill(Request(600));
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  Call again = Prefill(Request(600));
  ASSERT_TRUE(again.status.ok()) << again.status.error_message();
  EXPECT_EQ(again.result.cached_tokens(), 512);  // its 4 full chunks
  EXPECT_EQ(again.result.computed_tokens(), 88);
  EXPECT_EQ(again.result.prompt_digest(), first.result.prompt_digest());
  EXPECT_EQ(again.result.first_token(), first.result.first_token());
}

TEST_F(PrefillServiceTest, APrefixItCannotFetchIsComputedInstead) {
  v1::PrefillRequest r = Request(600);
  v1::KvSource* reuse = r.mutable_reuse();
  reuse->set_prompt_digest(std::string(32, 'a'));
  reuse->set_groups(2);
  reuse->set_moqt_address("127.0.0.1:9");  // nobody publishes there
  Call c = Prefill(r);
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  EXPECT_EQ(c.result.fetched_tokens(), 0);
  EXPECT_EQ(c.result.computed_tokens(), 600);
  EXPECT_EQ(MetricOf(*rt_, "kvcast_kv_transfer_failures_total"), 1);
}

TEST_F(PrefillServiceTest, AnEmptyPromptIsRefused) {
  Call c = Prefill(Request(0));
  EXPECT_EQ(c.status.error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_NE(c.status.error_message().find("empty prompt"), std::string::npos);
}

}  // namespace
}  // namespace kvcast::prefill
