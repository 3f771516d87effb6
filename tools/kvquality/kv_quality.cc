// kv_quality: every KV track judged on natural text by the project's own
// engine (docs/kv-quality.md).
//
//   kv_quality --model FILE.gguf --text FILE[,FILE...] [--windows 48]
//              [--prefix 512] [--continuation 256] [--tracks fp16,...,ac-lo]
//              [--modes product,all-kv,all-kv-token] [--backend cpu-f32] [--json OUT.json]
//              [--windows_out WINDOWS.json] [--ac_tuning TUNING]
//   kv_quality --model FILE.gguf --text CALIBRATION --calibrate_ac TUNING
//              [--calibrate_levels 15/8] [--windows 12]
//   kv_quality --model FILE.gguf --text CALIBRATION --fit_kv_basis BASIS
//              [--group_layers 10]
//
// Prints, per mode, a table of each track's size (bits per value,
// everything counted) and quality against exact KV: perplexity change with
// its 95% paired-bootstrap interval, mean and 99.9th-percentile KL,
// first-token KL, teacher-forced top-1 agreement. --json writes the same
// with the date, CPU, command and commit (tools/bench/result_file.h). A
// progress line goes to stderr per window.
//
// --calibrate_ac fits a model's per-layer ac levels (ac_tuning.h) on
// calibration text: in product mode, one probe per layer and kind (only
// that layer's K, or V, at --calibrate_levels, everything else exact); each
// probe's mean KL is the layer's sensitivity. It fits the K channel
// weights too, from the energy of the queries over the text
// (query_energy.h). Writes the tuning file that --ac_tuning reads (tracks
// ending in "+tuned" use its levels, "+kw" its weights) and prints the
// sensitivities. --calibrate_kw OUT fits only the weights, adding them to
// --ac_tuning's levels.
//
// --fit_kv_basis fits the model's cross-layer KV basis (kv_basis.h) on the
// exact KV of every half-overlapping window of the text and writes it; tracks "xl@K_STEP/V_STEP" (product mode)
// code over the basis that --kv_basis reads.
#include <chrono>
#include <fstream>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "engine/model/checkpoint.h"
#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "tools/bench/result_file.h"
#include "tools/kvquality/corpus.h"
#include "tools/kvquality/evaluate.h"
#include "tools/kvquality/track_codecs.h"
#include "transport/kvcache/ac/ac_tuning.h"
#include "transport/kvcache/xl/kv_basis.h"

ABSL_FLAG(std::string, model, "", "the model: a .gguf file or HF model directory");
ABSL_FLAG(std::string, backend, "cpu-f32",
          "compute backend: cpu-f32 (float32 weights and activations, the default: the "
          "codec's effect alone), cpu (Q8 activations add their rounding), cpu-bf16, ...");
ABSL_FLAG(std::vector<std::string>, text, {}, "text files, read as they are and joined");
ABSL_FLAG(int, windows, 48, "windows of prefix + continuation tokens, spread over the text");
ABSL_FLAG(int, prefix, 512, "prompt tokens per window (their KV crosses the track)");
ABSL_FLAG(int, continuation, 256, "teacher-forced tokens per window");
ABSL_FLAG(std::vector<std::string>, tracks,
          std::vector<std::string>({"fp16", "bf16", "fp8-e4m3", "int8", "fp4-e2m1", "int4",
                                    "fp4-e2m1-rot", "int4-rot", "ac", "ac-lo"}),
          "KV tracks to judge");
ABSL_FLAG(std::vector<std::string>, modes, std::vector<std::string>({"product", "all-kv"}),
          "product (the prompt's KV through the track), all-kv (every position's) and/or "
          "all-kv-token (every position's, each token's after its step)");
ABSL_FLAG(int, resamples, 2000, "paired-bootstrap resamples for the perplexity interval");
ABSL_FLAG(std::string, json, "", "also write the results here as JSON");
ABSL_FLAG(std::string, ac_tuning, "", "per-layer ac levels for the tracks ending in +tuned");
ABSL_FLAG(std::string, calibrate_ac, "",
          "fit per-layer ac levels on --text and write them here (see the file's comment)");
ABSL_FLAG(std::string, calibrate_levels, "15/8", "K/V levels of the calibration's probes");
ABSL_FLAG(std::string, calibrate_kw, "",
          "write here the --ac_tuning file with K channel weights fitted on --text (and nothing else)");
