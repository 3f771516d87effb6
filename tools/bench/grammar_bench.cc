// What constrained decoding costs a decode step: batches of B sequences
// decoding under response_format (a JSON Schema, or any JSON object) and the
// same batches unconstrained, alternating, on one engine; prints the time per
// decode step of each, and the part of the constrained steps spent masking
// logits by the grammar (Engine::grammar_seconds: the trie walk or cached
// mask; on a backend that samples with masks, the mask's -inf is applied
// there, inside the step's sampling). Constrained sequences end when their document
// does, so later steps run fewer of them: compare the grammar's share, not
// the two step times. The first constrained round builds the grammar's
// automaton (cold); the later ones find its states (warm), as a schema's
// later requests do.
//   bazel run -c opt //tools/bench:grammar_bench -- --model M.gguf
//     [--batches 1,32] [--rounds 3] [--steps 48] [--schema_file F] [--json FILE]
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_split.h"
#include "engine/engine.h"
#include "kernels/backend.h"
#include "tools/bench/result_file.h"

ABSL_FLAG(std::string, model, "", ".gguf file or HF model directory (with a tokenizer)");
ABSL_FLAG(std::string, batches, "1,32", "decode batch sizes");
ABSL_FLAG(int, rounds, 3, "alternating rounds (constrained, then free) per batch size");
ABSL_FLAG(int, steps, 48, "decode steps per round (max_tokens)");
ABSL_FLAG(std::string, schema_file, "", "a JSON Schema (default: any JSON object)");
ABSL_FLAG(std::string, json, "", "also write every round here as a JSON result file");

namespace kvcast {
namespace {

using Clock = std::chrono::steady_clock;

struct Result {
  double step_s = 0;     // per decode step (prefill steps excluded)
  double grammar_s = 0;  // of it, masking by the grammar
  long tokens = 0;
};

Result Round(Engine& e, int batch, bool constrained, const std::string& schema, uint64_t seed) {
  const std::vector<int32_t> prompt = *e.tokenizer()->Encode(
      "<|im_start|>system\nAnswer in JSON.<|im_end|>\n<|im_start|>user\nDescribe a city "
      "with its name, country, population and three landmarks.<|im_end|>\n<|im_start|>assistant\n",
      false);
  for (int i = 0; i < batch; ++i) {
    GenerationParams p;
    p.max_tokens = absl::GetFlag(FLAGS_steps);
    p.ignore_eos = true;
    p.sampling.temperature = 0.8f;
    p.sampling.seed = seed + uint64_t(i);
    if (constrained) {
      p.response_format.type =
          schema.empty() ? ResponseFormat::Type::kJsonObject : ResponseFormat::Type::kJsonSchema;
      p.response_format.json_schema = schema;
    }
    if (!e.Submit(prompt, p).ok()) std::abort();
  }
  Result r;
  double grammar_s = 0;
  long steps = 0;
  while (e.HasWork()) {
    const bool prefill = e.num_waiting() > 0;
    const double g0 = e.grammar_seconds();
    const auto t = Clock::now();
    auto events = e.Step();
    const double s = std::chrono::duration<double>(Clock::now() - t).count();
    if (!events.ok()) std::abort();
    if (!prefill) {
      r.step_s += s;
      grammar_s += e.grammar_seconds() - g0;
      ++steps;
      for (const SequenceEvent& ev : *events) r.tokens += ev.token >= 0;
    }
  }
  if (steps > 0) {
    r.step_s /= double(steps);
    r.grammar_s = grammar_s / double(steps);
  }
  return r;
}

int Main(nlohmann::json header) {
  std::string schema;
  if (!absl::GetFlag(FLAGS_schema_file).empty()) {
    std::ifstream in(absl::GetFlag(FLAGS_schema_file));
    std::stringstream ss;
    ss << in.rdbuf();
    schema = ss.str();
  }
  EngineOptions o;
  o.kv_fp16_values = true;
  o.max_running = 64;
  auto engine = Engine::Create(absl::GetFlag(FLAGS_model), o, NewCpuBackend(CpuWeights::kQ8));
  if (!engine.ok()) {
    std::fprintf(stderr, "%s\n", std::string(engine.status().message()).c_str());
    return 1;
  }
  std::printf("%s, %s; decode steps of %d tokens at most, sampled (temperature 0.8)\n",
              absl::GetFlag(FLAGS_model).c_str(), schema.empty() ? "any JSON object" : "a JSON Schema",
              absl::GetFlag(FLAGS_steps));
  nlohmann::json rows = nlohmann::json::array();
  bool cold = true;  // the first constrained round builds the automaton
  for (const std::string& b : std::vector<std::string>(absl::StrSplit(absl::GetFlag(FLAGS_batches), ','))) {
    const int batch = std::stoi(b);
    for (int r = 0; r < absl::GetFlag(FLAGS_rounds); ++r) {
      const Result with = Round(**engine, batch, true, schema, 100 * uint64_t(r));
      const Result without = Round(**engine, batch, false, schema, 100 * uint64_t(r));
      std::printf("batch %2d round %d%s: constrained %.2f ms/step (%ld tokens), of it grammar "
                  "%.3f ms (%.1f%%); free %.2f ms/step (%ld tokens)\n",
                  batch, r + 1, cold ? " (cold)" : "", with.step_s * 1e3, with.tokens,
                  with.grammar_s * 1e3, 100 * with.grammar_s / with.step_s, without.step_s * 1e3,
                  without.tokens);
      rows.push_back({{"batch", batch}, {"round", r + 1}, {"cold", cold},
                      {"constrained_ms_per_step", with.step_s * 1e3},
                      {"constrained_tokens", with.tokens}, {"grammar_ms_per_step", with.grammar_s * 1e3},
                      {"free_ms_per_step", without.step_s * 1e3}, {"free_tokens", without.tokens}});
      cold = false;
    }
  }
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    header.update({{"model", absl::GetFlag(FLAGS_model)}, {"schema", schema.empty() ? "any JSON object"
                                                                                    : absl::GetFlag(FLAGS_schema_file)},
                   {"steps", absl::GetFlag(FLAGS_steps)}});
    if (absl::Status s = bench::WriteResultFile(path, std::move(header), std::move(rows)); !s.ok()) {
      std::fprintf(stderr, "grammar_bench: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace kvcast

int main(int argc, char** argv) {
  nlohmann::json header = kvcast::bench::ResultHeader("grammar_bench", argc, argv);
  absl::ParseCommandLine(argc, argv);
  return kvcast::Main(std::move(header));
}
