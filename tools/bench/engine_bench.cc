// engine_bench: CPU prefill and decode throughput of the transformer over
// the paged KV cache, with the share of time spent in GEMMs.
//
//   engine_bench --preset tiny|100m [--prompt_len 512] [--decode_steps 32]
//   engine_bench --model DIR
// Prints one markdown table row per measurement; --json FILE also writes
// them as a result file (tools/bench/result_file.h).
#include <chrono>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "engine/model/checkpoint.h"
#include "engine/transformer.h"
#include "kernels/profiling_backend.h"
#include "kernels/q4_matmul.h"
#include "kernels/q8_matmul.h"
#include "tools/bench/bench_models.h"
#include "tools/bench/result_file.h"

ABSL_FLAG(std::string, model, "", ".gguf file or HF model directory (overrides --preset)");
ABSL_FLAG(std::string, preset, "tiny", "tiny (the test model) or 100m (~125M-parameter Llama)");
ABSL_FLAG(int, prompt_len, 512, "prompt tokens per sequence");
ABSL_FLAG(int, chunk, 128, "prefill chunk size");
ABSL_FLAG(int, decode_steps, 32, "decode steps measured");
ABSL_FLAG(std::string, batches, "1,8", "decode batch sizes");
ABSL_FLAG(bool, ops, false, "print each op's share of the time after every row");
ABSL_FLAG(std::string, backend, "cpu", "cpu (Q8 weights), cpu-bf16, cpu-f32 (float32 weights) or cuda");
ABSL_FLAG(std::string, kv_cache_precision, "fp16",
          "fp16 (as the workers keep KV: fp16 pages where the backend has them) or fp32");
ABSL_FLAG(std::string, json, "", "also write the measurements here as a JSON result file");

