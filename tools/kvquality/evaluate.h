// The KV quality evaluation (docs/kv-quality.md): every KV track scored on
// windows of natural text by the project's own engine, in two modes.
//
//  - product: a window's first prefix_tokens tokens are prefilled with
//    exact KV, which then crosses the track's wire codec into other pages
//    (as a prefill worker publishes it and a decode worker lands it); the
//    continuation is teacher-forced on top, its own KV exact, as a decode
//    worker computes it. What a user of a disaggregated deployment gets.
//  - all-kv: every position's K and V goes through the track as the model
//    writes it (group-sized chunks; the papers' measurement).
//  - all-kv-token: every position's KV through the track as a decode
//    worker would publish it token by token: the prefix as in product
//    mode, then the continuation one token a step, each token's KV (every
//    layer) coded right after its own step, so the token reads its own
//    exact KV and every later one its coded KV. The mode a track coding a
//    token across layers (xl) can run; the row and ac tracks run it too
//    (an ac token then makes a one-token group).
//
// Each window's continuation positions but the last are scored (the
// position's logits against the next token of the window) against the
// same window with exact KV (pages keeping fp16 values, as the workers
// keep them: the fp16 track is then exact).
//
// Thread safety: one call at a time per backend.
#ifndef KVCAST_TOOLS_KVQUALITY_EVALUATE_H_
#define KVCAST_TOOLS_KVQUALITY_EVALUATE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/model/checkpoint.h"
#include "kernels/backend.h"
#include "tools/kvquality/metrics.h"
#include "transport/kvcache/ac/ac_tuning.h"
#include "transport/kvcache/xl/kv_basis.h"

namespace kvcast::kvquality {

enum class Mode { kProduct, kAllKv, kAllKvToken };
std::string_view ModeName(Mode mode);  // "product", "all-kv", "all-kv-token"
// InvalidArgument naming the modes for any other name.
absl::StatusOr<Mode> ModeOfName(std::string_view name);

struct EvalOptions {
  int prefix_tokens = 512;        // a multiple of group_tokens
  int continuation_tokens = 256;  // at least 2
  int group_tokens = 128;         // tokens per group, as the KV tracks publish them
  std::vector<std::string> tracks = {"fp16", "bf16",         "fp8-e4m3", "int8", "fp4-e2m1",
                                     "int4", "fp4-e2m1-rot", "int4-rot", "ac",   "ac-lo"};
  std::vector<Mode> modes = {Mode::kProduct, Mode::kAllKv};
  int resamples = 2000;  // bootstrap resamples (metrics.h)
  // The model's per-layer ac levels, for tracks ending in "+tuned"
  // (track_codecs.h).
  std::optional<kvcache::ac::AcLayerTuning> ac_tuning;
  // The model's KV basis, for the xl tracks (track_codecs.h).
  std::shared_ptr<const kvcache::xl::KvBasis> kv_basis;
  // Called after each window with (windows done, windows in all).
  std::function<void(int, int)> progress;
};

struct TrackResult {
  std::string track;
  Mode mode = Mode::kProduct;
  // Bits per KV value of the prefixes' objects, headers, scales and tables
  // counted (fp16: 16): product mode's in every mode (all-kv-token's
  // continuation codes single tokens, whose headers a published group
  // would share).
  double bits_per_value = 0;
  TrackQuality quality;
};

// Loads `checkpoint` onto `backend` and scores every track of `options` in
// every mode on `windows` (each prefix_tokens + continuation_tokens
// tokens). Results in the order of options.modes, then options.tracks.
// InvalidArgument for options out of range, a window of another length,
// an unknown track (naming the known ones), or an ac track the model's
// shape has not; the engine's errors.
absl::StatusOr<std::vector<TrackResult>> EvaluateTracks(
    const Checkpoint& checkpoint, Backend* backend,
    const std::vector<absl::Span<const int32_t>>& windows, const EvalOptions& options);

// Per layer, KV head and channel: the query and key energies
// (query_energy.h) over every position of `windows`, with exact KV; what
// the K channel weights are fitted to (ac_tuning.h). Errors as
// EvaluateTracks.
struct ChannelEnergy {
  std::vector<double> query, key;
};
absl::StatusOr<ChannelEnergy> MeasureChannelEnergy(
    const Checkpoint& checkpoint, Backend* backend,
    const std::vector<absl::Span<const int32_t>>& windows, const EvalOptions& options);

// The model's KV basis (kv_basis.h) over groups of `group_layers` layers,
// fitted on every window's exact KV (K before RoPE), each window's first
// position left out (the attention sink, which the xl tracks send as it
// is). Errors as EvaluateTracks, and the fitter's.
absl::StatusOr<kvcache::xl::KvBasis> FitKvBasis(
    const Checkpoint& checkpoint, Backend* backend,
    const std::vector<absl::Span<const int32_t>>& windows, const EvalOptions& options,
    int group_layers);

}  // namespace kvcast::kvquality

#endif  // KVCAST_TOOLS_KVQUALITY_EVALUATE_H_