ABSL_FLAG(std::string, kv_basis, "", "the model's KV basis, for the xl@K/V tracks");
ABSL_FLAG(std::string, fit_kv_basis, "",
          "fit the model's KV basis on --text and write it here (and nothing else)");
ABSL_FLAG(int, group_layers, 10, "--fit_kv_basis: layers per basis block");
ABSL_FLAG(std::string, windows_out, "",
          "write the windows' token ids here as JSON (for hf_crosscheck.py)");

namespace kvcast::kvquality {
namespace {

void PrintTable(Mode mode, const std::vector<TrackResult>& results) {
  std::printf("\n#### %s mode\n\n", std::string(ModeName(mode)).c_str());
  std::printf("| track | bits/value | smaller than fp16 | perplexity change (95%% CI) | "
              "mean KL | p99.9 KL | first-token KL | top-1 agreement |\n"
              "|---|---|---|---|---|---|---|---|\n");
  for (const TrackResult& r : results) {
    if (r.mode != mode) continue;
    const TrackQuality& q = r.quality;
    std::printf("| %s | %.2f | %.2fx | %+.3f%% (%+.3f, %+.3f) | %.2e | %.2e | %.2e | %.2f%% |\n",
                r.track.c_str(), r.bits_per_value,
                r.bits_per_value > 0 ? 16.0 / r.bits_per_value : 0.0, 100 * q.ppl_change,
                100 * q.ppl_change_lo, 100 * q.ppl_change_hi, q.mean_kl, q.p999_kl, q.first_kl,
                100 * q.top1);
  }
}

nlohmann::json ToJson(const std::vector<TrackResult>& results) {
  nlohmann::json rows = nlohmann::json::array();
  for (const TrackResult& r : results) {
    const TrackQuality& q = r.quality;
    rows.push_back({{"track", r.track}, {"mode", std::string(ModeName(r.mode))},
                    {"bits_per_value", r.bits_per_value}, {"windows", q.windows},
                    {"positions", q.positions}, {"ppl_exact", q.ppl_exact},
                    {"ppl_track", q.ppl_track}, {"ppl_change", q.ppl_change},
                    {"ppl_change_lo", q.ppl_change_lo}, {"ppl_change_hi", q.ppl_change_hi},
                    {"mean_kl", q.mean_kl}, {"p999_kl", q.p999_kl}, {"first_kl", q.first_kl},
                    {"top1", q.top1}});
  }
  return rows;
}

// The calibration's results: each probe's mean KL by layer and kind, the
// fitted tuning written to `path`.
// The K channel weights of `tuning` from the query energy on `windows`.
absl::Status FitChannelWeights(const Checkpoint& checkpoint, Backend* backend,
                               const std::vector<absl::Span<const int32_t>>& windows,
                               const EvalOptions& o, kvcache::ac::AcLayerTuning* tuning) {
  ASSIGN_OR_RETURN(const ChannelEnergy energy, MeasureChannelEnergy(checkpoint, backend, windows, o));
  const ModelConfig& c = checkpoint.config();
  tuning->kv_heads = c.num_key_value_heads;
  tuning->head_dim = c.head_dim;
  ASSIGN_OR_RETURN(tuning->k_channel,
                   kvcache::ac::FitKChannelWeights(energy.query, energy.key, c.num_hidden_layers,
                                                   tuning->kv_heads, tuning->head_dim));
  return absl::OkStatus();
}

absl::Status WriteFile(const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return absl::NotFoundError("cannot write " + path);
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok) return absl::DataLossError("cannot write " + path);
  std::printf("\nwrote %s\n", path.c_str());
  return absl::OkStatus();
}

absl::Status WriteTuning(const std::string& path, const std::vector<TrackResult>& probes,
                         const std::string& about, const std::vector<float>& k_channel,
                         int kv_heads, int head_dim) {
  std::vector<double> sensitivity[2];
  for (size_t i = 0; i < probes.size(); ++i) sensitivity[i % 2].push_back(probes[i].quality.mean_kl);
  ASSIGN_OR_RETURN(kvcache::ac::AcLayerTuning tuning,
                   kvcache::ac::FitAcTuning(sensitivity[0], sensitivity[1]));
  tuning.k_channel = k_channel;
  tuning.kv_heads = kv_heads;
  tuning.head_dim = head_dim;
  std::string comment =
      about + "\nlayer: sensitivity of K, V (mean KL with that layer alone at the probe levels)";
  std::printf("\n| layer | K sensitivity | V sensitivity | K scale | V scale |\n"
              "|---|---|---|---|---|\n");
  for (size_t l = 0; l < tuning.k.size(); ++l) {
    std::printf("| %zu | %.3e | %.3e | %.3f | %.3f |\n", l, sensitivity[0][l], sensitivity[1][l],
                tuning.k[l], tuning.v[l]);
    absl::StrAppend(&comment, "\n", l, ": ",
                    absl::StrFormat("%.3e %.3e", sensitivity[0][l], sensitivity[1][l]));
  }
  absl::StrAppend(&comment, "\nk LAYER HEAD: K channel weights, (query energy / key energy)^(1/4) over "
                            "each head's geometric mean");
  return WriteFile(path, kvcache::ac::FormatAcTuning(tuning, comment));
}

absl::Status Main(nlohmann::json header) {
  const std::string model_path = absl::GetFlag(FLAGS_model);
  if (model_path.empty()) return absl::InvalidArgumentError("--model is required");
  EvalOptions o;
  o.prefix_tokens = absl::GetFlag(FLAGS_prefix);
  o.continuation_tokens = absl::GetFlag(FLAGS_continuation);
  o.tracks = absl::GetFlag(FLAGS_tracks);
  o.resamples = absl::GetFlag(FLAGS_resamples);
  o.modes.clear();
  for (const std::string& m : absl::GetFlag(FLAGS_modes)) {
    ASSIGN_OR_RETURN(Mode mode, ModeOfName(m));
    o.modes.push_back(mode);
  }
  if (const std::string path = absl::GetFlag(FLAGS_ac_tuning); !path.empty()) {
    ASSIGN_OR_RETURN(o.ac_tuning, kvcache::ac::ReadAcTuning(path));
  }
  if (const std::string path = absl::GetFlag(FLAGS_kv_basis); !path.empty()) {
    ASSIGN_OR_RETURN(kvcache::xl::KvBasis basis, kvcache::xl::KvBasis::Load(path));
    o.kv_basis = std::make_shared<const kvcache::xl::KvBasis>(std::move(basis));
  }
  const std::string calibrate = absl::GetFlag(FLAGS_calibrate_ac);
  ASSIGN_OR_RETURN(std::string text, ReadCorpus(absl::GetFlag(FLAGS_text)));
  ASSIGN_OR_RETURN(auto tokenizer, LoadTokenizer(model_path));
  ASSIGN_OR_RETURN(std::vector<int32_t> tokens, tokenizer->Encode(text, /*add_bos=*/false));
  const std::string fit_basis = absl::GetFlag(FLAGS_fit_kv_basis);
  // A basis is fitted on every half-overlapping window of its (short) text.
  ASSIGN_OR_RETURN(auto windows,
                   fit_basis.empty()
                       ? Windows(tokens, o.prefix_tokens + o.continuation_tokens,
                                 absl::GetFlag(FLAGS_windows))
                       : HalfOverlappingWindows(tokens, o.prefix_tokens + o.continuation_tokens));
  if (const std::string path = absl::GetFlag(FLAGS_windows_out); !path.empty()) {
    nlohmann::json ids = nlohmann::json::array();
    for (const auto& w : windows) ids.push_back(std::vector<int32_t>(w.begin(), w.end()));
    RETURN_IF_ERROR(bench::WriteJsonFile(path, {{"prefix", o.prefix_tokens},
                                                {"continuation", o.continuation_tokens},
                                                {"windows", ids}}));
  }
  ASSIGN_OR_RETURN(auto checkpoint, Checkpoint::Open(model_path));
  if (!calibrate.empty()) {
    o.modes = {Mode::kProduct};
    o.tracks = ProbeTracks("ac@" + absl::GetFlag(FLAGS_calibrate_levels),
                           checkpoint->config().num_hidden_layers);
  }
  ASSIGN_OR_RETURN(auto backend, NewBackend(absl::GetFlag(FLAGS_backend)));
  kvcache::ac::AcLayerTuning weights;  // K channel weights, when calibrating
  if (!calibrate.empty() || !absl::GetFlag(FLAGS_calibrate_kw).empty()) {
    RETURN_IF_ERROR(FitChannelWeights(*checkpoint, backend.get(), windows, o, &weights));
  }
  if (const std::string path = absl::GetFlag(FLAGS_calibrate_kw); !path.empty()) {
    if (!o.ac_tuning) return absl::InvalidArgumentError("--calibrate_kw adds to an --ac_tuning");
    kvcache::ac::AcLayerTuning tuning = *o.ac_tuning;
    tuning.k_channel = weights.k_channel;
    tuning.kv_heads = weights.kv_heads;
    tuning.head_dim = weights.head_dim;
    // The levels' file's comments (its fit's record), then the weights'.
    std::string comment;
    std::ifstream in(absl::GetFlag(FLAGS_ac_tuning));
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("# k LAYER HEAD", 0) != 0 && line.rfind("# K channel", 0) != 0 &&
          line.rfind("# ", 0) == 0) {
        absl::StrAppend(&comment, line.substr(2), "\n");
      }
    }
    absl::StrAppend(&comment, "K channel weights: ", absl::StrJoin(absl::GetFlag(FLAGS_text), ", "),
                    ", ", windows.size(), " windows, ", bench::TodayUtc(),
                    "\nk LAYER HEAD: (query energy / key energy)^(1/4) over each head's geometric mean");
    return WriteFile(path, kvcache::ac::FormatAcTuning(tuning, comment));
  }
  const auto start = std::chrono::steady_clock::now();
  o.progress = [&](int done, int total) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "\rwindow %d/%d, %.0f s, about %.0f s left   %s", done, total, s,
                 s / done * (total - done), done == total ? "\n" : "");
  };
  if (const std::string& path = fit_basis; !path.empty()) {
    ASSIGN_OR_RETURN(const kvcache::xl::KvBasis basis,
                     FitKvBasis(*checkpoint, backend.get(), windows, o,
                                absl::GetFlag(FLAGS_group_layers)));
    RETURN_IF_ERROR(basis.Save(path));
    std::printf("wrote %s: %d groups of %d layers, id %016llx, fitted on %zu windows of %s\n",
                path.c_str(), basis.num_groups(), basis.group_layers(),
                static_cast<unsigned long long>(basis.id()), windows.size(),
                absl::StrJoin(absl::GetFlag(FLAGS_text), ", ").c_str());
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(auto results, EvaluateTracks(*checkpoint, backend.get(), windows, o));

  std::printf("### KV quality: %s\n\n%s, backend %s, %s; text %s (%zu tokens); %zu windows of "
              "%d + %d tokens; exact perplexity %.4f\n",
              model_path.c_str(), bench::TodayUtc().c_str(), absl::GetFlag(FLAGS_backend).c_str(),
              bench::CpuModel().c_str(), absl::StrJoin(absl::GetFlag(FLAGS_text), ", ").c_str(),
              tokens.size(), windows.size(), o.prefix_tokens, o.continuation_tokens,
              results.empty() ? 0.0 : results[0].quality.ppl_exact);
  for (Mode m : o.modes) PrintTable(m, results);
  if (!calibrate.empty()) {
    RETURN_IF_ERROR(WriteTuning(
        calibrate, results,
        absl::StrCat("kvcast ac tuning of ", model_path, ", ", bench::TodayUtc(), "\ncalibration text ",
                     absl::StrJoin(absl::GetFlag(FLAGS_text), ", "), ", ", windows.size(),
                     " windows of ", o.prefix_tokens, " + ", o.continuation_tokens,
                     " tokens, product mode; probes at ac@", absl::GetFlag(FLAGS_calibrate_levels)),
        weights.k_channel, weights.kv_heads, weights.head_dim));
  }
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    header.update({{"model", model_path}, {"backend", absl::GetFlag(FLAGS_backend)},
                   {"text", absl::GetFlag(FLAGS_text)}, {"corpus_tokens", tokens.size()},
                   {"windows", windows.size()}, {"prefix", o.prefix_tokens},
                   {"continuation", o.continuation_tokens}});
    RETURN_IF_ERROR(bench::WriteResultFile(path, std::move(header), ToJson(results)));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace kvcast::kvquality

int main(int argc, char** argv) {
  nlohmann::json header = kvcast::bench::ResultHeader("kv_quality", argc, argv);
  absl::ParseCommandLine(argc, argv);
  const absl::Status s = kvcast::kvquality::Main(std::move(header));
  if (!s.ok()) {
    std::fprintf(stderr, "kv_quality: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
