// JinjaTemplate's contract: error codes and line numbers, limits, globals and
// registered functions, and robustness on truncated, garbage and mutated
// templates. Byte-for-byte behaviour against Python jinja2 is in
// jinja_golden_test.cc.
#include "engine/chat/jinja.h"

#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>
#include <atomic>
#include <map>
#include <thread>

#include "engine/chat/testing/read_file.h"
#include "gtest/gtest.h"

namespace kvcast {
namespace {

using json = nlohmann::ordered_json;

const char* const kTemplates[] = {"SmolLM2-135M-Instruct",    "Qwen2-7B-Instruct",
                                  "Qwen2.5-7B-Instruct",      "Llama-3.1-8B-Instruct",
                                  "Mistral-7B-Instruct-v0.1", "Mistral-7B-Instruct-v0.3"};

std::string TemplateText(const std::string& name) {
  return ReadFile("tests/data/chat_templates/" + name + ".jinja");
}

absl::StatusOr<std::string> Render(const std::string& text, const json& context = json::object(),
                                   const JinjaOptions& options = {}) {
  auto t = JinjaTemplate::Parse(text, options);
  if (!t.ok()) return t.status();
  return (*t)->Render(context);
}

TEST(JinjaTest, SmolLm2ChatMl) {
  json ctx = {{"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})}, {"add_generation_prompt", true}};
  EXPECT_EQ(*Render(TemplateText("SmolLM2-135M-Instruct"), ctx),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(JinjaTest, MalformedTemplatesNameTheLine) {
  struct Case {
    const char* text;
    int line;
  };
  const Case cases[] = {
      {"a\nb\n{% if x %}never closed", 3},  {"{{ x", 1},          {"\n\n{# open comment", 3},
      {"{% raw %}no end", 1},               {"\n{{ x | nosuch }}", 2}, {"{{ x is nosuch }}", 1},
      {"{% endfor %}", 1},                  {"\n{% break %}", 2},  {"{% for x in %}{% endfor %}", 1},
      {"{{ (1 }}", 1},                      {"{{ 1 ] }}", 1},      {"{{ 'open }}", 1},
      {"{% extends 'base' %}", 1},          {"{% frobnicate %}", 1}, {"{{ }}", 1},
      {"{% macro m(a=1, b) %}{% endmacro %}", 1}, {"{{ a if }}", 1}, {"{% set 1 = 2 %}", 1},
      {"x\n{% if a %}\n{% else %}\n{% elif b %}{% endif %}", 4},
  };
  for (const Case& c : cases) {
    auto t = JinjaTemplate::Parse(c.text);
    ASSERT_FALSE(t.ok()) << c.text;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_EQ(t.status().message().rfind("line " + std::to_string(c.line) + ":", 0), 0u)
        << c.text << " -> " << t.status();
  }
}

TEST(JinjaTest, RenderErrorsAreStatuses) {
  const char* const cases[] = {
      "{{ missing.attr }}", "{{ 1 + 'a' }}", "{{ 1 // 0 }}", "{{ none() }}", "{{ missing() }}",
      "{% for i in 3 %}{% endfor %}", "{{ [1] < 'a' }}", "{{ 'x' * 'y' }}", "{{ 2 ** 100 }}",
      "{% set a, b = [1, 2, 3] %}", "{{ {}|items + 1 }}", "{{ 'abc'[::0] }}", "{{ missing + 1 }}",
      "{{ x|tojson }}{{ missing|tojson }}", "{% set x.y = 1 %}",
  };
  for (const char* text : cases) {
    auto r = Render(text, json{{"x", 1}});
    ASSERT_FALSE(r.ok()) << text << " rendered " << *r;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_EQ(r.status().message().rfind("line 1:", 0), 0u) << text << " -> " << r.status();
  }
}

TEST(JinjaTest, RaiseExceptionKeepsTheMessage) {
  auto r = Render("a{{ raise_exception('Roles must alternate: ' ~ n) }}b", json{{"n", 3}});
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "Roles must alternate: 3");
}

TEST(JinjaTest, LimitsEndRunawayRenders) {
  JinjaOptions small;
  small.max_output_bytes = 1000;
  small.max_loop_iterations = 500;
  small.max_call_depth = 20;
  small.max_list_items = 1000;
  const char* const cases[] = {
      "{% for i in range(100) %}{% for j in range(100) %}x{% endfor %}{% endfor %}",
      "{% for i in range(400) %}{{ 'abc' }}{% endfor %}",
      "{{ 'x' * 5000 }}",
      "{{ [1, 2] * 100000 }}",
      "{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}",
      "{% set ns = namespace(s='ab') %}{% for i in range(20) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
  };
  for (const char* text : cases) {
    auto r = Render(text, json::object(), small);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << text << " -> " << r.status();
  }
  // The default limits still stop unbounded recursion and loops.
  auto r = Render("{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  r = Render("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_FALSE(Render("{{ range(100001)|length }}").ok());
}

TEST(JinjaTest, DeepNestingFailsToParse) {
  std::string deep(5000, '(');
  EXPECT_EQ(JinjaTemplate::Parse("{{ " + deep + "1 }}").status().code(), absl::StatusCode::kInvalidArgument);
  std::string ifs;
  for (int i = 0; i < 1000; ++i) ifs += "{% if true %}";
  EXPECT_EQ(JinjaTemplate::Parse(ifs).status().code(), absl::StatusCode::kInvalidArgument);
  std::string nots;
  for (int i = 0; i < 5000; ++i) nots += "not ";
  EXPECT_EQ(JinjaTemplate::Parse("{{ " + nots + "x }}").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(JinjaTest, GlobalsAndRegisteredFunctions) {
  auto t = JinjaTemplate::Parse("{{ strftime_now('%Y') | length }}|{{ add(2, b=3) }}|{{ range(3) | list }}");
  ASSERT_TRUE(t.ok());
  std::map<std::string, JinjaFunction> fns = {
      {"add", [](const json& args, const json& kwargs) -> absl::StatusOr<json> {
         return args[0].get<int>() + kwargs["b"].get<int>();
       }}};
  EXPECT_EQ(*(*t)->Render(json::object(), fns), "4|5|[0, 1, 2]");
  std::map<std::string, JinjaFunction> failing = {
      {"add", [](const json&, const json&) -> absl::StatusOr<json> { return absl::UnavailableError("down"); }}};
  EXPECT_EQ((*t)->Render(json::object(), failing).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ((*t)->Render(json::array()).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(JinjaTest, DictsKeepInsertionOrder) {
  json ctx = json::parse(R"({"m": {"role": "user", "content": "x", "a": 1}})", nullptr, false);
  auto t = JinjaTemplate::Parse("{{ m|tojson }}|{{ m }}|{% for k in m %}{{ k }}{% endfor %}");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*(*t)->Render(ctx),
            R"({"role": "user", "content": "x", "a": 1}|{'role': 'user', 'content': 'x', 'a': 1}|rolecontenta)");
}

TEST(JinjaTest, ConcurrentRendersShareOneTemplate) {
  auto t = JinjaTemplate::Parse(TemplateText("Qwen2.5-7B-Instruct"));
  ASSERT_TRUE(t.ok());
  json ctx = {{"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})}, {"add_generation_prompt", true}};
  std::string expected = *(*t)->Render(ctx);
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      for (int k = 0; k < 200; ++k) {
        if (*(*t)->Render(ctx) != expected) ++mismatches;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

// Truncations, garbage and random mutations of the real templates parse or
// fail cleanly, and what parses renders or fails cleanly: no crash, no hang.
TEST(JinjaTest, MutatedTemplatesNeverCrash) {
  std::mt19937 rng(20240726);
  json ctx = json::parse(R"({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u 😀"},
      {"role": "assistant", "content": "a", "tool_calls": [{"id": "abcdefghi", "function": {"name": "f",
      "arguments": {"x": 1}}}]}, {"role": "tool", "content": "r", "tool_call_id": "abcdefghi"},
      {"role": "user", "content": [{"type": "text", "text": "p"}]}], "tools": [{"type": "function",
      "function": {"name": "f", "description": "d", "parameters": {"type": "object", "properties": {}}}}],
      "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"})");
  const std::string alphabet = "{}%#-+()[]|.,:'\"~=<>!*/ \n\tabcdefghijklmnopqrstuvwxyz0123456789_\\";
  JinjaOptions options;
  options.max_output_bytes = 1 << 16;
  options.max_loop_iterations = 10000;
  options.max_call_depth = 30;
  int parsed = 0, rendered = 0, total = 0;
  for (const char* name : kTemplates) {
    const std::string base = TemplateText(name);
    ASSERT_FALSE(base.empty()) << name;
    for (size_t cut = 0; cut < base.size(); cut += 7) {  // Every truncation point, roughly.
      auto t = JinjaTemplate::Parse(base.substr(0, cut), options);
      ++total;
      if (t.ok()) {
        ++parsed;
        rendered += (*t)->Render(ctx).ok();
      }
    }
    for (int trial = 0; trial < 400; ++trial) {
      std::string text = base;
      int edits = 1 + static_cast<int>(rng() % 4);
      for (int e = 0; e < edits && !text.empty(); ++e) {
        size_t pos = rng() % text.size();
        switch (rng() % 4) {
          case 0: text.erase(pos, 1 + rng() % 8); break;
          case 1: text.insert(pos, 1, alphabet[rng() % alphabet.size()]); break;
          case 2: text[pos] = alphabet[rng() % alphabet.size()]; break;
          default: {  // Duplicate a slice elsewhere.
            size_t len = 1 + rng() % 40;
            text.insert(rng() % text.size(), text.substr(pos, len));
          }
        }
      }
      auto t = JinjaTemplate::Parse(text, options);
      ++total;
      if (!t.ok()) {
        EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
        continue;
      }
      ++parsed;
      auto r = (*t)->Render(ctx);
      if (r.ok()) {
        ++rendered;
      } else {
        EXPECT_TRUE(r.status().code() == absl::StatusCode::kInvalidArgument ||
                    r.status().code() == absl::StatusCode::kResourceExhausted)
            << r.status();
      }
    }
  }
  std::string garbage;
  for (int trial = 0; trial < 300; ++trial) {
    garbage.clear();
    for (int i = 0; i < 200; ++i) garbage.push_back(static_cast<char>(rng() % 256));
    auto t = JinjaTemplate::Parse(garbage, options);
    if (t.ok()) (*t)->Render(ctx).IgnoreError();
  }
  // The mutations reach the interpreter, not only the parser.
  EXPECT_GT(parsed, total / 10) << parsed << " of " << total;
  EXPECT_GT(rendered, 0);
}

// As Jinja2 3.1 renders them (checked with its own renderer): select,
// reject, selectattr, rejectattr and map over a falsy value give an empty
// sequence; str.rsplit takes maxsplit, whitespace or a separator.
TEST(JinjaTest, FalsyFilterInputsAndRsplitAsJinja2) {
  const json ctx = {{"none", nullptr}};
  EXPECT_EQ(*Render("{{ none|select|list }}|{{ 0|reject|list }}|{{ false|map('upper')|list }}|"
                    "{{ none|selectattr('a')|list }}|{{ none|rejectattr('a')|list }}",
                    ctx),
            "[]|[]|[]|[]|[]");
  EXPECT_EQ(*Render("{{ 'a,b,c'.rsplit(',', 1) }}|{{ '  a  b  '.rsplit(None, 1) }}|"
                    "{{ ' a b '.rsplit(maxsplit=1) }}|{{ 'abc'.rsplit('b', 0) }}|"
                    "{{ ',a,'.rsplit(',', 1) }}|{{ 'aaa'.rsplit('aa', 1) }}|{{ '   '.rsplit(None, 1) }}|"
                    "{{ 'a,b,c'.rsplit(',') }}"),
            "['a,b', 'c']|['  a', 'b']|[' a', 'b']|['abc']|[',a', '']|['a', '']|[]|"
            "['a', 'b', 'c']");
}

// Integer literals in base 16, 8 and 2 (either case, '_' between digits),
// as Jinja2 3.1.6 renders them; a prefix without digits is not a number.
TEST(JinjaTest, PrefixedIntegerLiteralsAsJinja2) {
  EXPECT_EQ(*Render("{{ 0x1F }}|{{ 0o17 }}|{{ 0b101 }}|{{ 0X_ff }}|{{ 0xff + 1 }}|{{ 1_000 }}|"
                    "{{ 0B1_0 }}|{{ 0 }}"),
            "31|15|5|255|256|1000|2|0");
  EXPECT_FALSE(Render("{{ 0x }}").ok());
  EXPECT_FALSE(Render("{{ 0b102 }}").ok());
}

// loop.changed(*values) keeps its last arguments per loop: true on the
// first call and whenever they differ (Jinja2 3.1.6's output).
TEST(JinjaTest, LoopChangedAsJinja2) {
  const json ctx = {{"ms", json::array({{{"r", "a"}, {"c", 1}}, {{"r", "a"}, {"c", 2}},
                                        {{"r", "b"}, {"c", 3}}, {{"r", "a"}, {"c", 4}}})}};
  EXPECT_EQ(*Render("{% for m in ms %}{% if loop.changed(m.r) %}[{{ m.r }}]{% endif %}{{ m.c }}"
                    "{% endfor %}|{% for x in [1,1,2] %}{{ loop.changed(x, 1) }}{% endfor %}|"
                    "{% for x in [1,2] %}{{ loop.changed() }}{% endfor %}",
                    ctx),
            "[a]12[b]3[a]4|TrueFalseTrue|TrueFalse");
}

// cycler() and joiner() as Jinja2 3.1.6 renders them (its output below).
TEST(JinjaTest, CyclerAndJoinerAsJinja2) {
  EXPECT_EQ(*Render("{% set row = cycler(\"odd\", \"even\") %}{% for i in range(5) %}{{ row.next() }}:"
                    "{{ row.current }} {% endfor %}|{{ row.current }}{% set _ = row.reset() %}|"
                    "{{ row.current }}|{% set j = joiner(\" | \") %}{% for x in [1,2,3] %}{{ j() }}{{ x }}"
                    "{% endfor %}|{% set k = joiner() %}{{ k() }}{{ k() }}{{ k() }}"),
            "odd:even even:odd odd:even even:odd odd:even |even|odd|1 | 2 | 3|, , ");
  auto empty = Render("{% set c = cycler() %}{{ c.next() }}");
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("at least one item has to be provided"), std::string::npos);
}

// str.rfind / index / rindex (code-point offsets) and removeprefix /
// removesuffix, as Jinja2 3.1.6 renders them; index of a missing substring
// is an error, as Python's ValueError.
TEST(JinjaTest, MoreStrMethodsAsJinja2) {
  EXPECT_EQ(*Render("{{ 'a-b-c'.rfind('-') }}|{{ 'a-b-c'.index('-') }}|{{ 'a-b-c'.rindex('-') }}|"
                    "{{ '\xc3\xa9-x'.index('x') }}|{{ 'abc'.rfind('z') }}|"
                    "{{ '<|im_start|>user'.removeprefix('<|im_start|>') }}|"
                    "{{ 'a.json'.removesuffix('.json') }}|{{ 'ab'.removeprefix('abc') }}|"
                    "{{ 'ab'.removesuffix('') }}"),
            "3|1|3|2|-1|user|a|ab|ab");
  auto r = Render("{{ 'abc'.index('z') }}");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("substring not found"), std::string::npos);
}

// The format filter as jinja2 renders it (expected strings: Jinja2 3.1.6's
// output), errors where Python raises.
TEST(JinjaTest, FormatFilterAsJinja2) {
  EXPECT_EQ(*Render(R"({{ "%s-%d-%.2f-%5s|%-4s|%r|%x|%%" | format("a", 3, 2.5, "b", "c", "q", 255) }})"),
            "a-3-2.50-    b|c   |'q'|ff|%");
  EXPECT_EQ(*Render(R"({{ "%d|%i|%05.1f|%+d|%X|%o|%e" | format(3.9, true, 2.25, 4, 255, 8, 1234.5) }})"),
            "3|1|002.2|+4|FF|10|1.234500e+03");
  EXPECT_EQ(*Render(R"({{ "%s" | format([1, "a"]) }}|{{ "%s" | format(none) }})",
                    json{{"none", nullptr}}),
            "[1, 'a']|None");
  EXPECT_FALSE(Render(R"({{ "%s %s" | format("x") }})").ok());
  EXPECT_FALSE(Render(R"({{ "%s" | format("x", "y") }})").ok());
  EXPECT_FALSE(Render(R"({{ "%d" | format("x") }})").ok());
}

}  // namespace
}  // namespace kvcast
