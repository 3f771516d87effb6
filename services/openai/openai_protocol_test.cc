#include "services/openai/openai_protocol.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvcast::openai {
namespace {

using ::testing::ElementsAre;
using ::testing::AnyOf;
using ::testing::Eq;
using ::testing::HasSubstr;

CompletionRequest Parsed(Endpoint e, const std::string& body) {
  CompletionRequest r;
  auto err = ParseRequest(e, body, &r);
  EXPECT_FALSE(err.has_value()) << body << " -> " << (err ? err->message : "");
  return r;
}

ApiError Refused(Endpoint e, const std::string& body) {
  CompletionRequest r;
  auto err = ParseRequest(e, body, &r);
  EXPECT_TRUE(err.has_value()) << body;
  return err.value_or(ApiError{});
}

TEST(OpenAiProtocolTest, ParsesCompletionPromptsOfEveryShape) {
  auto r = Parsed(Endpoint::kCompletions,
                  R"({"model":"m","prompt":"hi","max_tokens":5,"temperature":0,"top_p":0.5,
                      "top_k":-1,"seed":7,"stop":"x","ignore_eos":true,"min_tokens":2,
                      "frequency_penalty":0.5,"presence_penalty":-1.5,"logit_bias":{"17":-100,"3":2.5},
                      "stream":true,"stream_options":{"include_usage":true},"unknown":[1]})");
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(*r.prompts[0].text, "hi");
  EXPECT_EQ(r.max_tokens, 5);
  EXPECT_EQ(r.temperature, 0);
  EXPECT_EQ(r.top_p, 0.5);
  EXPECT_EQ(r.top_k, 0);
  EXPECT_EQ(r.seed, 7u);
  EXPECT_THAT(r.stop, ElementsAre("x"));
  EXPECT_TRUE(r.ignore_eos && r.stream && r.include_usage && !r.continuous_usage_stats);
  EXPECT_EQ(r.min_tokens, 2);
  EXPECT_EQ(r.frequency_penalty, 0.5);
  EXPECT_EQ(r.presence_penalty, -1.5);
  EXPECT_THAT(r.logit_bias, ElementsAre(std::pair<int32_t, float>{17, -100.f}, std::pair<int32_t, float>{3, 2.5f}));

  r = Parsed(Endpoint::kCompletions, R"({"prompt":[1,2,3]})");
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_THAT(r.prompts[0].ids, ElementsAre(1, 2, 3));
  EXPECT_FALSE(r.max_tokens.has_value());
  r = Parsed(Endpoint::kCompletions, R"({"prompt":["a","b"],"stop":["x","y"]})");
  EXPECT_EQ(r.prompts.size(), 2u);
  EXPECT_THAT(r.stop, ElementsAre("x", "y"));
  r = Parsed(Endpoint::kCompletions, R"({"prompt":[[5],[6,7]],"max_completion_tokens":3})");
  ASSERT_EQ(r.prompts.size(), 2u);
  EXPECT_THAT(r.prompts[1].ids, ElementsAre(6, 7));
  EXPECT_EQ(r.max_tokens, 3);
}

TEST(OpenAiProtocolTest, ParsesChatMessagesFlatteningTextParts) {
  auto r = Parsed(Endpoint::kChat, R"({"messages":[
      {"role":"system","content":"be brief"},
      {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
      {"role":"assistant","content":null,"tool_calls":[]}],
      "add_generation_prompt":false,"chat_template_kwargs":{"x":1}})");
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[1]["content"], "a\nb");
  EXPECT_EQ(r.messages[2]["content"], "");
  EXPECT_TRUE(r.messages[2].contains("tool_calls"));
  EXPECT_FALSE(r.add_generation_prompt);
  EXPECT_EQ(r.chat_template_kwargs["x"], 1);
}

