// Renders golden cases for tools/golden/chat_template_golden.py --check:
// one JSON case per stdin line ({"template": stem, "context": {...},
// "bos_token": ..., "eos_token": ...} or {"template_text": text,
// "context": {...}}; a named template read from
// tests/data/chat_templates/<stem>.jinja under the working directory, or
// under argv[1] when given), one JSON result per stdout line:
// {"output": text} or {"error": message}. strftime_now is fixed at
// 2024-07-26 12:00:00.
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>

#include "engine/chat/jinja.h"
#include "engine/chat/testing/fixed_strftime.h"

int main(int argc, char** argv) {
  using json = nlohmann::ordered_json;
  std::string dir = argc > 1 ? argv[1] : "tests/data/chat_templates";
  std::map<std::string, std::unique_ptr<kvcast::JinjaTemplate>> cache;
  std::map<std::string, kvcast::JinjaFunction> functions = {{"strftime_now", kvcast::GoldenStrftimeNow()}};
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    json c = json::parse(line, nullptr, false);
    json result = json::object();
    if (!c.is_discarded() && c.contains("template_text") && c.contains("context")) {
      // An inline template (differential tests of single features).
      auto t = kvcast::JinjaTemplate::Parse(c["template_text"].get<std::string>());
      if (!t.ok()) {
        result["error"] = std::string(t.status().message());
      } else {
        auto r = (*t)->Render(c["context"], functions);
        if (r.ok()) {
          result["output"] = *r;
        } else {
          result["error"] = std::string(r.status().message());
        }
      }
      std::cout << result.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
      continue;
    }
    if (c.is_discarded() || !c.contains("template") || !c.contains("context")) {
      result["error"] = "bad case line";
      std::cout << result.dump() << "\n";
      continue;
    }
    std::string name = c["template"].get<std::string>();
    auto it = cache.find(name);
    if (it == cache.end()) {
      std::ifstream f(dir + "/" + name + ".jinja", std::ios::binary);
      std::stringstream ss;
      ss << f.rdbuf();
      auto t = kvcast::JinjaTemplate::Parse(ss.str());
      if (!t.ok()) {
        result["error"] = std::string(t.status().message());
        std::cout << result.dump() << "\n";
        continue;
      }
      it = cache.emplace(name, *std::move(t)).first;
    }
    json context = c["context"];
    for (const char* key : {"bos_token", "eos_token"}) {
      if (c.contains(key) && !context.contains(key)) context[key] = c[key];
    }
    auto r = it->second->Render(context, functions);
    if (r.ok()) {
      result["output"] = *r;
    } else {
      result["error"] = std::string(r.status().message());
    }
    std::cout << result.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
  }
  return 0;
}
