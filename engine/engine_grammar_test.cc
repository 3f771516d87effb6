// Constrained decoding in the engine (response_format): every output the
// engine completes is JSON of the schema's shape, however the model samples;
// a request resumed elsewhere continues the same output; bad formats are
// refused at Submit.
#include <map>
#include <algorithm>
#include <set>
#include <string>

#include "engine/engine.h"
#include "engine/testing/tiny_model_fixture.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace kvcast {
namespace {

constexpr char kSchema[] = R"({"type": "object", "properties": {
    "ok": {"type": "boolean"}, "n": {"type": "integer"},
    "color": {"enum": ["red", "green", "blue"]},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 3}, "maxItems": 2}},
    "required": ["ok", "n", "color", "tags"], "additionalProperties": false})";

std::unique_ptr<Engine> MakeEngine() {
  auto e = Engine::Create(TinyModelDir(), EngineOptions(), NewCpuBackend());
  EXPECT_TRUE(e.ok()) << e.status();
  return std::move(*e);
}

struct Output {
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::kNone;
  absl::Status status;
};

std::map<uint64_t, Output> RunAll(Engine* e) {
  std::map<uint64_t, Output> out;
  for (int guard = 0; e->HasWork() && guard < 5000; ++guard) {
    auto events = e->Step();
    EXPECT_TRUE(events.ok()) << events.status();
    if (!events.ok()) break;
    for (const SequenceEvent& ev : *events) {
      if (ev.token >= 0) out[ev.id].tokens.push_back(ev.token);
      if (ev.finish != FinishReason::kNone) {
        out[ev.id].finish = ev.finish;
        out[ev.id].status = ev.status;
      }
    }
  }
  return out;
}

GenerationParams Constrained(float temperature, uint64_t seed) {
  GenerationParams p;
  p.max_tokens = 400;
  p.sampling.temperature = temperature;
  p.sampling.seed = seed;
  p.response_format.type = ResponseFormat::Type::kJsonSchema;
  p.response_format.json_schema = kSchema;
  return p;
}

std::vector<int32_t> Prompt(Engine& e) { return *e.tokenizer()->Encode("Reply in JSON:", true); }

TEST(EngineGrammar, EverySampledOutputIsJsonOfTheSchemasShape) {
  auto e = MakeEngine();
  ASSERT_NE(e->tokenizer(), nullptr);
  std::vector<uint64_t> ids;
  for (uint64_t seed = 1; seed <= 8; ++seed) ids.push_back(*e->Submit(Prompt(*e), Constrained(1.f, seed)));
  auto out = RunAll(e.get());  // the eight decode together
  std::set<std::string> distinct;
  for (uint64_t id : ids) {
    ASSERT_EQ(out[id].finish, FinishReason::kStop) << out[id].status;
    std::string text = e->tokenizer()->Decode(out[id].tokens, /*skip_special=*/true);
    nlohmann::json doc = nlohmann::json::parse(text, nullptr, false);
    ASSERT_FALSE(doc.is_discarded()) << text;
    EXPECT_TRUE(doc["ok"].is_boolean()) << text;
    EXPECT_TRUE(doc["n"].is_number_integer()) << text;
    EXPECT_TRUE(doc["color"] == "red" || doc["color"] == "green" || doc["color"] == "blue") << text;
    ASSERT_TRUE(doc["tags"].is_array()) << text;
    EXPECT_LE(doc["tags"].size(), 2u) << text;
    EXPECT_EQ(doc.size(), 4u) << text;
    distinct.insert(text);
  }
  EXPECT_GE(distinct.size(), 4u);  // sampled, not one forced path
  // The unconstrained model says something else entirely.
  GenerationParams free = Constrained(1.f, 1);
  free.response_format = ResponseFormat();
  const uint64_t id = *e->Submit(Prompt(*e), free);
  auto plain = RunAll(e.get());
  const std::string text = e->tokenizer()->Decode(plain[id].tokens, true);
  EXPECT_TRUE(nlohmann::json::parse(text, nullptr, false).is_discarded()) << text;
}

// vLLM's guided_choice and guided_regex: sampled outputs are one of the
// choices / match the whole regex.
TEST(EngineGrammar, ChoicesAndRegexesHoldUnderSampling) {
  auto e = MakeEngine();
  const std::vector<std::string> choices = {"positive", "negative", "neutral and calm"};
  std::vector<uint64_t> choice_ids, regex_ids;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    GenerationParams p = Constrained(1.f, seed);
    p.response_format = ResponseFormat();
    p.response_format.type = ResponseFormat::Type::kChoice;
    p.response_format.choices = choices;
    choice_ids.push_back(*e->Submit(Prompt(*e), p));
    p.response_format.type = ResponseFormat::Type::kRegex;
    p.response_format.regex = "(19|20)[0-9]{2}-(0[1-9]|1[0-2])";
    regex_ids.push_back(*e->Submit(Prompt(*e), p));
  }
  auto out = RunAll(e.get());
  for (uint64_t id : choice_ids) {
    ASSERT_EQ(out[id].finish, FinishReason::kStop);
    const std::string text = e->tokenizer()->Decode(out[id].tokens, true);
    EXPECT_NE(std::find(choices.begin(), choices.end(), text), choices.end()) << text;
  }
  for (uint64_t id : regex_ids) {
    ASSERT_EQ(out[id].finish, FinishReason::kStop);
    const std::string text = e->tokenizer()->Decode(out[id].tokens, true);
    ASSERT_EQ(text.size(), 7u) << text;
    EXPECT_TRUE((text.substr(0, 2) == "19" || text.substr(0, 2) == "20") && text[4] == '-') << text;
  }
}