TEST(OpenAiProtocolTest, RefusesBadFieldsNamingThem) {
  struct Case {
    Endpoint e;
    const char* body;
    const char* param;
    const char* message;
  } cases[] = {
      {Endpoint::kCompletions, "{", "", "not valid JSON"},
      {Endpoint::kCompletions, "[]", "", "JSON object"},
      {Endpoint::kCompletions, R"({})", "prompt", "required"},
      {Endpoint::kCompletions, R"({"prompt":""})", "prompt", "empty prompt"},
      {Endpoint::kCompletions, R"({"prompt":[]})", "prompt", "must not be empty"},
      {Endpoint::kCompletions, R"({"prompt":[1,-2]})", "prompt", "non-negative"},
      {Endpoint::kCompletions, R"({"prompt":"a","max_tokens":0})", "max_tokens", "[1,"},
      {Endpoint::kCompletions, R"({"prompt":"a","max_tokens":"5"})", "max_tokens", "integer"},
      {Endpoint::kCompletions, R"({"prompt":"a","temperature":-1})", "temperature", "[0, 100]"},
      {Endpoint::kCompletions, R"({"prompt":"a","top_p":0})", "top_p", "(0, 1]"},
      {Endpoint::kCompletions, R"({"prompt":"a","n":0})", "n", "[1, 64]"},
      {Endpoint::kCompletions, R"({"prompt":["a","b"],"n":40})", "n", "80 choices; at most 64"},
      {Endpoint::kCompletions, R"({"prompt":"a","n":3,"best_of":2})", "best_of", "must be >= n (3)"},
      {Endpoint::kCompletions, R"({"prompt":"a","best_of":65})", "best_of", "[1, 64]"},
      {Endpoint::kCompletions, R"({"prompt":"a","best_of":2.5})", "best_of", "integer"},
      {Endpoint::kCompletions, R"({"prompt":["a","b"],"best_of":40})", "best_of", "80 generations"},
      {Endpoint::kCompletions, R"({"prompt":"a","best_of":3,"stream":true})", "best_of",
       "cannot be streamed"},
      {Endpoint::kCompletions, R"({"prompt":"a","echo":1})", "echo", "boolean"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"x"}],"echo":true})", "echo",
       "/v1/completions field"},
      {Endpoint::kCompletions, R"({"prompt":"a","logprobs":21})", "logprobs", "[0, 20]"},
      {Endpoint::kCompletions, R"({"prompt":"a","logprobs":"3"})", "logprobs", "integer"},
      {Endpoint::kCompletions, R"({"prompt":"a","stop":[""]})", "stop", "empty"},
      {Endpoint::kCompletions, R"({"prompt":"a","stop":7})", "stop", "string"},
      {Endpoint::kCompletions, R"({"prompt":"a","stream_options":{"include_usage":true}})",
       "stream_options", "stream"},
      {Endpoint::kCompletions, R"({"prompt":"a","stream":true,"stream_options":{"include_usage":1}})",
       "stream_options.include_usage", "boolean"},
      {Endpoint::kCompletions, R"({"prompt":"a","min_tokens":5,"max_tokens":2})", "min_tokens",
       "must not exceed"},
      {Endpoint::kCompletions, R"({"prompt":"a","presence_penalty":2.5})", "presence_penalty",
       "[-2, 2]"},
      {Endpoint::kCompletions, R"({"prompt":"a","frequency_penalty":"1"})", "frequency_penalty",
       "number"},
      {Endpoint::kCompletions, R"({"prompt":"a","logit_bias":[1]})", "logit_bias", "object"},
      {Endpoint::kCompletions, R"({"prompt":"a","logit_bias":{"x":1}})", "logit_bias",
       "'x' is not a token id"},
      {Endpoint::kCompletions, R"({"prompt":"a","logit_bias":{"5":-101}})", "logit_bias",
       "[-100, 100]"},
      {Endpoint::kCompletions, R"({"prompt":"a","model":3})", "model", "string"},
      {Endpoint::kChat, R"({"messages":[]})", "messages", "non-empty"},
      {Endpoint::kChat, R"({"messages":[{"content":"x"}]})", "messages[0].role", "string"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})",
       "messages[0].content", "image_url"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":5}]})", "messages[0].content",
       "string or a list"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"x"}],"logprobs":1})",
       "logprobs", "boolean"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"x"}],"top_logprobs":2})",
       "top_logprobs", "needs 'logprobs': true"},
      {Endpoint::kChat,
       R"({"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":21})",
       "top_logprobs", "[0, 20]"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"x"}],"response_format":"json"})",
       "response_format", "an object with a 'type'"},
      {Endpoint::kChat,
       R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"yaml"}})",
       "response_format.type", "\"yaml\" is not one of text, json_object, json_schema"},
      {Endpoint::kChat,
       R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema"}})",
       "response_format.json_schema", "must be an object"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"x"}],
          "response_format":{"type":"json_schema","json_schema":{"name":"a","schema":[1]}}})",
       "response_format.json_schema.schema", "JSON Schema object"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"x"}],
          "response_format":{"type":"json_schema","json_schema":{"name":"a","strict":"yes"}}})",
       "response_format.json_schema.strict", "boolean"},
      {Endpoint::kCompletions, R"({"prompt":"a","guided_json":"{no"})", "guided_json", "not valid JSON"},
      {Endpoint::kCompletions,
       R"({"prompt":"a","guided_json":{},"response_format":{"type":"json_object"}})", "guided_json",
       "not 'guided_json' beside another"},
      {Endpoint::kCompletions, R"({"prompt":"a","guided_regex":"a+","guided_choice":["a"]})",
       "guided_choice", "beside another"},
      {Endpoint::kCompletions, R"({"prompt":"a","guided_regex":""})", "guided_regex", "non-empty string"},
      {Endpoint::kCompletions, R"({"prompt":"a","guided_choice":[]})", "guided_choice", "non-empty list"},
      {Endpoint::kCompletions, R"({"prompt":"a","guided_choice":["a",""]})", "guided_choice",
       "non-empty strings"},
      {Endpoint::kCompletions, R"({"prompt":"a","guided_grammar":7})", "guided_grammar",
       "non-empty string"},
      {Endpoint::kCompletions, R"({"prompt":"a","structured_outputs":[]})", "structured_outputs",
       "must be an object"},
      {Endpoint::kCompletions, R"({"prompt":"a","structured_outputs":{"structural_tag":"x"}})",
       "structured_outputs.structural_tag", "not supported (json, regex, choice and grammar are)"},
      {Endpoint::kCompletions, R"({"prompt":"a","structured_outputs":{"regex":"a","grammar":"root ::= \"a\""}})",
       "structured_outputs.grammar", "beside another"},
      {Endpoint::kCompletions, R"({"prompt":"a","structured_outputs":{"json":"{no"}})",
       "structured_outputs.json", "not valid JSON"},
  };
  for (const Case& c : cases) {
    ApiError e = Refused(c.e, c.body);
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body;
    EXPECT_THAT(e.message, HasSubstr(c.message)) << c.body;
  }
}

