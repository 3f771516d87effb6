#include "engine/chat/chat_template.h"

#include <sys/stat.h>

#include <fstream>
#include <string>

#include "engine/chat/testing/read_file.h"
#include "engine/model/internal/gguf_writer.h"
#include "gtest/gtest.h"

namespace kvcast {
namespace {

using json = nlohmann::ordered_json;

std::string Dir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(tmp ? tmp : "/tmp") + "/" + name;
  mkdir(dir.c_str(), 0755);
  return dir;
}

void Write(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
}

const char kChatMl[] =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

const json kMessages = json::array({{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi 😀"}}});
const char kRendered[] = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi 😀<|im_end|>\n";

std::string WriteGguf(const std::string& name, bool with_template) {
  model_internal::GgufWriter w;
  w.AddString("general.architecture", "llama");
  if (with_template) w.AddString("tokenizer.chat_template", std::string(kChatMl) + "{{ bos_token }}|{{ eos_token }}");
  w.AddStringArray("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "a"});
  w.AddUint32("tokenizer.ggml.bos_token_id", 1);
  w.AddUint32("tokenizer.ggml.eos_token_id", 2);
  std::string path = Dir("gguf") + "/" + name + ".gguf";
  Write(path, w.Build());
  return path;
}

TEST(ChatTemplateTest, LoadsGgufTemplateAndSpecialTokens) {
  auto t = ChatTemplate::Load(WriteGguf("with", true));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->bos_token(), "<s>");
  EXPECT_EQ((*t)->eos_token(), "</s>");
  auto r = (*t)->Render(kMessages, true);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, std::string(kRendered) + "<|im_start|>assistant\n<s>|</s>");
}

TEST(ChatTemplateTest, GgufWithoutTemplateIsNotFound) {
  auto t = ChatTemplate::Load(WriteGguf("without", false));
  ASSERT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(t.status().message().find("no chat template"), absl::string_view::npos) << t.status();
  EXPECT_EQ(ChatTemplate::Load(Dir("gguf") + "/missing.gguf").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ChatTemplate::Load("/nonexistent/dir").status().code(), absl::StatusCode::kNotFound);
}

TEST(ChatTemplateTest, GarbageGgufIsInvalidArgument) {
  std::string path = Dir("gguf") + "/garbage.gguf";
  Write(path, "GGUF\x03garbage");
  EXPECT_EQ(ChatTemplate::Load(path).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ChatTemplateTest, HfDirectoryChatTemplateJinjaWins) {
  std::string dir = Dir("hf_jinja");
  Write(dir + "/chat_template.jinja", kChatMl);
  Write(dir + "/tokenizer_config.json",
        R"({"chat_template": "ignored", "bos_token": {"content": "<B>", "lstrip": false}, "eos_token": "<E>"})");
  auto t = ChatTemplate::Load(dir);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->bos_token(), "<B>");
  EXPECT_EQ((*t)->eos_token(), "<E>");
  EXPECT_EQ(*(*t)->Render(kMessages, false), kRendered);
}

TEST(ChatTemplateTest, HfTokenizerConfigStringAndNamedList) {
  std::string dir = Dir("hf_string");
  Write(dir + "/tokenizer_config.json", json({{"chat_template", kChatMl}, {"bos_token", nullptr}}).dump());
  auto t = ChatTemplate::Load(dir);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE((*t)->bos_token().has_value());
  EXPECT_EQ(*(*t)->Render(kMessages, false), kRendered);

  std::string list_dir = Dir("hf_list");
  Write(list_dir + "/tokenizer_config.json",
        json({{"chat_template", json::array({{{"name", "tool_use"}, {"template", "tools"}},
                                             {{"name", "default"}, {"template", kChatMl}}})}})
            .dump());
  auto l = ChatTemplate::Load(list_dir);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(*(*l)->Render(kMessages, false), kRendered);

  std::string no_default = Dir("hf_no_default");
  Write(no_default + "/tokenizer_config.json",
        json({{"chat_template", json::array({{{"name", "rag"}, {"template", "x"}}})}}).dump());
  EXPECT_EQ(ChatTemplate::Load(no_default).status().code(), absl::StatusCode::kNotFound);
}

TEST(ChatTemplateTest, HfDirectoryWithoutTemplateIsNotFound) {
  std::string dir = Dir("hf_none");
  Write(dir + "/tokenizer_config.json", R"({"bos_token": "<s>"})");
  auto t = ChatTemplate::Load(dir);
  ASSERT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(t.status().message().find("no chat template"), absl::string_view::npos) << t.status();
  EXPECT_EQ(ChatTemplate::Load(Dir("hf_empty")).status().code(), absl::StatusCode::kNotFound);
}

TEST(ChatTemplateTest, BadTemplateOrJsonIsInvalidArgument) {
  std::string dir = Dir("hf_bad");
  Write(dir + "/chat_template.jinja", "line one\n{% for m in messages %}unclosed");
  auto t = ChatTemplate::Load(dir);
  ASSERT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("line 2"), absl::string_view::npos) << t.status();
  std::string bad_json = Dir("hf_bad_json");
  Write(bad_json + "/tokenizer_config.json", "{not json");
  EXPECT_EQ(ChatTemplate::Load(bad_json).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ChatTemplateTest, RealTemplatesRenderToolsPartsAndErrors) {
  std::string dir = "tests/data/chat_templates/";
  auto llama = ChatTemplate::FromText(ReadFile(dir + "Llama-3.1-8B-Instruct.jinja"), "<|begin_of_text|>", "<|eot_id|>");
  ASSERT_TRUE(llama.ok()) << llama.status();
  // Content parts pass through as given; this template prints them.
  json parts = json::array({{{"role", "user"}, {"content", json::array({{{"type", "text"}, {"text", "Hi"}}})}}});
  auto r = (*llama)->Render(parts, true, json{{"date_string", "01 Jan 2025"}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NE(r->find("[{'type': 'text', 'text': 'Hi'}]<|eot_id|>"), std::string::npos) << *r;
  EXPECT_NE(r->find("Today Date: 01 Jan 2025"), std::string::npos);

  json tools = json::array({{{"type", "function"},
                             {"function", {{"name", "f"}, {"description", "d"}, {"parameters", json::object()}}}}});
  auto qwen = ChatTemplate::FromText(ReadFile(dir + "Qwen2.5-7B-Instruct.jinja"), std::nullopt, "<|im_end|>");
  ASSERT_TRUE(qwen.ok());
  auto q = (*qwen)->Render(kMessages, true, json{{"tools", tools}});
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_NE(q->find(R"({"type": "function", "function": {"name": "f", "description": "d", "parameters": {}}})"),
            std::string::npos)
      << *q;

  auto mistral = ChatTemplate::FromText(ReadFile(dir + "Mistral-7B-Instruct-v0.1.jinja"), "<s>", "</s>");
  ASSERT_TRUE(mistral.ok());
  json two_users = json::array({{{"role", "user"}, {"content", "a"}}, {{"role", "user"}, {"content", "b"}}});
  auto m = (*mistral)->Render(two_users, false);
  ASSERT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.status().message(),
            "After the optional system message, conversation roles must alternate user/assistant/user/assistant/...");
  // nlohmann::json works too (keys arrive sorted).
  auto plain = (*mistral)->Render(nlohmann::json::parse(R"([{"role": "user", "content": "x"}])"), false);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(*plain, "<s> [INST] x [/INST]");
}

}  // namespace
}  // namespace kvcast