namespace kvcast {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

absl::StatusOr<std::string> ModelDir() {
  if (!absl::GetFlag(FLAGS_model).empty()) return absl::GetFlag(FLAGS_model);
  return WriteBenchModel(absl::GetFlag(FLAGS_preset));
}

absl::Status Run(nlohmann::json header) {
  ASSIGN_OR_RETURN(std::string dir, ModelDir());
  ASSIGN_OR_RETURN(auto ckpt, Checkpoint::Open(dir));
  ASSIGN_OR_RETURN(auto backend, NewBackend(absl::GetFlag(FLAGS_backend)));
  ProfilingBackend prof(backend.get());
  ASSIGN_OR_RETURN(auto model, Transformer::Load(*ckpt, &prof));
  const ModelConfig& c = model->config();
  const int prompt_len = absl::GetFlag(FLAGS_prompt_len);
  const int steps = absl::GetFlag(FLAGS_decode_steps);
  std::vector<int> batches;
  for (auto s : absl::StrSplit(absl::GetFlag(FLAGS_batches), ',')) {
    int b;
    if (!absl::SimpleAtoi(s, &b) || b <= 0) return absl::InvalidArgumentError("--batches");
    batches.push_back(b);
  }
  const int max_batch = *std::max_element(batches.begin(), batches.end());
  const int page_tokens = 16;
  const int pages_per_seq = (prompt_len + steps + page_tokens) / page_tokens;
  KvLayout layout = model->kv_layout(page_tokens);
  const std::string precision = absl::GetFlag(FLAGS_kv_cache_precision);
  if (precision != "fp16" && precision != "fp32") {
    return absl::InvalidArgumentError("--kv_cache_precision: fp16 or fp32");
  }
  if (precision == "fp16") layout.storage = prof.Fp16KvStorage();
  ASSIGN_OR_RETURN(auto pool, KvPagePool::Create(&prof, layout, pages_per_seq * max_batch));
  std::vector<KvPages> held(max_batch);  // destroyed before `pool`
  std::vector<absl::Span<const int32_t>> tables(max_batch);
  for (int b = 0; b < max_batch; ++b) {
    ASSIGN_OR_RETURN(held[b], pool->Allocate(pages_per_seq));
    tables[b] = held[b].ids();
  }
  std::vector<int32_t> prompt(prompt_len);
  for (int i = 0; i < prompt_len; ++i) prompt[i] = (i * 7919 + 13) % c.vocab_size;
  std::vector<float> logits;
  std::printf("weights %.1f MiB on %s; CPU kernels: Q4 %s, Q8 %s (KVCAST_CPU_ISA caps them)\n\n",
              double(model->weight_bytes()) / (1 << 20), std::string(backend->name()).c_str(),
              std::string(Q4KernelName()).c_str(), std::string(Q8KernelName()).c_str());
  std::printf("| model | measurement | tokens/s | GEMM share |\n|---|---|---|---|\n");
  const std::string name = absl::StrCat(c.architecture, " h", c.hidden_size, " L",
                                        c.num_hidden_layers, " V", c.vocab_size, " on ",
                                        std::string(backend->name()));
  nlohmann::json rows = nlohmann::json::array();
  // kind: "prefill" or "decode"; batch: sequences per step.
  auto report = [&](const std::string& what, const char* kind, int batch, double tokens,
                    double secs) {
    double gemm = prof.seconds().count("Linear") ? prof.seconds().at("Linear") : 0;
    nlohmann::json ops = nlohmann::json::object();
    for (const auto& [op, op_secs] : prof.seconds()) ops[op] = op_secs;
    rows.push_back({{"measurement", kind}, {"batch", batch}, {"context", prompt_len},
                    {"tokens_per_s", tokens / secs}, {"seconds", secs}, {"op_seconds", ops}});
    std::printf("| %s | %s | %.1f | %.0f%% |\n", name.c_str(), what.c_str(), tokens / secs,
                100 * gemm / prof.total_seconds());
    if (absl::GetFlag(FLAGS_ops)) {
      for (const auto& [op, secs] : prof.seconds()) {
        std::printf("|  | %s | %.3f s | %.0f%% |\n", op.c_str(), secs,
                    100 * secs / prof.total_seconds());
      }
    }
    std::fflush(stdout);
    prof.Reset();
  };
  // Prefill every sequence's prompt (chunked); the first one is measured,
  // after an untimed prefill of the same prompt (a warm-up, as the peers'
  // benchmarks have: first touches of the weights and the workspace).
  RETURN_IF_ERROR(PrefillInChunks(*model, prompt, tables[0], absl::GetFlag(FLAGS_chunk),
                                  pool.get(), &logits));
  for (int b = 0; b < max_batch; ++b) {
    prof.Reset();
    auto t0 = Clock::now();
    RETURN_IF_ERROR(PrefillInChunks(*model, prompt, tables[b], absl::GetFlag(FLAGS_chunk),
                                    pool.get(), &logits));
    if (b == 0) report(absl::StrCat("prefill ", prompt_len, " tokens"), "prefill", 1, prompt_len, Since(t0));
  }
  for (int batch : batches) {
    std::vector<int32_t> next(batch, 1);
    {  // one untimed step at this batch size (a warm-up; its KV is rewritten below)
      std::vector<ForwardItem> items;
      for (int b = 0; b < batch; ++b) {
        items.push_back(ForwardItem{absl::MakeConstSpan(&next[b], 1), prompt_len, tables[b]});
      }
      RETURN_IF_ERROR(model->Forward(items, pool.get(), false, &logits));
    }
    prof.Reset();
    auto t0 = Clock::now();
    for (int s = 0; s < steps; ++s) {
      std::vector<ForwardItem> items;
      for (int b = 0; b < batch; ++b) {
        items.push_back(ForwardItem{absl::MakeConstSpan(&next[b], 1), prompt_len + s, tables[b]});
      }
      RETURN_IF_ERROR(model->Forward(items, pool.get(), false, &logits));
    }
    report(absl::StrCat("decode batch ", batch, " (context ", prompt_len, ")"), "decode", batch,
           double(batch) * steps, Since(t0));
  }
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    header.update({{"model", absl::GetFlag(FLAGS_model).empty() ? absl::GetFlag(FLAGS_preset)
                                                                 : absl::GetFlag(FLAGS_model)},
                   {"backend", std::string(backend->name())},
                   {"kernels", {{"q4", std::string(Q4KernelName())},
                                {"q8", std::string(Q8KernelName())}}},
                   {"kv_cache_precision", precision}, {"decode_steps", steps}});
    return bench::WriteResultFile(path, std::move(header), std::move(rows));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace kvcast

int main(int argc, char** argv) {
  nlohmann::json header = kvcast::bench::ResultHeader("engine_bench", argc, argv);
  absl::ParseCommandLine(argc, argv);
  absl::Status s = kvcast::Run(std::move(header));
  if (!s.ok()) {
    std::fprintf(stderr, "engine_bench: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