TEST(EngineGrammar, AResumedRequestContinuesTheSameOutput) {
  auto a = MakeEngine();
  const std::vector<int32_t> prompt = Prompt(*a);
  const uint64_t whole_id = *a->Submit(prompt, Constrained(0.f, 0));
  const std::vector<int32_t> whole = RunAll(a.get())[whole_id].tokens;
  ASSERT_GT(whole.size(), 6u);
  // Another engine gets the prompt and the first k tokens, as a decode
  // worker does after the first one died.
  for (int k : {1, 3, int(whole.size()) / 2}) {
    auto b = MakeEngine();
    std::vector<int32_t> resumed = prompt;
    resumed.insert(resumed.end(), whole.begin(), whole.begin() + k);
    GenerationParams p = Constrained(0.f, 0);
    p.response_format.generated_tokens = k;
    const uint64_t id = *b->Submit(resumed, p);
    std::vector<int32_t> rest = RunAll(b.get())[id].tokens;
    rest.insert(rest.begin(), whole.begin(), whole.begin() + k);
    EXPECT_EQ(rest, whole) << "resumed after " << k;
  }
}

// A format's prefix token (Mistral's [TOOL_CALLS] before a forced call)
// is the first token when the tokenizer has it as a special token (here the
// tiny model's BOS stands in for it), then the grammar; a resumed request
// with it among its generated tokens continues the same output.
TEST(EngineGrammar, APrefixTokenComesFirstThenTheGrammar) {
  auto e = MakeEngine();
  const std::string special = "<|begin_of_text|>";
  const int32_t special_id = *e->tokenizer()->TokenId(special);
  auto with_prefix = [&](uint64_t seed) {
    GenerationParams p = Constrained(seed == 0 ? 0.f : 1.f, seed);
    p.response_format.prefix_token = special;
    p.response_format.json_prefix = " [";
    p.response_format.json_suffix = "]";
    return p;
  };
  std::vector<uint64_t> ids;
  for (uint64_t seed = 1; seed <= 4; ++seed) ids.push_back(*e->Submit(Prompt(*e), with_prefix(seed)));
  auto out = RunAll(e.get());
  for (uint64_t id : ids) {
    ASSERT_EQ(out[id].finish, FinishReason::kStop) << out[id].status;
    ASSERT_GT(out[id].tokens.size(), 2u);
    EXPECT_EQ(out[id].tokens[0], special_id);
    const std::vector<int32_t> rest(out[id].tokens.begin() + 1, out[id].tokens.end());
    const std::string text = e->tokenizer()->Decode(rest, /*skip_special=*/true);
    ASSERT_EQ(text.substr(0, 2), " [") << text;
    nlohmann::json doc = nlohmann::json::parse(text, nullptr, false);
    ASSERT_TRUE(doc.is_array() && doc.size() == 1) << text;
    EXPECT_TRUE(doc[0]["ok"].is_boolean()) << text;
  }
  // Resumed after the prefix token alone, and after it and two more.
  const std::vector<int32_t> prompt = Prompt(*e);
  const uint64_t whole_id = *e->Submit(prompt, with_prefix(0));
  const std::vector<int32_t> whole = RunAll(e.get())[whole_id].tokens;
  ASSERT_GT(whole.size(), 4u);
  for (int k : {1, 3}) {
    auto b = MakeEngine();
    std::vector<int32_t> resumed = prompt;
    resumed.insert(resumed.end(), whole.begin(), whole.begin() + k);
    GenerationParams p = with_prefix(0);
    p.response_format.generated_tokens = k;
    const uint64_t id = *b->Submit(resumed, p);
    std::vector<int32_t> rest = RunAll(b.get())[id].tokens;
    rest.insert(rest.begin(), whole.begin(), whole.begin() + k);
    EXPECT_EQ(rest, whole) << "resumed after " << k;
  }
  // Generated output that does not start with the prefix token is refused.
  std::vector<int32_t> wrong = prompt;
  wrong.insert(wrong.end(), whole.begin() + 1, whole.begin() + 3);
  GenerationParams p = with_prefix(0);
  p.response_format.generated_tokens = 2;
  absl::StatusOr<uint64_t> r = e->Submit(wrong, p);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("prefix token"), std::string::npos) << r.status();
  // A tokenizer without such a special token writes its text instead.
  p = with_prefix(0);
  p.response_format.prefix_token = "[TOOL_CALLS]";
  const uint64_t text_id = *e->Submit(prompt, p);
  const std::string text = e->tokenizer()->Decode(RunAll(e.get())[text_id].tokens, true);
  EXPECT_EQ(text.rfind("[TOOL_CALLS] [{", 0), 0u) << text;
}

TEST(EngineGrammar, BadFormatsAreRefusedAtSubmit) {
  auto e = MakeEngine();
  const std::vector<int32_t> prompt = Prompt(*e);
  GenerationParams p = Constrained(0.f, 0);
  p.response_format.json_schema = R"({"type": "object", "properties": {"a": {"not": {}}}})";
  absl::StatusOr<uint64_t> r = e->Submit(prompt, p);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "response_format: unsupported JSON Schema keyword 'not' at #/properties/a");
  p.response_format.json_schema = "{not json";
  EXPECT_EQ(e->Submit(prompt, p).status().message(), "response_format: the JSON schema is not JSON");
  // Output said to be generated already must fit: the prompt's own text
  // does not start a JSON object.
  p = Constrained(0.f, 0);
  p.response_format.generated_tokens = 2;
  r = e->Submit(prompt, p);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("does not fit the format"), std::string::npos) << r.status();
  p.response_format.generated_tokens = int(prompt.size());
  EXPECT_EQ(e->Submit(prompt, p).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(e->HasWork());
}

}  // namespace
}  // namespace kvcast
