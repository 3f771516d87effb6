#include "services/openai/tool_calls.h"

#include <fstream>
#include <sstream>

#include "engine/chat/chat_template.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace kvcast::openai {
namespace {

using Json = nlohmann::ordered_json;

std::string Template(const std::string& name) {
  std::ifstream in("tests/data/chat_templates/" + name + ".jinja");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ToolCallsTest, FormatComesFromTheTemplate) {
  EXPECT_EQ(ToolCallFormatOf(Template("Qwen2.5-7B-Instruct")), ToolCallFormat::kHermes);
  EXPECT_EQ(ToolCallFormatOf(Template("Llama-3.1-8B-Instruct")), ToolCallFormat::kLlama3Json);
  EXPECT_EQ(ToolCallFormatOf(Template("Mistral-7B-Instruct-v0.3")), ToolCallFormat::kMistral);
  // SmolLM2's template writes no tools: forced calls are Hermes's.
  EXPECT_EQ(ToolCallFormatOf("{% for message in messages %}<|im_start|>{{ message['content'] }}{% endfor %}"),
            ToolCallFormat::kHermes);
}

// What each real template writes for an assistant's tool calls (rendered by
// engine/chat, checked against transformers elsewhere), fed back: the
// parser recovers the same calls.
TEST(ToolCallsTest, EachTemplatesRenderedCallsParseBack) {
  const Json calls = Json::parse(R"([
      {"id": "call00001", "type": "function",
       "function": {"name": "get_weather", "arguments": {"city": "Lisbon", "unit": "celsius"}}},
      {"id": "call00002", "type": "function",
       "function": {"name": "get_time", "arguments": {"zone": "Europe/Lisbon"}}}])");
  struct Case {
    std::string name, bos, eos, start, end;
    size_t calls;  // Llama 3.1's template takes one call a message
  } cases[] = {
      {"Qwen2.5-7B-Instruct", "", "<|im_end|>", "<|im_start|>assistant\n", "<|im_end|>", 2},
      {"Llama-3.1-8B-Instruct", "<|begin_of_text|>", "<|eot_id|>",
       "<|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>", 1},
      {"Mistral-7B-Instruct-v0.3", "<s>", "</s>", "[/INST]", "</s>", 2},
  };
  for (const Case& c : cases) {
    const std::string text = Template(c.name);
    auto tmpl = ChatTemplate::FromText(text, c.bos.empty() ? std::nullopt : std::optional<std::string>(c.bos), c.eos);
    ASSERT_TRUE(tmpl.ok()) << c.name << ": " << tmpl.status();
    Json assistant_calls = Json::array();
    for (size_t i = 0; i < c.calls; ++i) assistant_calls.push_back(calls[i]);
    const Json messages = Json::array({
        {{"role", "user"}, {"content", "Weather and time in Lisbon?"}},
        {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", assistant_calls}}});
    const Json tools = Json::array({
        {{"type", "function"}, {"function", {{"name", "get_weather"}, {"parameters", Json::object()}}}},
        {{"type", "function"}, {"function", {{"name", "get_time"}, {"parameters", Json::object()}}}}});
    auto rendered = (*tmpl)->Render(messages, false, Json{{"tools", tools}, {"date_string", "28 Nov 2026"}});
    ASSERT_TRUE(rendered.ok()) << c.name << ": " << rendered.status();
    // The assistant's turn: from its start to its end marker.
    size_t from = rendered->rfind(c.start);
    ASSERT_NE(from, std::string::npos) << c.name << ":\n" << *rendered;
    from += c.start.size();
    const size_t to = rendered->find(c.end, from);
    const std::string answer = rendered->substr(from, to == std::string::npos ? std::string::npos : to - from);
    const ToolCallFormat format = ToolCallFormatOf(text);
    ParsedToolCalls parsed = ParseToolCalls(format, answer);
    ASSERT_EQ(parsed.calls.size(), c.calls) << c.name << ": " << answer;
    EXPECT_FALSE(parsed.content.has_value()) << c.name << ": " << *parsed.content;
    for (size_t i = 0; i < c.calls; ++i) {
      EXPECT_EQ(parsed.calls[i].name, calls[i]["function"]["name"]) << c.name;
      EXPECT_EQ(Json::parse(parsed.calls[i].arguments), calls[i]["function"]["arguments"]) << c.name;
      if (format == ToolCallFormat::kMistral) {
        EXPECT_EQ(parsed.calls[i].id.size(), 9u);  // what the template demands back
      } else {
        EXPECT_EQ(parsed.calls[i].id.rfind("chatcmpl-tool-", 0), 0u);
      }
    }
    // The answer without its calls is only text.
    ParsedToolCalls plain = ParseToolCalls(format, "It is sunny in Lisbon.");
    EXPECT_TRUE(plain.calls.empty());
    EXPECT_EQ(plain.content, "It is sunny in Lisbon.");
  }
}

TEST(ToolCallsTest, TextAroundCallsAndMalformedCalls) {
  ParsedToolCalls p = ParseToolCalls(
      ToolCallFormat::kHermes,
      "Let me check.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>\n"
      "<tool_call>{\"name\": \"g\", \"arguments\": \"{\\\"y\\\": [2]}\"}</tool_call>");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.content, "Let me check.");
  EXPECT_EQ(p.calls[1].arguments, R"({"y":[2]})");  // arguments given as JSON text
  EXPECT_NE(p.calls[0].id, p.calls[1].id);
  // Unclosed at the end of the answer (EOS came first): still a call.
  p = ParseToolCalls(ToolCallFormat::kHermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}");
  ASSERT_EQ(p.calls.size(), 1u);
  // Not calls: bad JSON, no name, arguments not an object.
  for (const char* bad : {"<tool_call>{\"name\": \"f\", </tool_call>", "<tool_call>{\"arguments\": {}}</tool_call>",
                          "<tool_call>{\"name\": \"f\", \"arguments\": 3}</tool_call>"}) {
    p = ParseToolCalls(ToolCallFormat::kHermes, bad);
    EXPECT_TRUE(p.calls.empty()) << bad;
    EXPECT_EQ(p.content, bad);
  }
  p = ParseToolCalls(ToolCallFormat::kLlama3Json,
                     R"(<|python_tag|>{"name": "f", "parameters": {"a": 1}}; {"name": "g", "parameters": {}})");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[1].name, "g");
  p = ParseToolCalls(ToolCallFormat::kLlama3Json, R"({"answer": 42})");  // JSON, not a call
  EXPECT_TRUE(p.calls.empty());
  EXPECT_EQ(p.content, R"({"answer": 42})");
  p = ParseToolCalls(ToolCallFormat::kMistral, R"([{"name": "f", "arguments": {"q": "x"}}])");  // tag skipped as special
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments, R"({"q":"x"})");
}

