// OpenAiFrontend over a real HttpServer and a real gRPC server whose
// Generation service answers by a script chosen by the prompt's first token
// id (the scheduler's own behaviour is covered by the e2e tests).
#include "services/openai/openai_frontend.h"

#include <atomic>
#include <cmath>
#include <mutex>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "kvcast/v1/generation.grpc.pb.h"
#include "services/common/testing/http_client.h"

namespace kvcast::openai {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
using services::testing::ConnectLoopback;
using services::testing::PostJson;
using services::testing::ReadUntil;
using services::testing::SendAll;

// Scripts: [1] three deltas then a Final; [2] one delta then UNAVAILABLE;
// [3] RESOURCE_EXHAUSTED; [4] one delta, then waits to be cancelled;
// [5] UNAUTHENTICATED unless the call carries "authorization: Bearer k";
// [6] RESOURCE_EXHAUSTED for the tenant (trailing kvcast-limit, retry-after);
// [7] text, then a Hermes tool call split across deltas, then STOP;
// [8] "s<seed>" as one token whose logprob is -0.1 - 0.5 |seed - 11|, then STOP.
class ScriptedGeneration final : public v1::Generation::Service {
 public:
  grpc::Status Generate(grpc::ServerContext* ctx, const v1::GenerateRequest* req,
                        grpc::ServerWriter<v1::GenerateResponse>* w) override {
    last_request_ = *req;
    {
      std::lock_guard<std::mutex> l(seeds_mu_);
      seeds_.push_back(req->sampling().seed());
    }
    int step = 0;
    auto delta = [&](const std::string& text, int id, bool first) {
      v1::GenerateResponse r;
      r.mutable_delta()->set_text(text);
      r.mutable_delta()->add_token_ids(id);
      if (req->sampling().logprobs()) {  // -0.5, -1, -1.5...; the top: the token, then 'x'
        v1::TokenLogprob* lp = r.mutable_delta()->add_logprobs();
        lp->set_logprob(-0.5f * float(++step));
        for (int k = 0; k < req->sampling().top_logprobs() && k < 2; ++k) {
          lp->add_top_ids(k == 0 ? id : 'x');
          lp->add_top_logprobs(k == 0 ? lp->logprob() : -9.f);
        }
      }
      if (first) {
        r.mutable_delta()->set_prompt_tokens(req->token_ids().ids_size());
        r.mutable_delta()->set_cached_prompt_tokens(1);
      }
      w->Write(r);
    };
    switch (req->token_ids().ids(0)) {
      case 1: {
        delta("a", 'a', true);
        delta("", 0xe2, false);  // an incomplete UTF-8 character
        delta("bc", 'c', false);
        v1::GenerateResponse r;
        v1::Final* f = r.mutable_final();
        f->set_finish_reason(v1::FINISH_REASON_STOP);
        f->mutable_usage()->set_prompt_tokens(req->token_ids().ids_size());
        f->mutable_usage()->set_cached_prompt_tokens(1);
        f->mutable_usage()->set_generated_tokens(3);
        w->Write(r);
        return grpc::Status::OK;
      }
      case 2:
        delta("x", 10, true);
        return grpc::Status(grpc::UNAVAILABLE, "decode worker lost");
      case 7: {
        delta("Let me look. <tool", 'L', true);
        delta("_call>\n{\"name\": \"get_weather\", ", 'n', false);
        delta("\"arguments\": {\"city\": \"Lisbon\"}}\n</tool_call>", 'a', false);
        v1::GenerateResponse r;
        r.mutable_final()->set_finish_reason(v1::FINISH_REASON_STOP);
        r.mutable_final()->mutable_usage()->set_generated_tokens(3);
        w->Write(r);
        return grpc::Status::OK;
      }
      case 8: {
        v1::GenerateResponse r;
        r.mutable_delta()->set_text(absl::StrCat("s", req->sampling().seed()));
        r.mutable_delta()->add_token_ids('s');
        r.mutable_delta()->set_prompt_tokens(req->token_ids().ids_size());
        if (req->sampling().logprobs()) {
          const double off = std::abs(double(req->sampling().seed()) - 11);
          r.mutable_delta()->add_logprobs()->set_logprob(float(-0.1 - 0.5 * off));
        }
        w->Write(r);
        r.Clear();
        r.mutable_final()->set_finish_reason(v1::FINISH_REASON_STOP);
        r.mutable_final()->mutable_usage()->set_prompt_tokens(req->token_ids().ids_size());
        r.mutable_final()->mutable_usage()->set_generated_tokens(1);
        w->Write(r);
        return grpc::Status::OK;
      }
      case 3:
        return grpc::Status(grpc::RESOURCE_EXHAUSTED, "queue full");
      case 4:
        delta("x", 10, true);
        for (int i = 0; i < 500 && !ctx->IsCancelled(); ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        cancelled_ = ctx->IsCancelled();
        return grpc::Status(grpc::CANCELLED, "cancelled");
      case 6:
        ctx->AddTrailingMetadata("kvcast-limit", "tenant");
        ctx->AddTrailingMetadata("retry-after", "7");
        return grpc::Status(grpc::RESOURCE_EXHAUSTED, "tenant over its limit");
      case 5: {
        auto md = ctx->client_metadata().find("authorization");
        if (md == ctx->client_metadata().end() || md->second != "Bearer k-0123456789abcdef") {
          return grpc::Status(grpc::UNAUTHENTICATED, "invalid API key");
        }
        return grpc::Status(grpc::INVALID_ARGUMENT, "authorized, then refused");
      }
    }
    return grpc::Status(grpc::INTERNAL, "no script");
  }

  std::atomic<bool> cancelled_{false};
  v1::GenerateRequest last_request_;
  std::mutex seeds_mu_;
  std::vector<uint64_t> seeds_;  // of every call
};

// One token per byte: enough for the frontend, which only counts and forwards ids.
class ByteTokenizer final : public Tokenizer {
 public:
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool) const override {
    return std::vector<int32_t>(text.begin(), text.end());
  }
  std::string Decode(absl::Span<const int32_t> ids, bool) const override {
    return std::string(ids.begin(), ids.end());
  }
  int32_t vocab_size() const override { return 256; }
  std::optional<int32_t> bos_id() const override { return std::nullopt; }
  std::optional<int32_t> eos_id() const override { return std::nullopt; }
  std::optional<int32_t> TokenId(std::string_view) const override { return std::nullopt; }
};

class OpenAiFrontendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder b;
    b.RegisterService(&upstream_);
    grpc_ = b.BuildAndStart();
    FrontendHooks hooks;
    hooks.tool_call_format = ToolFormat();
    hooks.model = [] { return ServedModel{"m", 100}; };
    hooks.ready = [] { return true; };
    hooks.metrics = [] { return std::string("kvcast_x 1\n"); };
    hooks.render_chat = [](const Json& messages, const Json&, bool gen, const Json&) {
      // Byte 1 first: the upstream's script [1]; a question about the
      // weather: [7].
      const bool weather = messages.dump().find("weather") != std::string::npos;
      return absl::StatusOr<std::string>((weather ? "\x07" : "\x01") + messages.dump() + (gen ? "!" : ""));
    };
    frontend_ = std::make_unique<OpenAiFrontend>(
        grpc_->InProcessChannel(grpc::ChannelArguments()), &tokenizer_, &keys_,
        &metrics_, hooks, Options());
    services::HttpServer::Options o;
    o.listen = "127.0.0.1:0";
    auto s = services::HttpServer::Start(
        o, [this](services::HttpRequest r, std::shared_ptr<services::HttpExchange> e) {
          frontend_->Handle(std::move(r), std::move(e));
        });
    ASSERT_TRUE(s.ok()) << s.status();
    http_ = std::move(*s);
  }
  void TearDown() override {
    http_.reset();
    grpc_->Shutdown();
  }
  virtual FrontendOptions Options() const { return FrontendOptions(); }
  virtual ToolCallFormat ToolFormat() const { return ToolCallFormat::kHermes; }

  // One request on a new connection; the whole response.
  std::string Call(const std::string& request, const std::string& until) {
    int fd = ConnectLoopback(http_->port());
    SendAll(fd, request);
    std::string r = ReadUntil(fd, until);
    close(fd);
    return r;
  }

  ScriptedGeneration upstream_;
  ByteTokenizer tokenizer_;
  std::unique_ptr<grpc::Server> grpc_;
  services::ApiKeys keys_;
  services::MetricsRegistry metrics_;
  std::unique_ptr<OpenAiFrontend> frontend_;
  std::unique_ptr<services::HttpServer> http_;
};

