// gpu_bench: the CUDA backend against the GPU's own limits, in one run.
//
//   gpu_bench --model DIR [--batches 1,8,32,128] [--context 512] [--steps 32]
//             [--prefill 2048,8192] [--landing_tokens 1024] [--op_times]
//
// Prints markdown rows:
//  - decode tokens/s per batch size, as a fraction of the HBM roofline:
//    (bytes of weights read per step + bytes of KV read per step) / step
//    time, over the measured device-to-device copy bandwidth;
//  - prefill tokens/s per prompt length, as a fraction of the cuBLAS GEMM
//    peak for the same shapes: time of the model's GEMMs alone (Linear with
//    the same m, k, n) over the time of the whole prefill (best of 3; the
//    range printed), with the tiled attention kernel and with the per-row
//    one (KVCAST_CUDA_ATTENTION=warp), alternating;
//  - KV landing GB/s (DecodeKv from page-locked staging into pages) over the
//    measured pinned host-to-device copy bandwidth.
// Decode also prints the host time spent queuing a step's kernels: near the
// step time, the step is bound by launches, not by the GPU.
// --op_times adds the GPU time of each op (each GEMM by shape) by rows, on
// stderr at the end: rows 1 are decode at batch 1, rows T a T-token prompt.
// Every forward pass includes its host work, and each decode step its greedy
// pick on the GPU (SampleTokens: only the tokens come to the host), as the
// engine's steps pay them.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "engine/model/checkpoint.h"
#include "engine/transformer.h"
#include "kernels/backend.h"
#include "tools/bench/result_file.h"
#include "transport/kvcache/naming.h"
#include "engine/kv/token_codec.h"

ABSL_FLAG(std::string, model, "", ".gguf file or HF model directory (a ~1B Llama for the recorded numbers)");
ABSL_FLAG(std::string, batches, "1,8,32,128", "decode batch sizes");
ABSL_FLAG(int, context, 512, "tokens of KV per sequence before the timed decode steps");
ABSL_FLAG(int, steps, 32, "decode steps timed per batch size");
ABSL_FLAG(std::string, prefill, "2048,8192", "prompt lengths for the prefill measurement");
ABSL_FLAG(int, landing_tokens, 1024, "tokens per DecodeKv in the landing measurement");
ABSL_FLAG(std::string, json, "", "also write every row here as a JSON result file");
ABSL_FLAG(bool, op_times, false,
          "also print the GPU time of every op by rows (KVCAST_CUDA_OP_TIMES=1) when done; the "
          "tables' times then include the timing events");

namespace kvcast {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

absl::StatusOr<std::vector<int>> Ints(const std::string& flag, const std::string& text) {
  std::vector<int> v;
  for (absl::string_view s : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int x;
    if (!absl::SimpleAtoi(s, &x) || x <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, ": bad value '", std::string(s), "'"));
    }
    v.push_back(x);
  }
  return v;
}

absl::Status Cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

// Bytes per second of cudaMemcpy of `bytes` (device-to-device counts the
// read and the write).
absl::StatusOr<double> CopyBandwidth(cudaMemcpyKind kind, size_t bytes) {
  void *src = nullptr, *dst = nullptr;
  const bool h2d = kind == cudaMemcpyHostToDevice;
  RETURN_IF_ERROR(Cuda(h2d ? cudaHostAlloc(&src, bytes, 0) : cudaMalloc(&src, bytes), "alloc"));
  RETURN_IF_ERROR(Cuda(cudaMalloc(&dst, bytes), "alloc"));
  RETURN_IF_ERROR(Cuda(cudaMemcpy(dst, src, bytes, kind), "warm-up copy"));
  const int reps = 10;
  auto t0 = Clock::now();
  for (int i = 0; i < reps; ++i) RETURN_IF_ERROR(Cuda(cudaMemcpy(dst, src, bytes, kind), "copy"));
  RETURN_IF_ERROR(Cuda(cudaDeviceSynchronize(), "sync"));
  const double secs = Since(t0);
  h2d ? cudaFreeHost(src) : cudaFree(src);
  cudaFree(dst);
  return double(bytes) * reps * (h2d ? 1 : 2) / secs;
}