// A forced call is written as the template writes one: Mistral's list
// after its [TOOL_CALLS] special token (which the engine emits as a token).
TEST(ToolCallsTest, ForcedCallsTakeTheFormatsTags) {
  const Json tools = Json::array(
      {{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", {{"type", "object"}}}}}}});
  ForcedToolCall hermes = ForcedToolCallOf(ToolCallFormat::kHermes, tools, "");
  EXPECT_EQ(hermes.prefix, "<tool_call>\n");
  EXPECT_EQ(hermes.suffix, "\n</tool_call>");
  EXPECT_EQ(hermes.prefix_token, "");
  ForcedToolCall mistral = ForcedToolCallOf(ToolCallFormat::kMistral, tools, "f");
  EXPECT_EQ(mistral.prefix_token, "[TOOL_CALLS]");
  EXPECT_EQ(mistral.prefix, " [");
  EXPECT_EQ(mistral.suffix, "]");
  EXPECT_EQ(Json::parse(mistral.schema)["properties"]["name"]["const"], "f");
  // What it generates parses back, with the tag's text or without (skipped
  // as a special token).
  const std::string call = R"({"name": "f", "arguments": {}})";
  for (const std::string& tag : {std::string("[TOOL_CALLS]"), std::string()}) {
    ParsedToolCalls p = ParseToolCalls(ToolCallFormat::kMistral, tag + mistral.prefix + call + mistral.suffix);
    ASSERT_EQ(p.calls.size(), 1u) << tag;
    EXPECT_EQ(p.calls[0].name, "f");
  }
}

TEST(ToolCallsTest, StreamingHoldsBackWhereACallMayBegin) {
  EXPECT_EQ(ToolCallStart(ToolCallFormat::kHermes, "Sure. <tool"), 6u);
  EXPECT_EQ(ToolCallStart(ToolCallFormat::kHermes, "Sure. <tool_call>{\"na"), 6u);
  EXPECT_EQ(ToolCallStart(ToolCallFormat::kHermes, "a < b"), 5u);
  EXPECT_EQ(ToolCallStart(ToolCallFormat::kHermes, "a <"), 2u);
  EXPECT_EQ(ToolCallStart(ToolCallFormat::kLlama3Json, "  {\"name\""), 0u);
  EXPECT_EQ(ToolCallStart(ToolCallFormat::kLlama3Json, "<|python"), 0u);
  EXPECT_EQ(ToolCallStart(ToolCallFormat::kLlama3Json, "The answer"), 10u);
  EXPECT_EQ(ToolCallStart(ToolCallFormat::kMistral, "[{"), 0u);
  EXPECT_EQ(ToolCallStart(ToolCallFormat::kMistral, "Hello"), 5u);
}

}  // namespace
}  // namespace kvcast::openai
