#include "tools/cli/local_generate.h"

#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/engine.h"
#include "kernels/backend.h"

namespace kvcast::cli {
namespace {

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

absl::Status LocalGenerate(const LocalEngineOptions& local, const GenerateOptions& options) {
  EngineOptions engine_options;
  engine_options.kv_cache_bytes = int64_t(local.kv_cache_mb) << 20;
  engine_options.kv_fp16_values = local.kv_fp16_values;
  auto t_load = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(auto backend, NewBackend(local.backend, local.device));
  ASSIGN_OR_RETURN(auto engine,
                   Engine::Create(local.model_dir, engine_options, std::move(backend)));
  std::fprintf(stderr, "loaded %s (%s, %d layers) on %s in %.2fs\n", local.model_dir.c_str(),
               engine->config().architecture.c_str(), engine->config().num_hidden_layers,
               local.backend.c_str(), Seconds(std::chrono::steady_clock::now() - t_load));
  std::vector<int32_t> prompt = options.prompt_ids;
  if (prompt.empty()) {
    if (engine->tokenizer() == nullptr) {
      return absl::FailedPreconditionError("the model has no tokenizer; use --prompt_ids");
    }
    ASSIGN_OR_RETURN(prompt, engine->tokenizer()->Encode(options.prompt, /*add_bos=*/true));
  }
  GenerationParams params;
  params.max_tokens = options.max_tokens;
  params.ignore_eos = options.ignore_eos;
  params.sampling.temperature = options.temperature;
  params.sampling.top_k = options.top_k;
  params.sampling.top_p = options.top_p;
  params.sampling.repetition_penalty = options.repetition_penalty;
  params.sampling.seed = options.seed;
  const int prompt_len = int(prompt.size());
  ASSIGN_OR_RETURN(uint64_t id, engine->Submit(std::move(prompt), params));

  std::unique_ptr<StreamingDecoder> text;
  if (engine->tokenizer() != nullptr && !options.print_ids) {
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
      if (ev.finish == FinishReason::kError) return ev.status;
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

}  // namespace kvcast::cli
