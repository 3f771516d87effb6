// Rendering a 10-message conversation (system + 9 alternating turns, one
// with tools where the template has them) with each real chat template.
//   bazel build -c opt //engine/chat:chat_template_benchmark && \
//       bazel-bin/engine/chat/chat_template_benchmark
#include <fstream>
#include <sstream>
#include <string>

#include "benchmark/benchmark.h"
#include "engine/chat/chat_template.h"
#include "engine/chat/testing/read_file.h"

namespace kvcast {
namespace {

using json = nlohmann::ordered_json;

json Conversation(bool system) {
  json m = json::array();
  if (system) m.push_back({{"role", "system"}, {"content", "You are a helpful assistant. Answer briefly."}});
  for (int i = 0; m.size() < 10; ++i) {
    m.push_back({{"role", i % 2 == 0 ? "user" : "assistant"},
                 {"content", "Message " + std::to_string(i) + ": what is the capital of France? 中文 😀 " +
                                 std::string(200, 'x')}});
  }
  if (m.back()["role"] == "assistant") m.erase(m.size() - 1);
  return m;
}

void BM_Render(benchmark::State& state, const char* name, bool system, bool tools) {
  auto t = ChatTemplate::FromText(ReadFile(std::string("tests/data/chat_templates/") + name + ".jinja"), "<s>", "</s>");
  if (!t.ok()) {
    state.SkipWithError(std::string(t.status().message()).c_str());
    return;
  }
  json messages = Conversation(system);
  json extra = json::object();
  if (tools) {
    extra["tools"] = json::parse(R"([{"type": "function", "function": {"name": "get_weather",
        "description": "Weather in a city", "parameters": {"type": "object",
        "properties": {"city": {"type": "string"}}}}}])");
  }
  size_t bytes = 0;
  for (auto _ : state) {
    auto r = (*t)->Render(messages, true, extra);
    if (!r.ok()) {
      state.SkipWithError(std::string(r.status().message()).c_str());
      return;
    }
    bytes += r->size();
    benchmark::DoNotOptimize(r);
  }
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
}

BENCHMARK_CAPTURE(BM_Render, SmolLM2, "SmolLM2-135M-Instruct", true, false);
BENCHMARK_CAPTURE(BM_Render, Qwen2, "Qwen2-7B-Instruct", true, false);
BENCHMARK_CAPTURE(BM_Render, Qwen2_5, "Qwen2.5-7B-Instruct", true, false);
BENCHMARK_CAPTURE(BM_Render, Qwen2_5_tools, "Qwen2.5-7B-Instruct", true, true);
BENCHMARK_CAPTURE(BM_Render, Llama3_1, "Llama-3.1-8B-Instruct", true, false);
BENCHMARK_CAPTURE(BM_Render, Llama3_1_tools, "Llama-3.1-8B-Instruct", true, true);
BENCHMARK_CAPTURE(BM_Render, Mistral_v0_1, "Mistral-7B-Instruct-v0.1", true, false);
BENCHMARK_CAPTURE(BM_Render, Mistral_v0_3, "Mistral-7B-Instruct-v0.3", true, false);
BENCHMARK_CAPTURE(BM_Render, Mistral_v0_3_tools, "Mistral-7B-Instruct-v0.3", true, true);

// Parsing, for comparison: done once per model load.
void BM_Parse(benchmark::State& state) {
  std::string text = ReadFile("tests/data/chat_templates/Llama-3.1-8B-Instruct.jinja");
  for (auto _ : state) benchmark::DoNotOptimize(JinjaTemplate::Parse(text));
}
BENCHMARK(BM_Parse);

}  // namespace
}  // namespace kvcast

BENCHMARK_MAIN();