absl::Status Run(nlohmann::json header) {
  nlohmann::json rows = nlohmann::json::array();
  ASSIGN_OR_RETURN(auto batches, Ints("batches", absl::GetFlag(FLAGS_batches)));
  ASSIGN_OR_RETURN(auto prefills, Ints("prefill", absl::GetFlag(FLAGS_prefill)));
  const int context = absl::GetFlag(FLAGS_context), steps = absl::GetFlag(FLAGS_steps);
  if (absl::GetFlag(FLAGS_op_times)) setenv("KVCAST_CUDA_OP_TIMES", "1", 1);
  ASSIGN_OR_RETURN(auto backend, NewBackend("cuda"));
  ASSIGN_OR_RETURN(auto ckpt, Checkpoint::Open(absl::GetFlag(FLAGS_model)));
  ASSIGN_OR_RETURN(auto model, Transformer::Load(*ckpt, backend.get()));
  const ModelConfig& c = model->config();
  ASSIGN_OR_RETURN(double hbm, CopyBandwidth(cudaMemcpyDeviceToDevice, size_t(1) << 30));
  ASSIGN_OR_RETURN(double h2d, CopyBandwidth(cudaMemcpyHostToDevice, size_t(256) << 20));
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  std::printf("device: %s; measured HBM copy %.0f GB/s, pinned H2D %.1f GB/s\n\n", prop.name,
              hbm / 1e9, h2d / 1e9);

  // GEMM shapes of one layer (n, k) and the LM head; 16-bit weights.
  const int64_t H = c.hidden_size, I = c.intermediate_size, hd = c.head_dim;
  const int64_t nh = c.num_attention_heads, nkv = c.num_key_value_heads, V = c.vocab_size;
  const std::vector<std::pair<int64_t, int64_t>> layer_gemms = {
      {(nh + 2 * nkv) * hd, H}, {H, nh * hd}, {2 * I, H}, {H, I}};
  double weight_bytes = 2.0 * V * H;  // LM head (the tied embedding, when tied)
  for (auto [n, k] : layer_gemms) weight_bytes += 2.0 * n * k * c.num_hidden_layers;
  const double kv_token_bytes = 2.0 * c.num_hidden_layers * nkv * hd * sizeof(float);

  const int page_tokens = 16;
  const std::string name = absl::StrCat(c.architecture, " h", H, " L", c.num_hidden_layers,
                                        " V", V);
  std::vector<float> logits;

  // Decode.
  std::printf("| model | batch | decode tokens/s | step ms | host issue ms | bytes/step | roofline |\n"
              "|---|---|---|---|---|---|---|\n");
  for (int B : batches) {
    const int per_seq = (context + steps + page_tokens - 1) / page_tokens;
    ASSIGN_OR_RETURN(auto pool, KvPagePool::Create(backend.get(), model->kv_layout(page_tokens),
                                                   per_seq * B));
    std::vector<KvPages> tables(B);  // destroyed before `pool`
    std::vector<int32_t> prompt(context);
    for (int i = 0; i < context; ++i) prompt[i] = (i * 7919 + 13) % c.vocab_size;
    for (auto& t : tables) {
      ASSIGN_OR_RETURN(t, pool->Allocate(per_seq));
      ForwardItem item{prompt, 0, t.ids()};
      RETURN_IF_ERROR(model->Forward({&item, 1}, pool.get(), false, &logits));
    }
    std::vector<int32_t> next(B, 1);
    std::vector<ForwardItem> items(B);
    std::vector<TokenSampling> greedy(B);
    for (int b = 0; b < B; ++b) greedy[b].row = b;
    double issue = 0;  // host time queuing a step's kernels, before the sampling waits
    auto step = [&](int i) -> absl::Status {
      for (int b = 0; b < B; ++b) items[b] = {absl::MakeConstSpan(&next[b], 1), context + i, tables[b].ids()};
      const auto t = Clock::now();
      ASSIGN_OR_RETURN(const float* dev_logits, model->ForwardLogits(items, pool.get(), false));
      issue += Since(t);
      return backend->SampleTokens(dev_logits, c.vocab_size, greedy.data(), B, next.data());
    };
    RETURN_IF_ERROR(step(0));  // warm-up: workspace and cuBLAS plans
    issue = 0;
    auto t0 = Clock::now();
    for (int i = 1; i <= steps - 1; ++i) RETURN_IF_ERROR(step(i));
    const double per_step = Since(t0) / (steps - 1);
    const double bytes = weight_bytes + B * (context + steps / 2.0) * kv_token_bytes;
    std::printf("| %s | %d | %.0f | %.3f | %.3f | %.2f GB | %.0f%% |\n", name.c_str(), B,
                B / per_step, per_step * 1e3, issue / (steps - 1) * 1e3, bytes / 1e9,
                100 * bytes / per_step / hbm);
    std::fflush(stdout);
    rows.push_back({{"measurement", "decode"}, {"batch", B}, {"context", context},
                    {"tokens_per_s", B / per_step}, {"step_ms", per_step * 1e3},
                    {"host_issue_ms", issue / (steps - 1) * 1e3}, {"bytes_per_step", bytes},
                    {"roofline", bytes / per_step / hbm}});
  }

  // Prefill, against the same GEMMs alone.
  std::printf("\n| model | prompt | prefill tokens/s | GEMMs alone ms | prefill ms | prefill ms, "
              "per-row attention | of GEMM peak |\n|---|---|---|---|---|---|---|\n");
  for (int T : prefills) {
    const int pages = (T + page_tokens - 1) / page_tokens;
    ASSIGN_OR_RETURN(auto pool,
                     KvPagePool::Create(backend.get(), model->kv_layout(page_tokens), pages));
    ASSIGN_OR_RETURN(auto table, pool->Allocate(pages));
    std::vector<int32_t> prompt(T);
    for (int i = 0; i < T; ++i) prompt[i] = (i * 104729 + 7) % c.vocab_size;
    ForwardItem item{prompt, 0, table.ids()};
    // The attention kernel as chosen (tiled for prompts), then the per-row
    // one alone (KVCAST_CUDA_ATTENTION=warp), alternating, kReps each.
    constexpr int kReps = 3;
    double best[2] = {1e30, 1e30}, worst[2] = {0, 0};  // [0] as chosen, [1] per-row
    RETURN_IF_ERROR(model->Forward({&item, 1}, pool.get(), false, &logits));  // warm-up
    for (int rep = 0; rep < kReps; ++rep) {
      for (int k : {0, 1}) {
        if (k == 1) setenv("KVCAST_CUDA_ATTENTION", "warp", 1);
        auto t0 = Clock::now();
        RETURN_IF_ERROR(model->Forward({&item, 1}, pool.get(), false, &logits));
        const double secs = Since(t0);
        unsetenv("KVCAST_CUDA_ATTENTION");
        best[k] = std::min(best[k], secs);
        worst[k] = std::max(worst[k], secs);
      }
    }
    const double prefill = best[0];

    int64_t max_n = V, max_k = I;
    for (auto [n, k] : layer_gemms) max_n = std::max(max_n, n), max_k = std::max(max_k, k);
    ASSIGN_OR_RETURN(auto x, backend->Allocate(size_t(T) * max_k * sizeof(float)));
    ASSIGN_OR_RETURN(auto y, backend->Allocate(size_t(T) * max_n * sizeof(float)));
    std::vector<Weight> weights;
    for (auto [n, k] : layer_gemms) {
      std::vector<uint16_t> zeros(size_t(n) * k, 0);
      ASSIGN_OR_RETURN(Weight w, backend->LoadWeight(WeightType::kBF16, WeightKind::kMatrix,
                                                     zeros.data(), n, k));
      weights.push_back(std::move(w));
    }
    auto gemms = [&] {
      for (int l = 0; l < c.num_hidden_layers; ++l) {
        for (size_t g = 0; g < layer_gemms.size(); ++g) {
          backend->Linear(x->f32(), T, int(layer_gemms[g].second), weights[g],
                          int(layer_gemms[g].first), nullptr, y->f32());
        }
      }
    };
    gemms();
    RETURN_IF_ERROR(backend->Synchronize());
    double gemm = 1e30;
    for (int rep = 0; rep < kReps; ++rep) {
      const auto t0 = Clock::now();
      gemms();
      RETURN_IF_ERROR(backend->Synchronize());
      gemm = std::min(gemm, Since(t0));
    }
    std::printf("| %s | %d | %.0f | %.1f | %.1f-%.1f | %.1f-%.1f | %.0f%% |\n", name.c_str(), T,
                T / prefill, gemm * 1e3, prefill * 1e3, worst[0] * 1e3, best[1] * 1e3,
                worst[1] * 1e3, 100 * gemm / prefill);
    std::fflush(stdout);
    rows.push_back({{"measurement", "prefill"}, {"prompt_tokens", T},
                    {"tokens_per_s", T / prefill}, {"gemms_alone_ms", gemm * 1e3},
                    {"prefill_ms", prefill * 1e3}});
  }

  // KV landing: DecodeKv from staging into pages.
  const int N = absl::GetFlag(FLAGS_landing_tokens);
  const int pages = (N + page_tokens - 1) / page_tokens;
  ASSIGN_OR_RETURN(auto pool, KvPagePool::Create(backend.get(), model->kv_layout(page_tokens), pages));
  ASSIGN_OR_RETURN(auto table, pool->Allocate(pages));
  const std::vector<int32_t> slots = SlotsOf(table.ids(), page_tokens, 0, N);
  std::printf("\n| format | tokens | bytes | landing GB/s | of pinned H2D |\n|---|---|---|---|---|\n");
  for (KvFormat f : {KvFormat::kFp16, KvFormat::kFp8E4M3, KvFormat::kInt4}) {
    TokenCodec codec(pool->layout(), f);
    const size_t bytes = size_t(N) * codec.token_bytes();
    ASSIGN_OR_RETURN(auto staging, backend->AllocateStaging(bytes));
    auto* buf = static_cast<uint8_t*>(staging->data());
    RETURN_IF_ERROR(codec.Encode(backend.get(), *pool, slots, buf));  // valid payloads
    RETURN_IF_ERROR(codec.Decode(backend.get(), buf, slots, pool.get()));  // warm-up
    const int reps = 10;
    auto t0 = Clock::now();
    for (int i = 0; i < reps; ++i) RETURN_IF_ERROR(codec.Decode(backend.get(), buf, slots, pool.get()));
    const double gbs = double(bytes) * reps / Since(t0);
    std::printf("| %s | %d | %.1f MB | %.1f | %.0f%% |\n",
                kvcache::TrackNameOf(f).c_str(), N, bytes / 1e6, gbs / 1e9,
                100 * gbs / h2d);
    rows.push_back({{"measurement", "landing"}, {"format", kvcache::TrackNameOf(f)},
                    {"tokens", N}, {"bytes", bytes}, {"gb_per_s", gbs / 1e9},
                    {"of_pinned_h2d", gbs / h2d}});
  }
  RETURN_IF_ERROR(backend->Synchronize());
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    header.update({{"device", prop.name}, {"hbm_copy_gb_per_s", hbm / 1e9},
                   {"pinned_h2d_gb_per_s", h2d / 1e9}, {"model", absl::GetFlag(FLAGS_model)}});
    return bench::WriteResultFile(path, std::move(header), std::move(rows));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace kvcast

int main(int argc, char** argv) {
  nlohmann::json header = kvcast::bench::ResultHeader("gpu_bench", argc, argv);
  absl::ParseCommandLine(argc, argv);
  absl::Status st = kvcast::Run(std::move(header));
  if (!st.ok()) {
    std::fprintf(stderr, "gpu_bench: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}
