// kvcache_bench: what each KVCache-over-MoQT compression costs in bytes and
// in model quality.
//
//   kvcache_bench [--presets tiny,100m] [--model DIR] [--prompt_len 256] [--steps 64]
//
// Bytes: payload bytes per token of every track for the bench models and
// Llama-3-8B / 70B shapes. Quality: a prompt is prefilled with exact KV; the
// prompt's KV then goes through a codec (what a decode worker receives) and
// decode runs `steps` greedy steps. Against the exact-KV run it reports the
// max |logit error| and KL(exact || codec) of the first decode step, the
// same over all steps with the exact run's tokens forced (teacher forcing),
// and how many of the free-running greedy tokens agree. The 8-bit and 4-bit
// formats are also run with the scale block they do not use on the wire
// (per head vs per 32 values), the measurement behind that choice.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "engine/model/checkpoint.h"
#include "engine/transformer.h"
#include "kernels/kv_codec.h"
#include "tools/bench/bench_models.h"
#include "tools/bench/result_file.h"
#include "transport/kvcache/ac/ac_codec.h"
#include "transport/kvcache/naming.h"
#include "engine/kv/token_codec.h"

ABSL_FLAG(std::string, model, "", ".gguf file or HF model directory (instead of --presets)");
ABSL_FLAG(std::string, presets, "tiny,100m", "random models: tiny (head_dim 16), 100m (head_dim 64)");
ABSL_FLAG(int, prompt_len, 256, "prompt tokens");
ABSL_FLAG(int, steps, 64, "greedy decode steps compared");
ABSL_FLAG(std::string, ac_try, "",
          "more ac operating points to measure, comma-separated "
          "K_LEVELS/V_LEVELS[/EARLY_LAYERS/EARLY_SCALE]");
ABSL_FLAG(bool, only_ac, false, "measure only the ac tracks (and int8, the reference)");
ABSL_FLAG(std::string, json, "", "also write the quality rows here as a JSON result file");