// No room to wait for the work threads: /v1 requests are refused at once,
// with a Retry-After; what needs no tokenizing is still answered.
class OverloadedFrontendTest : public OpenAiFrontendTest {
  FrontendOptions Options() const override {
    FrontendOptions o;
    o.work_threads = 1;
    o.max_waiting = 0;
    return o;
  }
};

TEST_F(OverloadedFrontendTest, RequestsBeyondTheWorkQueueGet503) {
  std::string r = Call(PostJson("/v1/completions", R"({"prompt":[1,7],"max_tokens":5})"), "}}");
  EXPECT_THAT(r, StartsWith("HTTP/1.1 503"));
  EXPECT_THAT(r, HasSubstr("Retry-After: 1"));
  EXPECT_THAT(r, HasSubstr("waiting to be tokenized"));
  EXPECT_THAT(Call("GET /v1/models HTTP/1.1\r\nHost: t\r\n\r\n", "]}"),
              StartsWith("HTTP/1.1 200 OK"));
}

TEST_F(OpenAiFrontendTest, UnaryCompletionJoinsTheDeltas) {
  std::string r = Call(PostJson("/v1/completions", R"({"prompt":[1,7],"max_tokens":5,"seed":3})"),
                       "}}}");
  EXPECT_THAT(r, StartsWith("HTTP/1.1 200 OK"));
  EXPECT_THAT(r, HasSubstr(R"("text":"abc")"));
  EXPECT_THAT(r, HasSubstr(R"("finish_reason":"stop")"));
  EXPECT_THAT(r, HasSubstr(R"("usage":{"prompt_tokens":2,"total_tokens":5,"completion_tokens":3,)"
                           R"("prompt_tokens_details":{"cached_tokens":1}})"));
  EXPECT_EQ(upstream_.last_request_.max_tokens(), 5);
  EXPECT_EQ(upstream_.last_request_.sampling().seed(), 3u);
  EXPECT_EQ(upstream_.last_request_.sampling().temperature(), 1.f);
}