TEST(OpenAiProtocolTest, ResponseFormatsOnBothEndpoints) {
  using Format = CompletionRequest::Format;
  const std::string chat = R"({"messages":[{"role":"user","content":"x"}],)";
  EXPECT_EQ(Parsed(Endpoint::kChat, chat + R"("response_format":{"type":"text"}})").format, Format::kText);
  EXPECT_EQ(Parsed(Endpoint::kChat, chat + R"("response_format":null})").format, Format::kText);
  EXPECT_EQ(Parsed(Endpoint::kChat, chat + R"("response_format":{"type":"json_object"}})").format,
            Format::kJsonObject);
  // The schema travels as text in the request's own key order.
  CompletionRequest r = Parsed(Endpoint::kChat, chat + R"("response_format":{"type":"json_schema",
      "json_schema":{"name":"p","strict":true,"schema":{"type":"object",
      "properties":{"zeta":{"type":"integer"},"alpha":{"type":"string"}}}}}})");
  EXPECT_EQ(r.format, Format::kJsonSchema);
  EXPECT_EQ(r.json_schema,
            R"({"type":"object","properties":{"zeta":{"type":"integer"},"alpha":{"type":"string"}}})");
  // No schema: any JSON object.
  EXPECT_EQ(Parsed(Endpoint::kChat, chat + R"("response_format":{"type":"json_schema",
      "json_schema":{"name":"p"}}})").format, Format::kJsonObject);
  // Completions take it too, and vLLM's guided_json as an object or text.
  r = Parsed(Endpoint::kCompletions, R"({"prompt":"a","response_format":{"type":"json_object"}})");
  EXPECT_EQ(r.format, Format::kJsonObject);
  r = Parsed(Endpoint::kCompletions, R"({"prompt":"a","guided_json":"{\"type\": \"boolean\"}"})");
  EXPECT_EQ(r.format, Format::kJsonSchema);
  EXPECT_EQ(r.json_schema, R"({"type":"boolean"})");
  r = Parsed(Endpoint::kCompletions, R"({"prompt":"a","guided_json":{"enum":[1,2]}})");
  EXPECT_EQ(r.json_schema, R"({"enum":[1,2]})");
  r = Parsed(Endpoint::kChat, chat + R"("guided_regex":"[0-9]+"})");
  EXPECT_EQ(r.format, Format::kRegex);
  EXPECT_EQ(r.regex, "[0-9]+");
  r = Parsed(Endpoint::kChat, chat + R"("guided_choice":["yes","no"]})");
  EXPECT_EQ(r.format, Format::kChoice);
  EXPECT_THAT(r.choices, ElementsAre("yes", "no"));
  r = Parsed(Endpoint::kCompletions, R"({"prompt":"a","guided_grammar":"root ::= \"x\""})");
  EXPECT_EQ(r.format, Format::kGrammar);
  EXPECT_EQ(r.grammar, R"(root ::= "x")");
  // vLLM 0.12's names; null and false members are no request.
  r = Parsed(Endpoint::kChat, chat + R"("structured_outputs":{"grammar":"root ::= [ab]+","json":null,
      "disable_fallback":false}})");
  EXPECT_EQ(r.format, Format::kGrammar);
  EXPECT_EQ(r.grammar, "root ::= [ab]+");
  r = Parsed(Endpoint::kCompletions, R"({"prompt":"a","structured_outputs":{"json":{"type":"integer"}}})");
  EXPECT_EQ(r.format, Format::kJsonSchema);
  EXPECT_EQ(r.json_schema, R"({"type":"integer"})");
  r = Parsed(Endpoint::kCompletions, R"({"prompt":"a","structured_outputs":{"choice":["x"]}})");
  EXPECT_EQ(r.format, Format::kChoice);
  r = Parsed(Endpoint::kCompletions, R"({"prompt":"a","structured_outputs":{"regex":"[0-9]"}})");
  EXPECT_EQ(r.format, Format::kRegex);
}

