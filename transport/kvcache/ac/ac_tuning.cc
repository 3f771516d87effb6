#include "transport/kvcache/ac/ac_tuning.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace kvcast::kvcache::ac {
namespace {

// sqrt(s) over its geometric mean, clamped to [1 / bound, bound].
absl::StatusOr<std::vector<float>> Scales(absl::Span<const double> s, const char* kind,
                                          double bound) {
  double least = 0;
  for (double x : s) {
    if (!(x >= 0) || !std::isfinite(x)) {
      return absl::InvalidArgumentError(
          absl::StrCat("a ", kind, " sensitivity of ", x, ": sensitivities are finite and >= 0"));
    }
    if (x > 0 && (least == 0 || x < least)) least = x;
  }
  if (least == 0) least = 1;  // all zero: every layer alike
  double log_mean = 0;
  for (double x : s) log_mean += 0.5 * std::log(std::max(x, least));
  log_mean /= double(s.size());
  std::vector<float> out;
  for (double x : s) {
    const double scale = std::exp(0.5 * std::log(std::max(x, least)) - log_mean);
    out.push_back(float(std::clamp(scale, 1 / bound, bound)));
  }
  return out;
}

// One "k LAYER HEAD W_0 .. W_{D-1}" line: the weights appended to
// t->k_channel (the first line sets head_dim), its head to *heads.
absl::Status ParseChannelLine(const std::vector<absl::string_view>& f, int line_no,
                              AcLayerTuning* t, std::vector<std::pair<int, int>>* heads) {
  const int dim = t->head_dim > 0 ? t->head_dim : int(f.size()) - 3;
  int layer = -1, head = -1;
  bool ok = dim > 0 && int(f.size()) == dim + 3 && absl::SimpleAtoi(f[1], &layer) &&
            absl::SimpleAtoi(f[2], &head);
  std::vector<float> w(size_t(std::max(dim, 0)));
  for (size_t c = 0; ok && c < w.size(); ++c) {
    ok = absl::SimpleAtof(f[c + 3], &w[c]) && w[c] > 0 && std::isfinite(w[c]);
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat("ac tuning line ", line_no,
                                                   ": expected \"k LAYER HEAD\" and ", dim,
                                                   " positive weights"));
  }
  t->head_dim = dim;
  t->k_channel.insert(t->k_channel.end(), w.begin(), w.end());
  heads->emplace_back(layer, head);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<AcLayerTuning> FitAcTuning(absl::Span<const double> k_sensitivity,
                                          absl::Span<const double> v_sensitivity) {
  if (k_sensitivity.empty() || k_sensitivity.size() != v_sensitivity.size()) {
    return absl::InvalidArgumentError(absl::StrCat("sensitivities of ", k_sensitivity.size(),
                                                   " K and ", v_sensitivity.size(),
                                                   " V layers: one of each per layer"));
  }
  AcLayerTuning t;
  auto k = Scales(k_sensitivity, "K", 8);
  if (!k.ok()) return k.status();
  auto v = Scales(v_sensitivity, "V", 8);
  if (!v.ok()) return v.status();
  t.k = *std::move(k);
  t.v = *std::move(v);
  return t;
}

absl::StatusOr<std::vector<float>> FitKChannelWeights(absl::Span<const double> query_energy,
                                                      absl::Span<const double> key_energy,
                                                      int layers, int heads, int dim) {
  const size_t n = size_t(std::max(layers, 0)) * std::max(heads, 0) * std::max(dim, 0);
  if (n == 0 || query_energy.size() != n || key_energy.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "energies of ", query_energy.size(), " query and ", key_energy.size(), " key channels; ",
        layers, " layers x ", heads, " KV heads x ", dim, " expected"));
  }
  std::vector<float> out;
  for (size_t unit = 0; unit * dim < n; ++unit) {
    const auto q = query_energy.subspan(unit * dim, dim), k = key_energy.subspan(unit * dim, dim);
    double least_q = 0, least_k = 0;
    for (size_t c = 0; c < size_t(dim); ++c) {
      for (auto [x, least] : {std::pair{q[c], &least_q}, std::pair{k[c], &least_k}}) {
        if (!(x >= 0) || !std::isfinite(x)) {
          return absl::InvalidArgumentError(absl::StrCat("an energy of ", x, ": energies are finite and >= 0"));
        }
        if (x > 0 && (*least == 0 || x < *least)) *least = x;
      }
    }
    // Scales takes a square root: sqrt(Q / K) gives (Q / K)^(1/4).
    std::vector<double> ratio(dim);
    for (size_t c = 0; c < size_t(dim); ++c) {
      ratio[c] = std::sqrt(std::max(q[c], least_q > 0 ? least_q : 1) /
                           std::max(k[c], least_k > 0 ? least_k : 1));
    }
    auto weights = Scales(ratio, "energy ratio", 16);
    if (!weights.ok()) return weights.status();
    out.insert(out.end(), weights->begin(), weights->end());
  }
  return out;
}