TEST_F(OpenAiFrontendTest, ChatStreamsRoleContentFinishUsageDone) {
  std::string r = Call(PostJson("/v1/chat/completions",
                                R"({"messages":[{"role":"user","content":"hi"}],"stream":true,
                                    "stream_options":{"include_usage":true,"continuous_usage_stats":true}})"),
                       "data: [DONE]\n\n\r\n0\r\n\r\n");
  EXPECT_THAT(r, HasSubstr("Content-Type: text/event-stream"));
  // Chunk order: role, "a", "bc" (the empty delta is skipped), finish, usage, [DONE].
  const size_t role = r.find(R"("delta":{"role":"assistant","content":""})");
  const size_t a = r.find(R"("delta":{"content":"a"})");
  const size_t bc = r.find(R"("delta":{"content":"bc"})");
  const size_t finish = r.find(R"("delta":{},"logprobs":null,"finish_reason":"stop")");
  const size_t usage = r.find(R"("choices":[],"usage")");
  const size_t done = r.find("data: [DONE]");
  EXPECT_TRUE(role < a && a < bc && bc < finish && finish < usage && usage < done) << r;
  EXPECT_THAT(r, Not(HasSubstr(R"("delta":{"content":""})")));
  // continuous_usage_stats: the running count is on every chunk.
  EXPECT_THAT(r, HasSubstr(R"("completion_tokens":1,)"));
  // The prompt is the rendered template (the test hook renders the messages
  // as JSON), one id per byte; max_tokens defaults to the rest of the context.
  const std::string rendered = "\x01" R"([{"role":"user","content":"hi"}]!)";
  EXPECT_EQ(upstream_.last_request_.token_ids().ids_size(), int(rendered.size()));
  EXPECT_EQ(upstream_.last_request_.max_tokens(), 100 - int(rendered.size()));
}

