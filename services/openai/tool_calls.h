// Tool calls in a model's output, as the chat templates we ship have the
// model write them, turned into the OpenAI API's `tool_calls`:
//   kHermes     (Qwen2.5, Hermes): <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>, repeated
//   kLlama3Json (Llama 3.1/3.2):   {"name": N, "parameters": {...}} as the whole answer
//                                  (after an optional <|python_tag|>; several joined by ';')
//   kMistral    (Mistral v0.3):    [TOOL_CALLS] [{"name": N, "arguments": {...}}, ...]
// The format is read off the chat template; a template that writes none
// gets kHermes (what a forced tool call is generated as).
//
// Thread safety: pure functions.
#ifndef KVCAST_SERVICES_OPENAI_TOOL_CALLS_H_
#define KVCAST_SERVICES_OPENAI_TOOL_CALLS_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "nlohmann/json.hpp"

namespace kvcast::openai {

enum class ToolCallFormat { kHermes, kLlama3Json, kMistral };

ToolCallFormat ToolCallFormatOf(std::string_view chat_template);
const char* ToolCallFormatName(ToolCallFormat format);

struct ToolCall {
  std::string id;         // chatcmpl-tool-<32 hex>; Mistral: 9 letters and digits, as its template demands
  std::string name;
  std::string arguments;  // a JSON object, as text
};

struct ParsedToolCalls {
  std::optional<std::string> content;  // the text outside the calls (trimmed); none if empty
  std::vector<ToolCall> calls;
};

// The calls in `text` (a whole answer); text that is not a well-formed call
// (bad JSON, no name, arguments not an object) stays content.
ParsedToolCalls ParseToolCalls(ToolCallFormat format, std::string_view text);

// A forced call (tool_choice required, or naming `name`): the JSON Schema of
// the call's JSON in `format` (its "name" one of the tools', its arguments
// valid under that tool's parameters) and the text around it, for
// constrained decoding. `tools` as the request gives them (validated).
struct ForcedToolCall {
  std::string prefix, schema, suffix;  // schema: JSON text
  std::string prefix_token;            // a special token before `prefix` (Mistral's [TOOL_CALLS])
};
ForcedToolCall ForcedToolCallOf(ToolCallFormat format, const nlohmann::ordered_json& tools,
                                const std::string& name);

// While streaming `text` (the answer so far): where a tool call may have
// begun, so that text from there is held back until the answer ends;
// text.size() when none can have.
size_t ToolCallStart(ToolCallFormat format, std::string_view text);

}  // namespace kvcast::openai

#endif  // KVCAST_SERVICES_OPENAI_TOOL_CALLS_H_