TEST(OpenAiProtocolTest, SeveralChoicesPerPrompt) {
  EXPECT_EQ(Parsed(Endpoint::kChat, R"({"messages":[{"role":"user","content":"x"}],"n":4})").n, 4);
  EXPECT_EQ(Parsed(Endpoint::kCompletions, R"({"prompt":["a","b"],"n":32,"best_of":32})").n, 32);
  EXPECT_EQ(Parsed(Endpoint::kCompletions, R"({"prompt":"a","n":2,"best_of":5})").best_of, 5);
  EXPECT_EQ(Parsed(Endpoint::kCompletions, R"({"prompt":"a","n":2})").best_of, 0);
  EXPECT_EQ(Parsed(Endpoint::kCompletions, R"({"prompt":"a"})").n, 1);
}

TEST(OpenAiProtocolTest, ToolChoiceAgainstTheTools) {
  using ToolChoice = CompletionRequest::ToolChoice;
  const std::string chat = R"({"messages":[{"role":"user","content":"x"}],)";
  const std::string tools = R"("tools":[{"type":"function","function":{"name":"f"}}])";
  EXPECT_EQ(Parsed(Endpoint::kChat, chat + R"("max_tokens":3})").tool_choice, ToolChoice::kNone);
  EXPECT_EQ(Parsed(Endpoint::kChat, chat + tools + "}").tool_choice, ToolChoice::kAuto);
  EXPECT_EQ(Parsed(Endpoint::kChat, chat + tools + R"(,"tool_choice":"none"})").tool_choice, ToolChoice::kNone);
  EXPECT_EQ(Parsed(Endpoint::kChat, chat + tools + R"(,"tool_choice":"required"})").tool_choice,
            ToolChoice::kRequired);
  CompletionRequest r = Parsed(Endpoint::kChat, chat + tools +
                               R"(,"tool_choice":{"type":"function","function":{"name":"f"}}})");
  EXPECT_EQ(r.tool_choice, ToolChoice::kNamed);
  EXPECT_EQ(r.tool_name, "f");
  struct Case {
    std::string body, message;
  } cases[] = {
      {chat + R"("tool_choice":"required"})", "needs 'tools'"},
      {chat + tools + R"(,"tool_choice":"sometimes"})", "not one of none, auto, required"},
      {chat + tools + R"(,"tool_choice":{"type":"function","function":{"name":"g"}}})", "not among 'tools'"},
      {chat + tools + R"(,"tool_choice":{"type":"function"}})", "must be none, auto, required"},
      {chat + R"("tools":[{"type":"function","function":{}}]})", "each of 'tools'"},
      {chat + tools + R"(,"tool_choice":"required","response_format":{"type":"json_object"}})",
       "takes no response_format"},
  };
  for (const Case& c : cases) {
    ApiError e = Refused(Endpoint::kChat, c.body);
    EXPECT_THAT(e.message, HasSubstr(c.message)) << c.body;
    EXPECT_THAT(e.param, AnyOf(Eq("tool_choice"), Eq("tools"))) << c.body;
  }
}