// logprobs reach the Generation call and come back per token as the
// OpenAI API shapes them, the token text from the tokenizer.
TEST_F(OpenAiFrontendTest, ChatLogprobsComeBackPerToken) {
  std::string r = Call(PostJson("/v1/chat/completions",
                                R"({"messages":[{"role":"user","content":"hi"}],"logprobs":true,
                                    "top_logprobs":2})"),
                       "}}}");
  EXPECT_TRUE(upstream_.last_request_.sampling().logprobs());
  EXPECT_EQ(upstream_.last_request_.sampling().top_logprobs(), 2);
  const Json body = Json::parse(r.substr(r.find("\r\n\r\n") + 4));
  const Json& content = body["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 3u) << r;
  EXPECT_EQ(content[0], Json::parse(R"({"token":"a","logprob":-0.5,"bytes":[97],"top_logprobs":[
      {"token":"a","logprob":-0.5,"bytes":[97]},{"token":"x","logprob":-9.0,"bytes":[120]}]})"));
  EXPECT_EQ(content[1]["bytes"], Json::parse("[226]"));  // the byte, not U+FFFD
  EXPECT_EQ(content[2]["token"], "c");
  EXPECT_EQ(content[2]["logprob"], -1.5);
  // Not asked: null, as before.
  r = Call(PostJson("/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}]})"),
           "}}}");
  EXPECT_FALSE(upstream_.last_request_.sampling().logprobs());
  EXPECT_TRUE(Json::parse(r.substr(r.find("\r\n\r\n") + 4))["choices"][0]["logprobs"].is_null());
}

// Streamed, a token whose text is held back sends its logprobs with the
// next text; offsets count characters of the tokens before.
TEST_F(OpenAiFrontendTest, StreamedCompletionLogprobsTravelWithTheirText) {
  std::string r = Call(PostJson("/v1/completions", R"({"prompt":[1,7],"stream":true,"logprobs":1})"),
                       "data: [DONE]\n\n");
  EXPECT_EQ(upstream_.last_request_.sampling().top_logprobs(), 1);
  EXPECT_THAT(r, HasSubstr(R"("text":"a","logprobs":{"tokens":["a"],"token_logprobs":[-0.5],)"
                           R"("top_logprobs":[{"a":-0.5}],"text_offset":[0]})"));
  EXPECT_THAT(r, HasSubstr("\"text\":\"bc\",\"logprobs\":{\"tokens\":[\"\xEF\xBF\xBD\",\"c\"],"
                           "\"token_logprobs\":[-1.0,-1.5],"));
  EXPECT_THAT(r, HasSubstr(R"("text_offset":[1,2]})"));
  EXPECT_THAT(r, HasSubstr(R"("text":"","logprobs":null,"finish_reason":"stop")"));
}

