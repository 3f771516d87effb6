// kvcast: the command-line tool.
//
//   kvcast generate --model DIR --prompt TEXT [sampling flags]
//     Streams generated text to stdout; timings (prefill, decode tokens/s,
//     cached prompt tokens) go to stderr.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "engine/engine.h"
#include "kernels/backend.h"

ABSL_FLAG(std::string, model, "", "HF model directory (config.json, *.safetensors, tokenizer)");
ABSL_FLAG(std::string, prompt, "", "prompt text");
ABSL_FLAG(std::string, prompt_ids, "", "prompt as comma-separated token ids (instead of --prompt)");
ABSL_FLAG(int, max_tokens, 64, "tokens to generate at most");
ABSL_FLAG(double, temperature, 0.0, "0 = greedy");
ABSL_FLAG(int, top_k, 0, "0 = off");
ABSL_FLAG(double, top_p, 1.0, "nucleus sampling mass");
ABSL_FLAG(double, repetition_penalty, 1.0, "HF-style repetition penalty");
ABSL_FLAG(uint64_t, seed, 0, "sampling seed");
ABSL_FLAG(bool, ignore_eos, false, "keep generating past end-of-sequence");
ABSL_FLAG(int, kv_cache_mb, 256, "KV page pool size");
ABSL_FLAG(bool, ids, false, "print token ids instead of text");

namespace kvcast {
namespace {

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

absl::StatusOr<std::vector<int32_t>> PromptTokens(const Engine& engine) {
  std::vector<int32_t> ids;
  if (!absl::GetFlag(FLAGS_prompt_ids).empty()) {
    for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_prompt_ids), ',')) {
      int id;
      if (!absl::SimpleAtoi(part, &id)) {
        return absl::InvalidArgumentError(absl::StrCat("--prompt_ids: '", part, "' is not an integer"));
      }
      ids.push_back(id);
    }
    return ids;
  }
  if (engine.tokenizer() == nullptr) {
    return absl::FailedPreconditionError("the model directory has no tokenizer; use --prompt_ids");
  }
  return engine.tokenizer()->Encode(absl::GetFlag(FLAGS_prompt), /*add_bos=*/true);
}

absl::Status Generate() {
  if (absl::GetFlag(FLAGS_model).empty()) return absl::InvalidArgumentError("--model is required");
  EngineOptions options;
  options.kv_cache_bytes = int64_t(absl::GetFlag(FLAGS_kv_cache_mb)) << 20;
  auto t_load = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(auto engine, Engine::Create(absl::GetFlag(FLAGS_model), options, NewCpuBackend()));
  std::fprintf(stderr, "loaded %s (%s, %d layers) in %.2fs\n", absl::GetFlag(FLAGS_model).c_str(),
               engine->config().architecture.c_str(), engine->config().num_hidden_layers,
               Seconds(std::chrono::steady_clock::now() - t_load));
  ASSIGN_OR_RETURN(std::vector<int32_t> prompt, PromptTokens(*engine));
  GenerationParams params;
  params.max_tokens = absl::GetFlag(FLAGS_max_tokens);
  params.ignore_eos = absl::GetFlag(FLAGS_ignore_eos);
  params.sampling.temperature = float(absl::GetFlag(FLAGS_temperature));
  params.sampling.top_k = absl::GetFlag(FLAGS_top_k);
  params.sampling.top_p = float(absl::GetFlag(FLAGS_top_p));
  params.sampling.repetition_penalty = float(absl::GetFlag(FLAGS_repetition_penalty));
  params.sampling.seed = absl::GetFlag(FLAGS_seed);
  const int prompt_len = int(prompt.size());
  ASSIGN_OR_RETURN(uint64_t id, engine->Submit(std::move(prompt), params));

  std::unique_ptr<StreamingDecoder> text;
  if (engine->tokenizer() != nullptr && !absl::GetFlag(FLAGS_ids)) {
    text = std::make_unique<StreamingDecoder>(engine->tokenizer(), /*skip_special=*/true);
  }
  auto start = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point first_token;
  SequenceEvent last;
  int generated = 0;
  while (engine->HasWork()) {
    ASSIGN_OR_RETURN(std::vector<SequenceEvent> events, engine->Step());
    for (const SequenceEvent& ev : events) {
      if (ev.id != id) continue;
      last = ev;
      if (ev.token >= 0) {
        if (generated++ == 0) first_token = std::chrono::steady_clock::now();
        std::string piece = text ? text->Push(ev.token) : absl::StrCat(ev.token, " ");
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
      }
      if (ev.finish == FinishReason::kError) return absl::InternalError(ev.error);
    }
  }
  if (text) std::cout << text->Flush();
  std::cout << std::endl;
  auto end = std::chrono::steady_clock::now();
  double ttft = Seconds(first_token - start);
  double decode = Seconds(end - first_token);
  std::fprintf(stderr,
               "prompt %d tokens (%d cached), prefill %.1f ms (%.0f tok/s); "
               "generated %d tokens, decode %.1f tok/s; finish: %s\n",
               prompt_len, last.cached_tokens, ttft * 1e3,
               (prompt_len - last.cached_tokens) / ttft, generated,
               generated > 1 ? (generated - 1) / decode : 0.0, FinishReasonName(last.finish));
  return absl::OkStatus();
}

}  // namespace
}  // namespace kvcast

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "kvcast <command> [flags]\n\ncommands:\n  generate   generate text from a prompt with a local model");
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() != 2 || std::string(args[1]) != "generate") {
    std::fprintf(stderr, "usage: kvcast generate --model DIR --prompt TEXT [flags]\n"
                         "(kvcast --help lists every flag)\n");
    return 2;
  }
  absl::Status s = kvcast::Generate();
  if (!s.ok()) {
    std::fprintf(stderr, "kvcast: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