TEST(OpenAiProtocolTest, WritesChunksAndResponsesAsVllmDoes) {
  Json role = StreamChunk(Endpoint::kChat, "chatcmpl-1", 100, "m", 0, "", "", true);
  EXPECT_EQ(Dump(role),
            R"({"id":"chatcmpl-1","object":"chat.completion.chunk","created":100,"model":"m",)"
            R"("choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,)"
            R"("finish_reason":null}]})");
  Json last = StreamChunk(Endpoint::kChat, "chatcmpl-1", 100, "m", 0, "", "stop");
  EXPECT_EQ(last["choices"][0]["delta"], Json::object());
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  Json text = StreamChunk(Endpoint::kCompletions, "cmpl-1", 100, "m", 1, "hé", "");
  EXPECT_EQ(text["object"], "text_completion");
  EXPECT_EQ(text["choices"][0]["text"], "hé");
  EXPECT_EQ(text["choices"][0]["index"], 1);
  EXPECT_TRUE(text["choices"][0]["finish_reason"].is_null());

  Usage u{10, 4, 8};
  Json usage = UsageChunk(Endpoint::kChat, "c", 1, "m", u);
  EXPECT_EQ(usage["choices"], Json::array());
  EXPECT_EQ(Dump(usage["usage"]),
            R"({"prompt_tokens":10,"total_tokens":14,"completion_tokens":4,)"
            R"("prompt_tokens_details":{"cached_tokens":8}})");
  Json full = FullResponse(Endpoint::kChat, "c", 1, "m", {{"hello", "length"}}, u);
  EXPECT_EQ(full["object"], "chat.completion");
  EXPECT_EQ(full["choices"][0]["message"]["content"], "hello");
  EXPECT_EQ(full["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(full["choices"][0]["finish_reason"], "length");

  EXPECT_EQ(SseEvent(Json{{"a", 1}}), "data: {\"a\":1}\n\n");
  // Invalid UTF-8 never breaks the stream.
  EXPECT_EQ(Dump(Json("a\xff")), "\"a\xEF\xBF\xBD\"");
  ApiError e{404, "no such model", "invalid_request_error", "model", "model_not_found"};
  EXPECT_EQ(e.Body(), R"({"error":{"message":"no such model","type":"invalid_request_error",)"
                      R"("param":"model","code":"model_not_found"}})");
  EXPECT_EQ(ApiError{}.Body(), R"({"error":{"message":"","type":"invalid_request_error",)"
                               R"("param":null,"code":null}})");
  EXPECT_THAT(NewResponseId(Endpoint::kChat), ::testing::MatchesRegex("chatcmpl-[0-9a-f]{32}"));
  EXPECT_NE(NewResponseId(Endpoint::kCompletions), NewResponseId(Endpoint::kCompletions));
}

TEST(OpenAiProtocol, LogprobsAreParsedPerEndpoint) {
  CompletionRequest r;
  ASSERT_FALSE(ParseRequest(Endpoint::kChat,
                            R"({"messages":[{"role":"user","content":"x"}],"logprobs":true,
                                "top_logprobs":3})",
                            &r));
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 3);
  ASSERT_FALSE(ParseRequest(Endpoint::kCompletions, R"({"prompt":"a","logprobs":0})", &r));
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 0);
  ASSERT_FALSE(ParseRequest(Endpoint::kCompletions, R"({"prompt":"a","logprobs":null})", &r));
  EXPECT_FALSE(r.logprobs);
  EXPECT_FALSE(r.echo);
  // echo, and with it max_tokens 0 (the prompt alone).
  ASSERT_FALSE(ParseRequest(Endpoint::kCompletions,
                            R"({"prompt":"a","echo":true,"max_tokens":0,"logprobs":1})", &r));
  EXPECT_TRUE(r.echo);
  EXPECT_EQ(r.max_tokens, 0);
}