constexpr char kWeatherChat[] = R"({"messages":[{"role":"user","content":"weather in Lisbon?"}],
    "tools":[{"type":"function","function":{"name":"get_weather",
      "parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}])";

// With tools (tool_choice auto), the model's call comes back in
// message.tool_calls, the text around it as content, finish "tool_calls".
TEST_F(OpenAiFrontendTest, ToolCallsAreParsedOutOfTheAnswer) {
  std::string r = Call(PostJson("/v1/chat/completions", std::string(kWeatherChat) + "}"), "}}}");
  const Json body = Json::parse(r.substr(r.find("\r\n\r\n") + 4));
  const Json& choice = body["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls") << r;
  EXPECT_EQ(choice["message"]["content"], "Let me look.");
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << r;
  const Json& call = choice["message"]["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(call["function"]["arguments"], R"({"city":"Lisbon"})");
  EXPECT_EQ(call["id"].get<std::string>().rfind("chatcmpl-tool-", 0), 0u);
  // tool_choice none: the text as the model wrote it.
  r = Call(PostJson("/v1/chat/completions", std::string(kWeatherChat) + R"(,"tool_choice":"none"})"), "}}}");
  const Json plain = Json::parse(r.substr(r.find("\r\n\r\n") + 4))["choices"][0];
  EXPECT_EQ(plain["finish_reason"], "stop");
  EXPECT_THAT(plain["message"]["content"].get<std::string>(), HasSubstr("<tool_call>"));
  EXPECT_TRUE(plain["message"]["tool_calls"].empty());
}

// Streamed: text before the call streams (never a piece of the tag), then
// one delta with the call (index, id, name, arguments), then the finish.
TEST_F(OpenAiFrontendTest, StreamedToolCallsComeAsADelta) {
  std::string r = Call(PostJson("/v1/chat/completions", std::string(kWeatherChat) + R"(,"stream":true})"),
                       "data: [DONE]\n\n\r\n0\r\n\r\n");
  const size_t text = r.find(R"("delta":{"content":"Let me look. "})");
  const size_t calls = r.find(R"("delta":{"tool_calls":[{"index":0,"id":"chatcmpl-tool-)");
  const size_t args = r.find(R"("function":{"name":"get_weather","arguments":"{\"city\":\"Lisbon\"}"}}]})");
  const size_t finish = r.find(R"("finish_reason":"tool_calls")");
  EXPECT_TRUE(text != std::string::npos && text < calls && calls < args && args < finish) << r;
  EXPECT_THAT(r, Not(HasSubstr("<tool")));
}

// A forced call: the grammar's schema travels as the request's
// response_format, the call's JSON between the template's tags.
TEST_F(OpenAiFrontendTest, ForcedToolCallsAskForTheirGrammar) {
  Call(PostJson("/v1/chat/completions", std::string(kWeatherChat) +
                    R"(,"tool_choice":{"type":"function","function":{"name":"get_weather"}}})"),
       "}}}");
  const v1::ResponseFormat& f = upstream_.last_request_.sampling().response_format();
  EXPECT_EQ(f.type(), v1::ResponseFormat::RESPONSE_FORMAT_JSON_SCHEMA);
  EXPECT_EQ(f.json_prefix(), "<tool_call>\n");
  EXPECT_EQ(f.json_suffix(), "\n</tool_call>");
  EXPECT_EQ(f.prefix_token(), "");
  EXPECT_EQ(Json::parse(f.json_schema()), Json::parse(R"({"type":"object","properties":{
      "name":{"const":"get_weather"},
      "arguments":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}},
      "required":["name","arguments"],"additionalProperties":false})"));
}

// A model whose template writes Mistral's calls: the forced call starts
// with the [TOOL_CALLS] special token, which travels apart from the text
// prefix (the engine emits it as one token).
class MistralToolsFrontendTest : public OpenAiFrontendTest {
 protected:
  ToolCallFormat ToolFormat() const override { return ToolCallFormat::kMistral; }
};

TEST_F(MistralToolsFrontendTest, AForcedCallAsksForTheToolCallsTokenFirst) {
  Call(PostJson("/v1/chat/completions", std::string(kWeatherChat) + R"(,"tool_choice":"required"})"),
       "}}}");
  const v1::ResponseFormat& f = upstream_.last_request_.sampling().response_format();
  EXPECT_EQ(f.type(), v1::ResponseFormat::RESPONSE_FORMAT_JSON_SCHEMA);
  EXPECT_EQ(f.prefix_token(), "[TOOL_CALLS]");
  EXPECT_EQ(f.json_prefix(), " [");
  EXPECT_EQ(f.json_suffix(), "]");
  EXPECT_NE(f.json_schema().find("get_weather"), std::string::npos) << f.json_schema();
}

