// Per-token cost of constrained decoding's mask on a real vocabulary: walks a
// JSON document token by token (the model's own tokenization of it) under a
// grammar, timing Matcher::FillMask at every step, and prints the time per
// token (mean, median, max) and the grammar's compile time. The cold walks
// each compile the grammar afresh (a new schema's first request: its walk
// builds the states it visits); the warm ones share the last one's automaton,
// as the later requests of one schema do in the engine.
//   bazel run -c opt //engine/grammar:mask_bench -- --model M.gguf
//     [--schema '{...}' | --schema_file F] --document '{...}' [--repeats 5]
//     [--cold_walks N]  (N walks each on a freshly compiled grammar) [--times]
// Without --schema: response_format json_object.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "engine/grammar/json_schema.h"
#include "engine/grammar/matcher.h"
#include "engine/grammar/token_trie.h"
#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, model, "", "GGUF file or model directory (its tokenizer)");
ABSL_FLAG(std::string, schema, "", "JSON Schema text (empty: any JSON object)");
ABSL_FLAG(std::string, schema_file, "", "file holding the JSON Schema");
ABSL_FLAG(std::string, document, "", "a document the grammar accepts, walked token by token");
ABSL_FLAG(int, repeats, 5, "walks of the document (each from a fresh matcher)");
ABSL_FLAG(int, cold_walks, 1,
          "walks of the document each with a freshly compiled grammar and automaton (cold), before the warm ones");
ABSL_FLAG(bool, times, false, "also print every mask's time (us), cold then warm");

namespace {

using Clock = std::chrono::steady_clock;
double Us(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

int Run() {
  using namespace kvcast;
  auto tokenizer = LoadTokenizer(absl::GetFlag(FLAGS_model));
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "%s\n", std::string(tokenizer.status().message()).c_str());
    return 1;
  }
  std::string schema = absl::GetFlag(FLAGS_schema);
  if (!absl::GetFlag(FLAGS_schema_file).empty()) {
    std::ifstream in(absl::GetFlag(FLAGS_schema_file));
    std::stringstream ss;
    ss << in.rdbuf();
    schema = ss.str();
  }
  const auto t0 = Clock::now();
  const grammar::TokenTrie trie = grammar::TokenTrie::FromTokenizer(**tokenizer);
  const auto t1 = Clock::now();
  // Compiled afresh for every cold walk, as a new schema is.
  std::vector<double> compiles;
  auto compile = [&]() -> std::shared_ptr<const grammar::Grammar> {
    const auto a = Clock::now();
    absl::StatusOr<grammar::Grammar> g =
        schema.empty() ? grammar::JsonObjectGrammar()
                       : grammar::JsonSchemaGrammar(nlohmann::ordered_json::parse(schema));
    compiles.push_back(Us(Clock::now() - a));
    if (!g.ok()) {
      std::fprintf(stderr, "%s\n", std::string(g.status().message()).c_str());
      return nullptr;
    }
    return std::make_shared<const grammar::Grammar>(std::move(*g));
  };
  std::shared_ptr<const grammar::Grammar> shared = compile();
  if (shared == nullptr) return 1;
  auto ids = (*tokenizer)->Encode(absl::GetFlag(FLAGS_document), /*add_bos=*/false);
  if (!ids.ok()) return 1;
  std::vector<double> cold, warm;
  std::vector<uint32_t> mask(size_t(trie.vocab_size() + 31) / 32);
  long allowed = 0;
  const int cold_walks = std::max(1, absl::GetFlag(FLAGS_cold_walks));
  std::shared_ptr<grammar::Automaton> automaton;
  for (int r = 0; r < cold_walks + absl::GetFlag(FLAGS_repeats) - 1; ++r) {
    const bool is_cold = r < cold_walks;
    std::vector<double>& times = is_cold ? cold : warm;
    if (is_cold) automaton = std::make_shared<grammar::Automaton>(r == 0 ? shared : compile());
    grammar::Matcher m(automaton);
    for (int32_t id : *ids) {
      const auto a = Clock::now();
      m.FillMask(trie, absl::MakeSpan(mask));
      times.push_back(Us(Clock::now() - a));
      if (!((mask[size_t(id) >> 5] >> (id & 31)) & 1)) {
        std::fprintf(stderr, "the mask refuses token %d of the document\n", id);
        return 1;
      }
      for (uint32_t w : mask) allowed += __builtin_popcount(w);
      if (!m.Advance(*trie.bytes_of(id))) return 1;
    }
    if (!m.CanEnd()) {
      std::fprintf(stderr, "the document is incomplete under the grammar\n");
      return 1;
    }
  }
  auto report = [](const char* what, std::vector<double> times) {
    if (times.empty()) return;
    std::sort(times.begin(), times.end());
    double sum = 0;
    for (double t : times) sum += t;
    std::printf("  %s: mask per token mean %.1f us, median %.1f us, max %.1f us\n", what,
                sum / double(times.size()), times[times.size() / 2], times.back());
  };
  double compiled = 0;
  for (double c : compiles) compiled += c;
  std::printf("vocab %d tokens, trie %d nodes (built in %.1f ms); grammar %d rules, compiled in %.0f us\n",
              trie.vocab_size(), trie.num_nodes(), Us(t1 - t0) / 1000, shared->num_rules(),
              compiled / double(compiles.size()));
  std::printf("%zu tokens, %d cold and %d warm walks; %.0f tokens allowed per step on average; %d states\n",
              ids->size(), cold_walks, absl::GetFlag(FLAGS_repeats) - 1,
              double(allowed) / double(cold.size() + warm.size()), automaton->num_states());
  report("cold walks (a fresh grammar and automaton each)", cold);
  report("later walks (warm)", warm);
  if (absl::GetFlag(FLAGS_times)) {
    for (const auto& [what, times] : {std::pair{"cold", &cold}, std::pair{"warm", &warm}}) {
      std::printf("%s times:", what);
      for (double t : *times) std::printf(" %.2f", t);
      std::printf("\n");
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return Run();
}