std::string FormatAcTuning(const AcLayerTuning& tuning, std::string_view comment) {
  std::string out;
  for (absl::string_view line :
       absl::StrSplit(absl::string_view(comment.data(), comment.size()), '\n', absl::SkipEmpty())) {
    absl::StrAppend(&out, "# ", line, "\n");
  }
  for (size_t l = 0; l < tuning.k.size(); ++l) {
    absl::StrAppend(&out, absl::StrFormat("%zu %.4f %.4f\n", l, tuning.k[l], tuning.v[l]));
  }
  const size_t dim = size_t(tuning.head_dim), heads = size_t(tuning.kv_heads);
  for (size_t unit = 0; dim > 0 && heads > 0 && unit * dim < tuning.k_channel.size(); ++unit) {
    absl::StrAppend(&out, "k ", unit / heads, " ", unit % heads);
    for (size_t c = 0; c < dim; ++c) {
      absl::StrAppend(&out, absl::StrFormat(" %.4g", tuning.k_channel[unit * dim + c]));
    }
    absl::StrAppend(&out, "\n");
  }
  return out;
}

absl::StatusOr<AcLayerTuning> ParseAcTuning(std::string_view text) {
  AcLayerTuning t;
  std::vector<std::pair<int, int>> heads;  // (layer, head) of each K channel weights line
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(absl::string_view(text.data(), text.size()), '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    const std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipWhitespace());
    if (f[0] == "k") {  // K channel weights: "k LAYER HEAD W_0 .. W_{D-1}"
      if (absl::Status s = ParseChannelLine(f, line_no, &t, &heads); !s.ok()) return s;
      continue;
    }
    if (!t.k_channel.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("ac tuning line ", line_no, ": a layer line after the K channel weights"));
    }
    int layer = -1;
    float k = 0, v = 0;
    if (f.size() != 3 || !absl::SimpleAtoi(f[0], &layer) || !absl::SimpleAtof(f[1], &k) ||
        !absl::SimpleAtof(f[2], &v) || layer != int(t.k.size()) || !(k > 0) || !(v > 0) ||
        !std::isfinite(k) || !std::isfinite(v)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ac tuning line ", line_no, " \"", line, "\": expected \"", t.k.size(),
          " K_SCALE V_SCALE\" (layers in order from 0, scales positive)"));
    }
    t.k.push_back(k);
    t.v.push_back(v);
  }
  if (t.k.empty()) return absl::InvalidArgumentError("ac tuning: no layers");
  // Weights lines: every layer's heads 0 .. H-1, layer by layer.
  t.kv_heads = int(heads.size() / std::max<size_t>(t.k.size(), 1));
  for (size_t i = 0; i < heads.size(); ++i) {
    if (t.kv_heads == 0 || heads.size() != t.k.size() * size_t(t.kv_heads) ||
        heads[i] != std::make_pair(int(i) / t.kv_heads, int(i) % t.kv_heads)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ac tuning: K channel weights lines for ", heads.size(), " heads, (layer, head) = (",
          heads[i].first, ", ", heads[i].second, ") the ", i + 1, "th; every layer's heads in order (",
          t.k.size(), " layers)"));
    }
  }
  return t;
}

absl::StatusOr<AcLayerTuning> ReadAcTuning(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("ac tuning: cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  auto t = ParseAcTuning(text.str());
  if (!t.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", t.status().message()));
  return t;
}

AcPolicy Tuned(const AcPolicy& policy, const AcLayerTuning& tuning) {
  AcPolicy p = policy;
  p.k_layer_scale = tuning.k;
  return p;
}

absl::Status CheckTuningShape(const AcLayerTuning& tuning, int layers, int kv_heads, int head_dim) {
  if (int(tuning.k.size()) != layers || int(tuning.v.size()) != layers) {
    return absl::InvalidArgumentError(absl::StrCat("an ac tuning of ", tuning.k.size(),
                                                   " layers; the model has ", layers));
  }
  if (!tuning.k_channel.empty() &&
      (tuning.kv_heads != kv_heads || tuning.head_dim != head_dim ||
       tuning.k_channel.size() != size_t(layers) * kv_heads * head_dim)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "an ac tuning's K channel weights for ", tuning.kv_heads, " KV heads of ", tuning.head_dim,
        " channels; the model has ", kv_heads, " of ", head_dim));
  }
  return absl::OkStatus();
}

AcPolicy WithChannelWeights(const AcPolicy& policy, const AcLayerTuning& tuning) {
  AcPolicy p = policy;
  p.k_channel_weights = tuning.k_channel;
  return p;
}

}  // namespace kvcast::kvcache::ac