TEST_F(OpenAiFrontendTest, ErrorAfterTheFirstTokenIsAnEventThenDone) {
  std::string r = Call(PostJson("/v1/completions", R"({"prompt":[2],"stream":true})"),
                       "data: [DONE]\n\n");
  EXPECT_THAT(r, StartsWith("HTTP/1.1 200 OK"));
  EXPECT_THAT(r, HasSubstr(R"("text":"x")"));
  EXPECT_THAT(r, HasSubstr(R"(data: {"error":{"message":"decode worker lost","type":"service_unavailable")"));
}

TEST_F(OpenAiFrontendTest, ErrorsBeforeTheFirstTokenAreHttpStatuses) {
  std::string r = Call(PostJson("/v1/completions", R"({"prompt":[3],"stream":true})"), "}}");
  EXPECT_THAT(r, StartsWith("HTTP/1.1 503 "));
  EXPECT_THAT(r, HasSubstr("Retry-After: 1\r\n"));
  EXPECT_THAT(r, HasSubstr("queue full"));
  r = Call(PostJson("/v1/completions", R"({"prompt":[6],"stream":true})"), "}}");
  EXPECT_THAT(r, StartsWith("HTTP/1.1 429 "));
  EXPECT_THAT(r, HasSubstr("Retry-After: 7\r\n"));
  EXPECT_THAT(r, HasSubstr(R"("type":"rate_limit_error")"));
  r = Call(PostJson("/v1/completions", R"({"prompt":[1],"model":"other"})"), "}}");
  EXPECT_THAT(r, StartsWith("HTTP/1.1 404 "));
  EXPECT_THAT(r, HasSubstr(R"("code":"model_not_found")"));
  r = Call(PostJson("/v1/chat/completions", R"({"messages":[{"role":"user","content":7}]})"), "}}");
  EXPECT_THAT(r, StartsWith("HTTP/1.1 400 "));
  EXPECT_THAT(r, HasSubstr(R"("param":"messages[0].content")"));
  EXPECT_THAT(Call("GET /v1/nothing HTTP/1.1\r\nHost: t\r\n\r\n", "}}"), StartsWith("HTTP/1.1 404 "));
  EXPECT_THAT(Call("GET /v1/completions HTTP/1.1\r\nHost: t\r\n\r\n", "}}"), StartsWith("HTTP/1.1 405 "));
}

TEST_F(OpenAiFrontendTest, PromptAsLongAsTheContextIsRefused) {
  std::string ids = "0";
  for (int i = 1; i < 100; ++i) ids += ",1";
  std::string r = Call(PostJson("/v1/completions", R"({"prompt":[)" + ids + "]}"), "}}");
  EXPECT_THAT(r, StartsWith("HTTP/1.1 400 "));
  EXPECT_THAT(r, HasSubstr("maximum context length is 100 tokens; the prompt has 100"));
}

