#include "services/scheduler/request_validation.h"

#include "gtest/gtest.h"

namespace kvcast::scheduler {
namespace {

ModelInfo Model() {
  ModelInfo m;
  m.name = "m";
  m.fingerprint = Hash128{1, 2};
  m.prefix_seed = PrefixSeed(m.fingerprint);
  m.chunk_tokens = 4;
  m.vocab_size = 100;
  m.max_sequence_len = 64;
  return m;
}

v1::GenerateRequest Request(int prompt_tokens = 10, int max_tokens = 5) {
  v1::GenerateRequest r;
  for (int i = 0; i < prompt_tokens; ++i) r.mutable_token_ids()->add_ids(i);
  r.set_max_tokens(max_tokens);
  return r;
}

class RequestValidationTest : public ::testing::Test {
 protected:
  absl::StatusOr<ValidRequest> Validate(const v1::GenerateRequest& r) {
    return ValidateRequest(r, Model(), nullptr, &grammars_, /*max_tokens_limit=*/32);
  }
  // The refusal's message (it must be INVALID_ARGUMENT).
  std::string Refusal(const v1::GenerateRequest& r) {
    auto v = Validate(r);
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << v.status();
    return std::string(v.status().message());
  }
  GrammarCache grammars_;
};

TEST_F(RequestValidationTest, AValidRequestCarriesItsPromptChainAndLimits) {
  v1::GenerateRequest r = Request(10, 5);
  r.mutable_sampling()->mutable_response_format()->set_generated_tokens(7);
  auto v = Validate(r);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->prompt.size(), 10u);
  EXPECT_EQ(v->chain.size(), 2u);  // the full 4-token chunks
  EXPECT_EQ(v->digest.size(), 32u);
  EXPECT_EQ(v->max_tokens, 5);
  // Only the scheduler says how much of a resumed prompt was generated.
  EXPECT_EQ(v->sampling.response_format().generated_tokens(), 0);
}

TEST_F(RequestValidationTest, ATenantSaltsTheChainAndTheDigest) {
  v1::GenerateRequest r = Request();
  auto plain = Validate(r);
  r.set_tenant("acme");
  auto salted = Validate(r);
  ASSERT_TRUE(plain.ok() && salted.ok());
  EXPECT_NE(plain->chain[0], salted->chain[0]);
  EXPECT_NE(plain->digest, salted->digest);
}

TEST_F(RequestValidationTest, EachBadFieldIsRefusedByName) {
  v1::GenerateRequest r = Request();
  r.set_model("other");
  EXPECT_NE(Refusal(r).find("unknown model \"other\""), std::string::npos);
  r = Request();
  r.mutable_token_ids()->add_ids(100);
  EXPECT_NE(Refusal(r).find("token id 100 is outside the vocabulary [0, 100)"), std::string::npos);
  EXPECT_NE(Refusal(Request(0)).find("empty prompt"), std::string::npos);
  r = Request();
  r.set_text("hello");
  EXPECT_NE(Refusal(r).find("no tokenizer"), std::string::npos);
  EXPECT_NE(Refusal(Request(64)).find("the prompt has 64 tokens; the model's context is 64"),
            std::string::npos);
  EXPECT_NE(Refusal(Request(10, 0)).find("max_tokens must be in [1, 32], got 0"), std::string::npos);
  EXPECT_NE(Refusal(Request(10, 33)).find("got 33"), std::string::npos);
  r = Request();
  r.mutable_sampling()->set_top_logprobs(3);
  EXPECT_NE(Refusal(r).find("top_logprobs"), std::string::npos);
  r = Request();
  r.mutable_sampling()->mutable_response_format()->set_type(
      v1::ResponseFormat::RESPONSE_FORMAT_JSON_SCHEMA);
  r.mutable_sampling()->mutable_response_format()->set_json_schema(
      R"({"type":"integer","multipleOf":3})");
  EXPECT_NE(Refusal(r).find("response_format: unsupported JSON Schema keyword 'multipleOf'"),
            std::string::npos);
  r = Request(10, 5);
  r.mutable_sampling()->set_min_tokens(6);
  EXPECT_NE(Refusal(r).find("min_tokens must be in [0, max_tokens = 5], got 6"), std::string::npos);
  r = Request();
  r.add_stop("");
  EXPECT_NE(Refusal(r).find("empty stop string"), std::string::npos);
  r = Request();
  r.add_stop("x");
  EXPECT_NE(Refusal(r).find("stop strings need a tokenizer"), std::string::npos);
  r = Request();
  r.add_stop_token_ids(-1);
  EXPECT_NE(Refusal(r).find("stop token id -1 is outside the vocabulary"), std::string::npos);
}

}  // namespace
}  // namespace kvcast::scheduler
