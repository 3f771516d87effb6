#include "engine/chat/jinja.h"

#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace kvcast {
namespace {

using json = nlohmann::ordered_json;

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string TemplatePath(const std::string& name) { return "tests/data/chat_templates/" + name + ".jinja"; }

// Renders `text` with `context`; "ERROR: <status>" on failure.
std::string R(const std::string& text, const json& context = json::object()) {
  auto t = JinjaTemplate::Parse(text);
  if (!t.ok()) return "PARSE ERROR: " + t.status().ToString();
  auto r = (*t)->Render(context);
  if (!r.ok()) return "ERROR: " + r.status().ToString();
  return *r;
}

TEST(JinjaTest, SmolLm2ChatMl) {
  std::string text = ReadFile(TemplatePath("SmolLM2-135M-Instruct"));
  ASSERT_FALSE(text.empty());
  json ctx = {{"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})}, {"add_generation_prompt", true}};
  EXPECT_EQ(R(text, ctx),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

}  // namespace
}  // namespace kvcast