// As the OpenAI API shapes them: chat a list of {token, logprob, bytes,
// top_logprobs}; completions parallel lists with top dicts and character
// offsets (a byte that is no whole character counts one).
TEST(OpenAiProtocol, LogprobsJsonPerEndpoint) {
  const std::vector<TokenLogprobs> t = {{"a", -0.5f, {{"a", -0.5f}, {"x", -2.f}}},
                                        {"\xe2", -1.f, {}},
                                        {"\xc3\xa9", -0.25f, {}}};
  EXPECT_EQ(Dump(LogprobsJson(Endpoint::kChat, {t[0]}, 0, true)),
            R"({"content":[{"token":"a","logprob":-0.5,"bytes":[97],"top_logprobs":[)"
            R"({"token":"a","logprob":-0.5,"bytes":[97]},{"token":"x","logprob":-2.0,"bytes":[120]}]}],)"
            R"("refusal":null})");
  const Json c = LogprobsJson(Endpoint::kCompletions, t, 7, true);
  EXPECT_EQ(c["token_logprobs"], Json::parse("[-0.5,-1.0,-0.25]"));
  EXPECT_EQ(c["text_offset"], Json::parse("[7,8,9]"));
  EXPECT_EQ(c["top_logprobs"][0], Json::parse(R"({"a":-0.5,"x":-2.0})"));
  EXPECT_EQ(Dump(LogprobsJson(Endpoint::kChat, {t[1]}, 0, true)["content"][0]["bytes"]), "[226]");
  EXPECT_TRUE(LogprobsJson(Endpoint::kChat, {}, 0, false).is_null());
  // An echoed prompt's first token: its token and offset, null log-probabilities.
  const Json echoed = LogprobsJson(Endpoint::kCompletions, {{"ab", 0, {}, true}, t[0]}, 0, true);
  EXPECT_EQ(Dump(echoed), R"({"tokens":["ab","a"],"token_logprobs":[null,-0.5],)"
                          R"("top_logprobs":[null,{"a":-0.5,"x":-2.0}],"text_offset":[0,2]})");
  EXPECT_EQ(Utf8Chars("a\xc3\xa9\xe2z"), 4);
}

}  // namespace
}  // namespace kvcast::openai
