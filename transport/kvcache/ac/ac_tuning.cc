#include "transport/kvcache/ac/ac_tuning.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace kvcast::kvcache::ac {
namespace {

absl::StatusOr<std::vector<float>> Scales(absl::Span<const double> s, const char* kind) {
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
    out.push_back(float(std::clamp(scale, 0.125, 8.0)));
  }
  return out;
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
  auto k = Scales(k_sensitivity, "K");
  if (!k.ok()) return k.status();
  auto v = Scales(v_sensitivity, "V");
  if (!v.ok()) return v.status();
  t.k = *std::move(k);
  t.v = *std::move(v);
  return t;
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
  return out;
}

absl::StatusOr<AcLayerTuning> ParseAcTuning(std::string_view text) {
  AcLayerTuning t;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(absl::string_view(text.data(), text.size()), '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    const std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipWhitespace());
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

}  // namespace kvcast::kvcache::ac