TEST_F(OpenAiFrontendTest, ClientLeavingCancelsTheCall) {
  int fd = ConnectLoopback(http_->port());
  SendAll(fd, PostJson("/v1/completions", R"({"prompt":[4],"stream":true})"));
  EXPECT_THAT(ReadUntil(fd, R"("text":"x")"), HasSubstr(R"("text":"x")"));
  close(fd);
  for (int i = 0; i < 300 && !upstream_.cancelled_; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(upstream_.cancelled_);
}

TEST_F(OpenAiFrontendTest, SeveralPromptsAreSeveralChoices) {
  std::string r = Call(PostJson("/v1/completions", R"({"prompt":[[1],[1,2]]})"), "}}}");
  EXPECT_THAT(r, HasSubstr(R"("index":0,"text":"abc")"));
  EXPECT_THAT(r, HasSubstr(R"("index":1,"text":"abc")"));
  EXPECT_THAT(r, HasSubstr(R"("prompt_tokens":3,"total_tokens":9,"completion_tokens":6)"));
}

// n choices per prompt: n calls, seeds seed + i (random without a seed),
// choice p * n + i, the prompt counted once in the usage.
TEST_F(OpenAiFrontendTest, NChoicesAreNCallsWithTheirOwnSeeds) {
  std::string r = Call(PostJson("/v1/completions", R"({"prompt":[[1],[1,2]],"n":3,"seed":10})"), "}}}");
  for (int i = 0; i < 6; ++i) EXPECT_THAT(r, HasSubstr(absl::StrCat(R"("index":)", i, R"(,"text":"abc")")));
  EXPECT_THAT(r, HasSubstr(R"("prompt_tokens":3,"total_tokens":21,"completion_tokens":18)")) << r;
  {
    std::lock_guard<std::mutex> l(upstream_.seeds_mu_);
    std::multiset<uint64_t> seeds(upstream_.seeds_.begin(), upstream_.seeds_.end());
    EXPECT_EQ(seeds, (std::multiset<uint64_t>{10, 10, 11, 11, 12, 12}));
    upstream_.seeds_.clear();
  }
  Call(PostJson("/v1/completions", R"({"prompt":[1],"n":2})"), "}}}");
  std::lock_guard<std::mutex> l(upstream_.seeds_mu_);
  ASSERT_EQ(upstream_.seeds_.size(), 2u);
  EXPECT_NE(upstream_.seeds_[0], upstream_.seeds_[1]);  // random, each its own
}

// best_of candidates (seeds seed + i), each asked for its logprobs; the n of
// highest cumulative logprob come back as choices 0..n-1 (ties: the first),
// without logprobs unless asked; usage bills every candidate's tokens.
TEST_F(OpenAiFrontendTest, BestOfReturnsTheMostLikelyCandidates) {
  std::string r = Call(PostJson("/v1/completions", R"({"prompt":[8],"n":2,"best_of":3,"seed":10})"),
                       "}}}");
  EXPECT_THAT(r, StartsWith("HTTP/1.1 200 OK"));
  EXPECT_THAT(r, HasSubstr(R"("index":0,"text":"s11","logprobs":null)")) << r;
  EXPECT_THAT(r, HasSubstr(R"("index":1,"text":"s10","logprobs":null)")) << r;
  EXPECT_THAT(r, Not(HasSubstr("s12")));
  EXPECT_THAT(r, Not(HasSubstr(R"("index":2)")));
  EXPECT_THAT(r, HasSubstr(R"("prompt_tokens":1,"total_tokens":4,"completion_tokens":3)")) << r;
  EXPECT_TRUE(upstream_.last_request_.sampling().logprobs());
  {
    std::lock_guard<std::mutex> l(upstream_.seeds_mu_);
    std::multiset<uint64_t> seeds(upstream_.seeds_.begin(), upstream_.seeds_.end());
    EXPECT_EQ(seeds, (std::multiset<uint64_t>{10, 11, 12}));
  }
  // Asked for, the returned candidates' logprobs come with them.
  r = Call(PostJson("/v1/completions", R"({"prompt":[8],"best_of":3,"seed":10,"logprobs":0})"),
           "}}}");
  EXPECT_THAT(r, HasSubstr(R"("token_logprobs":[-0.1)")) << r;
  EXPECT_THAT(r, HasSubstr(R"("text":"s11")"));
  // Without best_of no logprobs are asked for.
  Call(PostJson("/v1/completions", R"({"prompt":[8],"n":2})"), "}}}");
  EXPECT_FALSE(upstream_.last_request_.sampling().logprobs());
}

TEST_F(OpenAiFrontendTest, ModelsHealthMetrics) {
  std::string r = Call("GET /v1/models HTTP/1.1\r\nHost: t\r\n\r\n", "]}");
  EXPECT_THAT(r, HasSubstr(R"({"object":"list","data":[{"id":"m","object":"model",)"));
  EXPECT_THAT(r, HasSubstr(R"("max_model_len":100}]})"));
  EXPECT_THAT(Call("GET /health HTTP/1.1\r\nHost: t\r\n\r\n", "ok\n"), StartsWith("HTTP/1.1 200 "));
  EXPECT_THAT(Call("GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n", "kvcast_x 1\n"),
              HasSubstr("text/plain; version=0.0.4"));
}

// vLLM's /tokenize (a prompt, or messages through the chat template) and
// /detokenize, with errors naming the field at fault.
TEST_F(OpenAiFrontendTest, TokenizeAndDetokenizeAsVllmServesThem) {
  EXPECT_THAT(Call(PostJson("/tokenize", R"({"model":"m","prompt":"hi"})"), "]}"),
              HasSubstr(R"({"count":2,"max_model_len":100,"tokens":[104,105]})"));
  // The template renders "\x01" + the messages' JSON + "!" (generation prompt on).
  const std::string messages = R"([{"role":"user","content":"a"}])";
  const std::string rendered = "\x01" + Json::parse(messages).dump() + "!";
  EXPECT_THAT(Call(PostJson("/tokenize", R"({"messages":)" + messages + "}"), "]}"),
              HasSubstr(absl::StrCat(R"({"count":)", rendered.size(), ",")));
  EXPECT_THAT(Call(PostJson("/tokenize", R"({"messages":)" + messages +
                                             R"(,"add_generation_prompt":false})"), "]}"),
              HasSubstr(absl::StrCat(R"({"count":)", rendered.size() - 1, ",")));
  EXPECT_THAT(Call(PostJson("/detokenize", R"({"tokens":[104,105]})"), "}"),
              HasSubstr(R"({"prompt":"hi"})"));
  std::string r = Call(PostJson("/detokenize", R"({"tokens":[104,300]})"), "}}");
  EXPECT_THAT(r, StartsWith("HTTP/1.1 400 "));
  EXPECT_THAT(r, HasSubstr(R"("param":"tokens")"));
  r = Call(PostJson("/tokenize", R"({"model":"other","prompt":"hi"})"), "}}");
  EXPECT_THAT(r, StartsWith("HTTP/1.1 404 "));
  r = Call(PostJson("/tokenize", R"({"prompt":[1,2]})"), "}}");
  EXPECT_THAT(r, StartsWith("HTTP/1.1 400 "));
  EXPECT_THAT(r, HasSubstr("either prompt (a string) or messages"));
  r = Call(PostJson("/tokenize", R"({"prompt":"hi","return_token_strs":true})"), "}}");
  EXPECT_THAT(r, HasSubstr(R"("param":"return_token_strs")"));
  r = Call("GET /tokenize HTTP/1.1\r\nHost: t\r\n\r\n", "}}");
  EXPECT_THAT(r, StartsWith("HTTP/1.1 405 "));
}

TEST_F(OpenAiFrontendTest, ApiKeysGuardV1AndTravelAsMetadata) {
  auto keys = services::ApiKeys::Parse("k-0123456789abcdef alice\n", "keys");
  ASSERT_TRUE(keys.ok());
  keys_ = *keys;
  std::string r = Call(PostJson("/v1/completions", R"({"prompt":[5]})"), "}}");
  EXPECT_THAT(r, StartsWith("HTTP/1.1 401 "));
  EXPECT_THAT(r, HasSubstr("WWW-Authenticate: Bearer\r\n"));
  EXPECT_THAT(Call("GET /v1/models HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer nope-nope-nope-nope\r\n\r\n",
                   "}}"),
              StartsWith("HTTP/1.1 401 "));
  // The key reaches the Generation service, which answers for it.
  r = Call(PostJson("/v1/completions", R"({"prompt":[5]})",
                    "Authorization: Bearer k-0123456789abcdef\r\n"),
           "}}");
  EXPECT_THAT(r, StartsWith("HTTP/1.1 400 "));
  EXPECT_THAT(r, HasSubstr("authorized, then refused"));
  EXPECT_THAT(Call("GET /health HTTP/1.1\r\nHost: t\r\n\r\n", "ok\n"), StartsWith("HTTP/1.1 200 "));
}

}  // namespace
}  // namespace kvcast::openai
