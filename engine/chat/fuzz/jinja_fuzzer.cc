// libFuzzer target for the chat-template renderer (engine/chat/jinja.h): any
// bytes as a template either fail to parse with a Status or render a fixed
// conversation (bounded in output, loops and depth) to a string or a Status.
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/chat/jinja.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kvcast::JinjaOptions options;
  options.max_output_bytes = 1 << 16;
  options.max_loop_iterations = 10000;
  options.max_call_depth = 20;
  auto t = kvcast::JinjaTemplate::Parse(
      absl::string_view(reinterpret_cast<const char*>(data), size), options);
  if (!t.ok()) return 0;
  static const nlohmann::ordered_json* context = new nlohmann::ordered_json{
      {"messages",
       {{{"role", "system"}, {"content", "Be brief."}},
        {{"role", "user"}, {"content", "Hi \xF0\x9F\x91\x8B"}},
        {{"role", "assistant"}, {"content", "Hello!"}, {"tool_calls", nlohmann::ordered_json::array()}},
        {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "parts"}}}}}}},
      {"add_generation_prompt", true},
      {"bos_token", "<s>"},
      {"eos_token", "</s>"},
      {"tools", nullptr}};
  (void)(*t)->Render(*context);
  return 0;
}
