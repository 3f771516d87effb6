// A model's ac tuning: how many more (or fewer) levels each layer's K and V
// units get than the operating point's, from how sensitive the model is to
// each layer's KV (docs/kv-quality.md, "Per-layer levels"). Fitted once per
// model on calibration text (kv_quality --calibrate_ac) and read by the
// encoder's side only: the steps travel in every group header, so decoders
// and relays need no tuning.
//
// File format (text): '#' comment lines, then one line per layer from 0,
// "LAYER K_SCALE V_SCALE" (scales positive and finite); then, optionally,
// the K channel weights: one line per layer and KV head, in order, "k LAYER
// HEAD W_0 .. W_{D-1}" (weights positive and finite).
//
// Pure functions; thread-safe.
#ifndef KVCAST_TRANSPORT_KVCACHE_AC_AC_TUNING_H_
#define KVCAST_TRANSPORT_KVCACHE_AC_AC_TUNING_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "transport/kvcache/ac/ac_codec.h"

namespace kvcast::kvcache::ac {

struct AcLayerTuning {
  std::vector<float> k, v;  // per layer: levels scale of its K units, V units
  // AcPolicy::k_channel_weights: per layer, KV head (kv_heads of them) and
  // channel (head_dim); empty when the tuning has none.
  int kv_heads = 0, head_dim = 0;
  std::vector<float> k_channel;
};

// K channel weights from energies per layer, KV head and channel (layers x
// heads x dim values each): Q, the mean squared query value that reads the
// channel (over the KV head's query heads), and K, the keys' own. An error
// e in K channel c moves a score by q_c e; in a rotated head every channel
// gets the same error, at a step in proportion to the head's weighted key
// magnitude, sqrt(sum_c w_c^2 K_c). The scores' error, in proportion to
// (sum_c w_c^2 K_c)(sum_c Q_c / w_c^2), is least (Cauchy-Schwarz) with
// w_c = (Q_c / K_c)^(1/4): weighting by the queries alone (sqrt(Q_c)) is
// worse than none where large queries meet large keys, as RoPE's
// slow-turning channels do. Each K unit's weights are normalized to a
// geometric mean of 1 and clamped to [1/16, 16]; a key energy of 0 counts
// as the unit's least positive one, a query energy of 0 likewise.
// InvalidArgument for sizes other than layers x heads x dim or an energy
// that is negative or not finite.
absl::StatusOr<std::vector<float>> FitKChannelWeights(absl::Span<const double> query_energy,
                                                      absl::Span<const double> key_energy,
                                                      int layers, int heads, int dim);

// The scales of per-layer sensitivities (each: the mean KL divergence with
// only that layer's K, or V, coded at probe levels; everything else
// exact). Coding error at a step s costs about sensitivity x s^2 and
// log2(1/s) bits a value, so the error at a fixed number of bits is least
// with levels in proportion to sqrt(sensitivity): each layer's scale is
// that over its kind's geometric mean (the bits stay about the same),
// clamped to [1/8, 8]. A sensitivity of 0 counts as the least positive
// one. InvalidArgument for lists of different or zero length, or a value
// that is negative or not finite.
absl::StatusOr<AcLayerTuning> FitAcTuning(absl::Span<const double> k_sensitivity,
                                          absl::Span<const double> v_sensitivity);

// The file's text, `comment` (lines) at the top.
std::string FormatAcTuning(const AcLayerTuning& tuning, std::string_view comment);
// InvalidArgument naming the line for anything else than the format above.
absl::StatusOr<AcLayerTuning> ParseAcTuning(std::string_view text);
// ParseAcTuning of a file's contents; NotFound for a file that cannot be read.
absl::StatusOr<AcLayerTuning> ReadAcTuning(const std::string& path);

// `policy` with the tuning's per-layer K scales. The V scales are the
// file's record of V's sensitivity, not applied: with them, product-mode
// perplexity measured worse at both shipped points (docs/kv-quality.md).
AcPolicy Tuned(const AcPolicy& policy, const AcLayerTuning& tuning);
// `policy` with the tuning's K channel weights (none if it has none).
AcPolicy WithChannelWeights(const AcPolicy& policy, const AcLayerTuning& tuning);
// InvalidArgument unless the tuning is of a model of this shape: its
// layers, and its K channel weights' heads and channels (if it has any).
absl::Status CheckTuningShape(const AcLayerTuning& tuning, int layers, int kv_heads, int head_dim);

}  // namespace kvcast::kvcache::ac

#endif  // KVCAST_TRANSPORT_KVCACHE_AC_AC_TUNING_H_
