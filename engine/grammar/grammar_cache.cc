#include "engine/grammar/grammar_cache.h"

#include "absl/strings/str_cat.h"
#include "engine/grammar/ebnf.h"
#include "engine/grammar/json_schema.h"
#include "engine/grammar/regex.h"
#include "nlohmann/json.hpp"

namespace kvcast {

absl::StatusOr<std::shared_ptr<const grammar::Grammar>> CompileResponseFormat(
    const ResponseFormat& format) {
  absl::StatusOr<grammar::Grammar> g;
  switch (format.type) {
    case ResponseFormat::Type::kText:
      return std::shared_ptr<const grammar::Grammar>();
    case ResponseFormat::Type::kJsonObject:
      g = grammar::JsonObjectGrammar();
      break;
    case ResponseFormat::Type::kJsonSchema: {
      // Ordered: the properties keep the schema's order.
      nlohmann::ordered_json schema =
          nlohmann::ordered_json::parse(format.json_schema, nullptr, /*allow_exceptions=*/false);
      if (schema.is_discarded()) return absl::InvalidArgumentError("the JSON schema is not JSON");
      g = grammar::JsonSchemaGrammar(schema, format.json_prefix, format.json_suffix);
      break;
    }
    case ResponseFormat::Type::kRegex:
      g = grammar::RegexGrammar(format.regex);
      break;
    case ResponseFormat::Type::kGrammar:
      g = grammar::EbnfGrammar(format.grammar);
      break;
    case ResponseFormat::Type::kChoice: {
      if (format.choices.empty()) return absl::InvalidArgumentError("no choices to choose from");
      grammar::GrammarBuilder b;
      std::vector<grammar::GrammarBuilder::Seq> alternatives;
      for (const std::string& c : format.choices) {
        if (c.empty()) return absl::InvalidArgumentError("an empty choice");
        alternatives.push_back(b.Literal(c));
      }
      g = b.Build(b.Rule("choice", std::move(alternatives)));
      break;
    }
  }
  if (!g.ok()) return g.status();
  return std::make_shared<const grammar::Grammar>(std::move(*g));
}

absl::StatusOr<std::shared_ptr<const grammar::Grammar>> GrammarCache::Get(
    const ResponseFormat& format) {
  if (!format.constrained()) return std::shared_ptr<const grammar::Grammar>();
  // Each text length-prefixed: no two formats share a key.
  std::string key = absl::StrCat(int(format.type));
  for (const std::string* text : {&format.json_schema, &format.regex, &format.grammar,
                                  &format.json_prefix, &format.json_suffix}) {
    absl::StrAppend(&key, ":", text->size(), ":", *text);
  }
  for (const std::string& c : format.choices) absl::StrAppend(&key, "\n", c.size(), ":", c);
  {
    absl::MutexLock lock(&mu_);
    if (auto it = grammars_.find(key); it != grammars_.end()) return it->second;
  }
  absl::StatusOr<std::shared_ptr<const grammar::Grammar>> g = CompileResponseFormat(format);
  if (!g.ok()) return g.status();
  absl::MutexLock lock(&mu_);
  if (grammars_.size() >= kCapacity) grammars_.clear();
  return grammars_.try_emplace(key, *g).first->second;
}

std::shared_ptr<grammar::Automaton> GrammarCache::AutomatonOf(
    const std::shared_ptr<const grammar::Grammar>& grammar) {
  std::shared_ptr<grammar::Automaton>& a = automata_[grammar.get()];
  if (a == nullptr || a->memory_bytes() > kAutomatonBytes) {
    a = std::make_shared<grammar::Automaton>(grammar);
  }
  if (automata_.size() > 2 * kCapacity) {  // drop automata no sequence holds
    for (auto it = automata_.begin(); it != automata_.end();) {
      if (it->second.use_count() == 1 && it->second != a) {
        automata_.erase(it++);
      } else {
        ++it;
      }
    }
  }
  return a;
}

}  // namespace kvcast