namespace kvcast {
namespace {

using kvcache::TrackNameOf;

void PrintBytes() {
  struct Shape {
    const char* name;
    KvLayout layout;
  };
  const Shape shapes[] = {{"tiny (L2 H2 D16)", {2, 2, 16, 16}},
                          {"100m (L12 H4 D64)", {12, 4, 64, 16}},
                          {"Llama-3-8B (L32 H8 D128)", {32, 8, 128, 16}},
                          {"Llama-3-70B (L80 H8 D128)", {80, 8, 128, 16}}};
  std::printf("\n### Bytes per token\n\n| track |");
  for (const Shape& s : shapes) std::printf(" %s |", s.name);
  std::printf(" vs fp16 (8B) |\n|---|");
  for (size_t i = 0; i <= std::size(shapes); ++i) std::printf("---|");
  std::printf("\n");
  for (KvFormat f : kAllKvFormats) {
    std::printf("| %s |", TrackNameOf(f).c_str());
    for (const Shape& s : shapes) {
      std::printf(" %zu |", TokenCodec(s.layout, f).token_bytes());
    }
    const double ratio = double(TokenCodec(shapes[2].layout, f).token_bytes()) /
                         TokenCodec(shapes[2].layout, KvFormat::kFp16).token_bytes();
    std::printf(" %.3f |\n", ratio);
  }
}

struct Variant {
  KvFormat format;
  int block;  // 0: exact KV (no codec)
  const kvcache::ac::AcPolicy* ac = nullptr;  // set: an ac track (format, block unused)
};

// Passes tokens [0, n) of `pages` through the ac codec, group by group
// (128 tokens); returns the payload bytes.
size_t AcRoundTrip(KvPagePool& pool, const std::vector<int32_t>& pages, int n,
                   const kvcache::ac::AcPolicy& policy) {
  const KvLayout& layout = pool.layout();
  const kvcache::ac::AcShape shape{layout.num_layers, layout.num_kv_heads, layout.head_dim};
  const int row = layout.token_floats(), tf = shape.token_floats();
  kvcache::ac::AcGroupEncoder enc(shape, policy);
  kvcache::ac::AcGroupDecoder dec(shape);
  std::vector<std::vector<uint8_t>> objects;
  size_t bytes = 0;
  for (int first = 0; first < n; first += 128) {
    const int count = std::min(128, n - first);
    const auto slots = SlotsOf(pages, layout.page_tokens, first, count);
    std::vector<float> kv(size_t(count) * tf);
    auto each = [&](auto fn) {
      for (int t = 0; t < count; ++t) {
        for (int l = 0; l < layout.num_layers; ++l) {
          fn(pool.k_cache(l) + size_t(slots[t]) * row, &kv[size_t(t) * tf + (2 * l) * row]);
          fn(pool.v_cache(l) + size_t(slots[t]) * row, &kv[size_t(t) * tf + (2 * l + 1) * row]);
        }
      }
    };
    each([&](float* cache, float* v) { std::copy(cache, cache + row, v); });
    enc.Encode(kv.data(), count, &objects);
    for (const auto& o : objects) bytes += o.size();
    const std::vector<absl::Span<const uint8_t>> spans(objects.begin(), objects.end());
    if (absl::Status st = dec.DecodeGroup(spans, kv.data()); !st.ok()) {
      std::fprintf(stderr, "ac decode: %s\n", st.ToString().c_str());
      std::abort();
    }
    each([&](float* cache, float* v) { std::copy(v, v + row, cache); });
  }
  return bytes;
}

// Prefills `prompt`, passes its KV through `v`, then decodes greedily.
// `forced` (if not empty) replaces the sampled tokens. Returns the logits of
// every decode step and the tokens fed.
struct Run {
  std::vector<std::vector<float>> logits;
  std::vector<int32_t> tokens;
};
absl::StatusOr<Run> Generate(Transformer& model, KvPagePool& pool,
                             const std::vector<int32_t>& pages,
                             const std::vector<int32_t>& prompt, const Variant& v, int steps,
                             const std::vector<int32_t>& forced) {
  std::vector<float> logits;
  const int n = prompt.size();
  RETURN_IF_ERROR(PrefillInChunks(model, prompt, pages, 128, &pool, &logits));
  const KvLayout& layout = pool.layout();
  if (v.ac != nullptr) {
    AcRoundTrip(pool, pages, n, *v.ac);
  } else if (v.block > 0) {
    std::vector<uint8_t> enc(KvRowBytes(v.format, layout.num_kv_heads, layout.head_dim, v.block));
    for (int32_t slot : SlotsOf(pages, layout.page_tokens, 0, n)) {
      for (int l = 0; l < layout.num_layers; ++l) {
        for (float* cache : {pool.k_cache(l), pool.v_cache(l)}) {
          float* row = cache + size_t(slot) * layout.token_floats();
          EncodeKvRow(v.format, row, layout.num_kv_heads, layout.head_dim, v.block, enc.data());
          DecodeKvRow(v.format, enc.data(), layout.num_kv_heads, layout.head_dim, v.block, row);
        }
      }
    }
  }
  Run run;
  // The first token comes from the prefill (exact KV in every variant).
  int32_t next = std::max_element(logits.begin(), logits.end()) - logits.begin();
  for (int s = 0; s < steps; ++s) {
    run.tokens.push_back(next);
    ForwardItem item{absl::MakeConstSpan(&run.tokens.back(), 1), n + s, pages};
    RETURN_IF_ERROR(model.Forward({&item, 1}, &pool, false, &logits));
    run.logits.push_back(logits);
    next = forced.empty() ? int32_t(std::max_element(logits.begin(), logits.end()) -
                                    logits.begin())
                          : forced[std::min<size_t>(s + 1, forced.size() - 1)];
  }
  return run;
}

// KL(p || q) of the softmax distributions of two logit vectors.
double Kl(const std::vector<float>& a, const std::vector<float>& b) {
  auto log_softmax = [](const std::vector<float>& x) {
    const double m = *std::max_element(x.begin(), x.end());
    double sum = 0;
    for (float v : x) sum += std::exp(v - m);
    std::vector<double> out(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = x[i] - m - std::log(sum);
    return out;
  };
  auto la = log_softmax(a), lb = log_softmax(b);
  double kl = 0;
  for (size_t i = 0; i < la.size(); ++i) kl += std::exp(la[i]) * (la[i] - lb[i]);
  return std::max(kl, 0.0);
}

double MaxAbs(const std::vector<float>& a, const std::vector<float>& b);

// One row of the quality table, printed and added to `rows` (--json).
void PrintRow(const std::string& track, const std::string& block, double bytes_vs_fp16,
              const Run& exact, const Run& forced, const Run& free, int steps,
              nlohmann::json* rows) {
  double max_err = 0, kl_sum = 0;
  for (int s = 0; s < steps; ++s) {
    max_err = std::max(max_err, MaxAbs(exact.logits[s], forced.logits[s]));
    kl_sum += Kl(exact.logits[s], forced.logits[s]);
  }
  int agree = 0;
  for (int s = 0; s < steps; ++s) agree += free.tokens[s] == exact.tokens[s];
  std::printf("| %s | %s | %.3f | %.2e | %.2e | %.2e | %.2e | %d/%d |\n", track.c_str(),
              block.c_str(), bytes_vs_fp16, MaxAbs(exact.logits[0], forced.logits[0]),
              Kl(exact.logits[0], forced.logits[0]), max_err, kl_sum / steps, agree, steps);
  std::fflush(stdout);
  rows->push_back({{"track", track}, {"scale_block", block}, {"bytes_vs_fp16", bytes_vs_fp16},
                   {"step1_max_abs_logit_err", MaxAbs(exact.logits[0], forced.logits[0])},
                   {"step1_kl", Kl(exact.logits[0], forced.logits[0])},
                   {"forced_max_abs_err", max_err}, {"forced_mean_kl", kl_sum / steps},
                   {"greedy_agreeing", agree}, {"steps", steps}});
}

double MaxAbs(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, double(std::fabs(a[i] - b[i])));
  return m;
}

absl::Status Quality(const std::string& dir, int prompt_len, int steps, nlohmann::json* rows) {
  ASSIGN_OR_RETURN(auto ckpt, Checkpoint::Open(dir));
  auto cpu = NewCpuBackend();
  ASSIGN_OR_RETURN(auto model, Transformer::Load(*ckpt, cpu.get()));
  const ModelConfig& c = model->config();
  const KvLayout layout = model->kv_layout(16);
  const int pages_needed = (prompt_len + steps + 15) / 16;
  ASSIGN_OR_RETURN(auto pool, KvPagePool::Create(cpu.get(), layout, pages_needed));
  ASSIGN_OR_RETURN(KvPages held, pool->Allocate(pages_needed));
  const std::vector<int32_t> pages(held.ids().begin(), held.ids().end());
  std::vector<int32_t> prompt(prompt_len);
  for (int i = 0; i < prompt_len; ++i) prompt[i] = (i * 7919 + 13) % c.vocab_size;

  ASSIGN_OR_RETURN(Run exact, Generate(*model, *pool, pages, prompt, {KvFormat::kFp16, 0},
                                       steps, {}));
  std::printf("\n### Quality: %s, %d layers, %d kv heads x %d, vocab %d; prompt %d, %d steps\n\n",
              c.architecture.c_str(), layout.num_layers, layout.num_kv_heads, layout.head_dim,
              c.vocab_size, prompt_len, steps);
  std::printf("| track | scale block | bytes/token vs fp16 | step 1 max abs logit err | "
              "step 1 KL | forced %d steps: max abs err | mean KL | greedy tokens agreeing |\n"
              "|---|---|---|---|---|---|---|---|\n", steps);
  std::vector<Variant> variants;
  for (KvFormat f : kAllKvFormats) {
    const int wire = ScaleBlock(f, layout.head_dim);
    variants.push_back({f, wire});
    if (KvFormatScaled(f)) {
      const int other = wire == layout.head_dim ? 32 : layout.head_dim;
      if (other != wire && layout.head_dim % other == 0) variants.push_back({f, -other});
    }
  }
  const size_t fp16_bytes = KvRowBytes(KvFormat::kFp16, layout.num_kv_heads, layout.head_dim,
                                       layout.head_dim);
  std::vector<kvcache::ac::AcPolicy> ac_policies = {kvcache::ac::AcHigh(),
                                                    kvcache::ac::AcLow()};
  for (absl::string_view spec : absl::StrSplit(absl::GetFlag(FLAGS_ac_try), ',', absl::SkipEmpty())) {
    // "K_LEVELS/V_LEVELS[/EARLY_LAYERS/EARLY_SCALE]"
    std::vector<std::string> parts = absl::StrSplit(spec, '/');
    if (parts.size() != 2 && parts.size() != 4) {
      return absl::InvalidArgumentError("--ac_try: K_LEVELS/V_LEVELS[/EARLY_LAYERS/EARLY_SCALE]");
    }
    kvcache::ac::AcPolicy p{"ac (try)", std::stof(parts[0]), std::stof(parts[1])};
    if (parts.size() == 4) {
      p.k_layer_scale.assign(std::stoi(parts[2]), std::stof(parts[3]));
      p.v_layer_scale = p.k_layer_scale;
    }
    ac_policies.push_back(p);
  }
  if (layout.head_dim % 16 == 0) {
    for (const auto& p : ac_policies) variants.push_back({KvFormat::kFp16, 0, &p});
  }
  for (Variant v : variants) {
    if (absl::GetFlag(FLAGS_only_ac) && v.ac == nullptr && !(v.format == KvFormat::kInt8 && v.block > 0)) {
      continue;
    }
    if (v.ac != nullptr) {
      ASSIGN_OR_RETURN(Run forced, Generate(*model, *pool, pages, prompt, v, steps, exact.tokens));
      ASSIGN_OR_RETURN(Run free, Generate(*model, *pool, pages, prompt, v, steps, {}));
      // Bytes: one more pass (Generate re-prefilled, so the pool holds exact KV).
      std::vector<float> unused;
      RETURN_IF_ERROR(PrefillInChunks(*model, prompt, pages, 128, pool.get(), &unused));
      const size_t bytes = AcRoundTrip(*pool, pages, prompt_len, *v.ac);
      PrintRow(std::string(v.ac->track),
               absl::StrCat("levels K ", v.ac->k_levels, ", V ", v.ac->v_levels,
                            v.ac->k_layer_scale.empty()
                                ? ""
                                : absl::StrCat("; x", v.ac->k_layer_scale[0], " in ",
                                               v.ac->k_layer_scale.size(), " layers")),
               double(bytes) / prompt_len / (2.0 * layout.num_layers * fp16_bytes), exact, forced,
               free, steps, rows);
      continue;
    }
    const bool on_wire = v.block > 0;
    v.block = std::abs(v.block);
    ASSIGN_OR_RETURN(Run forced, Generate(*model, *pool, pages, prompt, v, steps, exact.tokens));
    ASSIGN_OR_RETURN(Run free, Generate(*model, *pool, pages, prompt, v, steps, {}));
    const std::string block =
        KvFormatScaled(v.format) ? absl::StrCat(v.block == layout.head_dim ? "per head (" : "",
                                                v.block, v.block == layout.head_dim ? ")" : "")
                                 : "-";
    PrintRow(TrackNameOf(v.format) + (on_wire ? "" : " (not used)"), block,
             double(KvRowBytes(v.format, layout.num_kv_heads, layout.head_dim, v.block)) /
                 fp16_bytes,
             exact, forced, free, steps, rows);
  }
  return absl::OkStatus();
}

absl::Status Main(nlohmann::json header) {
  PrintBytes();
  const int prompt_len = absl::GetFlag(FLAGS_prompt_len);
  const int steps = absl::GetFlag(FLAGS_steps);
  if (prompt_len <= 0 || steps <= 0) return absl::InvalidArgumentError("--prompt_len, --steps > 0");
  nlohmann::json rows = nlohmann::json::array();
  std::vector<std::string> models;
  if (!absl::GetFlag(FLAGS_model).empty()) {
    models.push_back(absl::GetFlag(FLAGS_model));
  } else {
    for (absl::string_view preset : absl::StrSplit(absl::GetFlag(FLAGS_presets), ',')) {
      ASSIGN_OR_RETURN(std::string dir, WriteBenchModel(std::string(preset)));
      models.push_back(dir);
    }
  }
  for (const std::string& m : models) {
    nlohmann::json model_rows = nlohmann::json::array();
    RETURN_IF_ERROR(Quality(m, prompt_len, steps, &model_rows));
    for (nlohmann::json& r : model_rows) {
      r["model"] = m;
      rows.push_back(std::move(r));
    }
  }
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    header.update({{"prompt_len", prompt_len}, {"steps", steps}});
    return bench::WriteResultFile(path, std::move(header), std::move(rows));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace kvcast

int main(int argc, char** argv) {
  nlohmann::json header = kvcast::bench::ResultHeader("kvcache_bench", argc, argv);
  absl::ParseCommandLine(argc, argv);
  absl::Status s = kvcast::Main(std::move(header));
  if (!s.ok()) {
    std::fprintf(stderr, "kvcache_bench: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
