// A request's output format (the OpenAI API's response_format) and the
// compiled grammars of the formats an engine serves.
#ifndef KVCAST_ENGINE_GRAMMAR_GRAMMAR_CACHE_H_
#define KVCAST_ENGINE_GRAMMAR_GRAMMAR_CACHE_H_

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/grammar/grammar.h"
#include "engine/grammar/matcher.h"

namespace kvcast {

struct ResponseFormat {
  // kRegex, kChoice and kGrammar are vLLM's structured_outputs regex,
  // choice and grammar.
  enum class Type { kText, kJsonObject, kJsonSchema, kRegex, kChoice, kGrammar };
  Type type = Type::kText;
  std::string json_schema;           // kJsonSchema: the schema's JSON text
  std::string json_prefix, json_suffix;  // kJsonSchema: literal text around the JSON
  // kJsonSchema: a special token the output starts with, before json_prefix
  // (Mistral's [TOOL_CALLS]): the engine emits it as the first token. With
  // a tokenizer that has no special token of this text, the text is the
  // start of json_prefix instead.
  std::string prefix_token;
  std::string regex;                 // kRegex: matched whole (regex.h)
  std::string grammar;               // kGrammar: GBNF / EBNF text (ebnf.h)
  std::vector<std::string> choices;  // kChoice: the output is one of them
  // The last `generated_tokens` prompt tokens were generated under this
  // format already (a request resumed on another worker): the engine replays
  // them through the grammar before it samples.
  int generated_tokens = 0;

  bool constrained() const { return type != Type::kText; }
};

// The grammar `format` asks for, compiled (json_schema.h); InvalidArgument
// naming what the compiler refuses. kText: null.
absl::StatusOr<std::shared_ptr<const grammar::Grammar>> CompileResponseFormat(
    const ResponseFormat& format);

// Compiled grammars by format (type and schema text), and one automaton per
// grammar shared by the sequences using it.
class GrammarCache {
 public:
  // Thread-safe. Compiles on a miss; keeps up to `kCapacity` grammars (then
  // starts over).
  absl::StatusOr<std::shared_ptr<const grammar::Grammar>> Get(const ResponseFormat& format);

  // The automaton of `grammar` (compute thread only: automata are not
  // thread-safe). A grammar's automaton is replaced by a fresh one once it
  // holds more than kAutomatonBytes; sequences on the old one keep it.
  std::shared_ptr<grammar::Automaton> AutomatonOf(
      const std::shared_ptr<const grammar::Grammar>& grammar);

  static constexpr size_t kCapacity = 64;
  static constexpr size_t kAutomatonBytes = size_t{64} << 20;

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<const grammar::Grammar>> grammars_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<const grammar::Grammar*, std::shared_ptr<grammar::Automaton>> automata_;
};

}  // namespace kvcast

#endif  // KVCAST_ENGINE_GRAMMAR_GRAMMAR_CACHE_H_
