// The cross-layer transform tracks: see xl_codec.h.
#include "transport/kvcache/xl/xl_codec.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "transport/kvcache/ac/internal/encode_kernels.h"
#include "transport/kvcache/ac/internal/unit_kernels.h"
#include "transport/kvcache/ac/rans.h"

namespace kvcast::kvcache::xl {
namespace {

using ac::kLanes;
using ac::kMaxSymbols;
using ac::kProbScale;
using ac::kStateLow;
using ac::internal::GetVarint;
using ac::internal::PutVarint;
using ac::internal::UnZigZag;
using ac::internal::ZigZag;

constexpr int kTables = 2 * kClasses;
constexpr uint32_t kEscape = kMaxSymbols - 1;
constexpr int32_t kMaxCode = 1 << 24;
constexpr uint32_t kMaxEscape = 1u << 26;
constexpr uint8_t kFlagSink = 1;
// version, flags, T, L, H, D, G, basis id, K step, V step
constexpr size_t kHeaderBytes = 1 + 1 + 2 + 4 * 2 + 8 + 4 + 4;

// Token rows <-> one block's vectors: block (first layer, layers, kind) of
// token t is `layers` rows of H D values.
void GatherBlock(const KvBasis::Block& b, int kind, int row, size_t token, const float* kv,
                 int t, float* dst) {
  for (int l = 0; l < b.layers; ++l) {
    std::memcpy(dst + l * row, kv + t * token + size_t(b.first_layer + l) * 2 * row + kind * row,
                row * sizeof(float));
  }
}
void ScatterBlock(const KvBasis::Block& b, int kind, int row, size_t token, const float* src,
                  int t, float* kv) {
  for (int l = 0; l < b.layers; ++l) {
    std::memcpy(kv + t * token + size_t(b.first_layer + l) * 2 * row + kind * row, src + l * row,
                row * sizeof(float));
  }
}

template <typename T>
void Put(std::vector<uint8_t>* out, T v) {
  const size_t at = out->size();
  out->resize(at + sizeof(T));
  std::memcpy(out->data() + at, &v, sizeof(T));
}

}  // namespace

XlPlan PlanOf(const KvBasis& basis, float k_step, float v_step) {
  XlPlan plan;
  for (int g = 0; g < basis.num_groups(); ++g) {
    for (int kind = 0; kind < 2; ++kind) {
      const KvBasis::Block& b = basis.block(g, kind);
      const double s = kind == 0 ? k_step : v_step;
      int k = 0;
      for (; k < b.dim && double(b.variance[k]) >= s * s / 12; ++k) {
        const double c = std::floor(4 * std::log2(std::sqrt(double(b.variance[k])) / s)) + 8;
        plan.tables.push_back(uint8_t(kind * kClasses + std::clamp(c, 0.0, double(kClasses - 1))));
      }
      plan.kept.push_back(k);
      plan.total_kept += k;
    }
  }
  return plan;
}

std::pair<float, float> StepsOf(const KvBasis& basis, const XlPoint& point) {
  if (!point.relative) return {point.k_step, point.v_step};
  double sum[2] = {0, 0}, dims[2] = {0, 0};
  for (int g = 0; g < basis.num_groups(); ++g) {
    for (int kind = 0; kind < 2; ++kind) {
      for (float v : basis.block(g, kind).variance) sum[kind] += v;
      dims[kind] += basis.block(g, kind).dim;
    }
  }
  return {float(point.k_step * std::sqrt(sum[0] / dims[0])),
          float(point.v_step * std::sqrt(sum[1] / dims[1]))};
}

XlGroupEncoder::XlGroupEncoder(std::shared_ptr<const KvBasis> basis, const XlPoint& point)
    : basis_(std::move(basis)),
      k_step_(StepsOf(*basis_, point).first),
      v_step_(StepsOf(*basis_, point).second),
      plan_(PlanOf(*basis_, k_step_, v_step_)) {}

void XlGroupEncoder::Encode(const float* kv, int tokens,
                            std::vector<std::vector<uint8_t>>* objects, bool starts_sequence) {
  const AcShape& shape = basis_->shape();
  const int row = shape.num_kv_heads * shape.head_dim;
  const size_t token = shape.token_floats();
  const int total = plan_.total_kept;
  const int first = starts_sequence ? 1 : 0;  // tokens before it travel as fp16
  codes_.assign(size_t(tokens) * total, 0);

  // Coefficients and codes, block by block.
  int col = 0;
  for (int g = 0; g < basis_->num_groups(); ++g) {
    for (int kind = 0; kind < 2; ++kind) {
      const KvBasis::Block& b = basis_->block(g, kind);
      const int k = plan_.kept[2 * g + kind];
      if (k == 0) continue;
      x_.resize(size_t(tokens) * b.dim);
      for (int t = 0; t < tokens; ++t) {
        float* x = x_.data() + size_t(t) * b.dim;
        GatherBlock(b, kind, row, token, kv, t, x);
        for (int i = 0; i < b.dim; ++i) x[i] -= b.mean[i];
      }
      coef_.resize(size_t(tokens) * k);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, tokens, k, b.dim, 1.f, x_.data(),
                  b.dim, b.axes.data(), b.dim, 0.f, coef_.data(), k);
      const float inv = 1.f / (kind == 0 ? k_step_ : v_step_);
      for (int t = first; t < tokens; ++t) {
        for (int i = 0; i < k; ++i) {
          const float q = std::nearbyint(coef_[size_t(t) * k + i] * inv);
          // Non-finite KV (a model's bug) is not represented: code 0.
          codes_[size_t(t) * total + col + i] =
              std::isfinite(q) ? int32_t(std::clamp(q, float(-kMaxCode), float(kMaxCode))) : 0;
        }
      }
      col += k;
    }
  }

  // One table per (kind, class), from this group's symbols.
  const std::vector<uint8_t>& table = plan_.tables;
  std::vector<uint32_t> counts(size_t(kTables) * kMaxSymbols, 0);
  for (int t = first; t < tokens; ++t) {
    const int32_t* q = codes_.data() + size_t(t) * total;
    for (int j = 0; j < total; ++j) {
      counts[table[j] * kMaxSymbols + std::min(ZigZag(q[j]), kEscape)]++;
    }
  }
  std::vector<uint32_t> fc(size_t(kTables) * kMaxSymbols);
  std::vector<double> rcp(size_t(kTables) * kMaxSymbols);
  std::vector<uint8_t> header;
  header.push_back(kFormatVersion);
  header.push_back(starts_sequence ? kFlagSink : 0);
  Put<uint16_t>(&header, uint16_t(tokens));
  for (int v : {shape.num_layers, shape.num_kv_heads, shape.head_dim, basis_->group_layers()}) {
    Put<uint16_t>(&header, uint16_t(v));
  }
  Put<uint64_t>(&header, basis_->id());
  Put<float>(&header, k_step_);
  Put<float>(&header, v_step_);
  uint8_t buf[8];
  for (int tab = 0; tab < kTables; ++tab) {
    const uint32_t* c = counts.data() + size_t(tab) * kMaxSymbols;
    int n = kMaxSymbols;
    while (n > 0 && c[n - 1] == 0) --n;
    header.insert(header.end(), buf, PutVarint(uint32_t(n), buf));
    if (n == 0) continue;
    const std::vector<uint16_t> freqs = ac::NormalizeFrequencies(absl::MakeConstSpan(c, n));
    for (uint16_t f : freqs) header.insert(header.end(), buf, PutVarint(f, buf));
    ac::BuildEncodeTable(freqs, fc.data() + size_t(tab) * kMaxSymbols,
                         rcp.data() + size_t(tab) * kMaxSymbols);
  }

  objects->resize(tokens);
  std::vector<uint8_t> words(2 * size_t(total) + 2);
  for (int t = 0; t < tokens; ++t) {
    std::vector<uint8_t>& out = (*objects)[t];
    out.clear();
    if (t == 0) out = header;
    if (t < first) {
      for (size_t i = 0; i < token; ++i) Put<uint16_t>(&out, FloatToHalf(kv[t * token + i]));
      continue;
    }
    const int32_t* q = codes_.data() + size_t(t) * total;
    uint32_t state[kLanes];
    std::fill(state, state + kLanes, kStateLow);
    uint8_t* end = words.data() + words.size();
    uint8_t* w = end;
    for (int j = total - 1; j >= 0; --j) {
      const size_t e = size_t(table[j]) * kMaxSymbols + std::min(ZigZag(q[j]), kEscape);
      ac::RansEncode(&state[j % kLanes], fc[e], rcp[e], &w);
    }
    for (uint32_t s : state) Put<uint32_t>(&out, s);
    out.insert(out.end(), buf, PutVarint(uint32_t((end - w) / 2), buf));
    out.insert(out.end(), w, end);
    for (int j = 0; j < total; ++j) {
      const uint32_t z = ZigZag(q[j]);
      if (z >= kEscape) out.insert(out.end(), buf, PutVarint(z - kEscape, buf));
    }
  }
}

XlGroupDecoder::XlGroupDecoder(std::shared_ptr<const KvBasis> basis) : basis_(std::move(basis)) {}

absl::Status XlGroupDecoder::DecodeGroup(absl::Span<const absl::Span<const uint8_t>> objects,
                                         float* out) {
  const AcShape& shape = basis_->shape();
  if (objects.empty() || objects[0].size() < kHeaderBytes) {
    return absl::DataLossError("xl: a group without its header");
  }
  const uint8_t* p = objects[0].data();
  const uint8_t* const end0 = p + objects[0].size();
  uint16_t dims[5];  // T, L, H, D, G
  uint64_t id;
  float steps[2];
  std::memcpy(dims, p + 2, sizeof(dims));
  std::memcpy(&id, p + 12, 8);
  std::memcpy(steps, p + 20, 8);
  const uint8_t version = p[0], flags = p[1];
  const int tokens = dims[0];
  if (version != kFormatVersion || (flags & ~kFlagSink) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("xl: version ", version, ", flags ", flags, " (this decoder reads 1, 0-1)"));
  }
  if (dims[1] != shape.num_layers || dims[2] != shape.num_kv_heads ||
      dims[3] != shape.head_dim || dims[4] != basis_->group_layers() || id != basis_->id()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "xl: a group of shape ", dims[1], "x", dims[2], "x", dims[3], " in groups of ", dims[4],
        " layers, basis ", id, "; this decoder holds ", shape.num_layers, "x",
        shape.num_kv_heads, "x", shape.head_dim, ", ", basis_->group_layers(), ", basis ",
        basis_->id()));
  }
  if (tokens < 1 || size_t(tokens) != objects.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("xl: a header of ", tokens, " tokens with ", objects.size(), " objects"));
  }
  if (!(steps[0] > 0 && steps[1] > 0 && std::isfinite(steps[0]) && std::isfinite(steps[1]))) {
    return absl::DataLossError(absl::StrCat("xl: steps ", steps[0], ", ", steps[1]));
  }
  if (steps[0] != k_step_ || steps[1] != v_step_) {
    plan_ = PlanOf(*basis_, steps[0], steps[1]);
    k_step_ = steps[0];
    v_step_ = steps[1];
  }
  p += kHeaderBytes;

  // Tables.
  slots_.resize(size_t(kTables) * kProbScale);
  bool used[kTables];
  std::vector<uint16_t> freqs;
  for (int tab = 0; tab < kTables; ++tab) {
    uint32_t n;
    if (!GetVarint(&p, end0, &n) || n > uint32_t(kMaxSymbols)) {
      return absl::DataLossError(absl::StrCat("xl: table ", tab, " unreadable"));
    }
    used[tab] = n > 0;
    if (n == 0) continue;
    freqs.resize(n);
    for (uint32_t s = 0; s < n; ++s) {
      uint32_t f;
      if (!GetVarint(&p, end0, &f) || f > kProbScale) {
        return absl::DataLossError(absl::StrCat("xl: table ", tab, " unreadable"));
      }
      freqs[s] = uint16_t(f);
    }
    if (!ac::BuildDecodeTable(freqs, slots_.data() + size_t(tab) * kProbScale)) {
      return absl::DataLossError(absl::StrCat("xl: table ", tab, " does not sum to 4096"));
    }
  }

  // Codes, token by token.
  const int total = plan_.total_kept;
  const size_t token = shape.token_floats();
  const int first = (flags & kFlagSink) ? 1 : 0;
  const std::vector<uint8_t>& table = plan_.tables;
  codes_.assign(size_t(tokens) * total, 0);
  x_.assign(size_t(tokens) * token, 0.f);
  for (int t = 0; t < tokens; ++t) {
    const uint8_t* q = t == 0 ? p : objects[t].data();
    const uint8_t* const end = objects[t].data() + objects[t].size();
    if (t < first) {
      if (size_t(end - q) != token * 2) {
        return absl::DataLossError(absl::StrCat("xl: the sink's ", end - q, " bytes, not ",
                                                token * 2));
      }
      for (size_t i = 0; i < token; ++i) {
        uint16_t h;
        std::memcpy(&h, q + 2 * i, 2);
        x_[i] = HalfToFloat(h);
      }
      continue;
    }
    uint32_t state[kLanes];
    uint32_t nwords;
    if (end - q < 4 * kLanes) return absl::DataLossError(absl::StrCat("xl: token ", t, " truncated"));
    std::memcpy(state, q, sizeof(state));
    q += sizeof(state);
    if (!GetVarint(&q, end, &nwords) || uint64_t(end - q) < 2 * uint64_t(nwords)) {
      return absl::DataLossError(absl::StrCat("xl: token ", t, " truncated"));
    }
    for (uint32_t s : state) {
      if (s < kStateLow) return absl::DataLossError(absl::StrCat("xl: token ", t, ": bad state"));
    }
    const uint8_t* in = q;
    const uint8_t* const words_end = q + 2 * size_t(nwords);
    const uint8_t* esc = words_end;
    bool overrun = false;
    int32_t* codes = codes_.data() + size_t(t) * total;
    for (int j = 0; j < total; ++j) {
      if (!used[table[j]]) {
        return absl::DataLossError(absl::StrCat("xl: token ", t, " uses table ", int(table[j]),
                                                ", which the header leaves out"));
      }
      uint32_t z = ac::RansDecode(&state[j % kLanes], slots_.data() + size_t(table[j]) * kProbScale,
                                  &in, words_end, &overrun);
      if (z == kEscape) {
        uint32_t extra;
        if (!GetVarint(&esc, end, &extra) || extra > kMaxEscape) {
          return absl::DataLossError(absl::StrCat("xl: token ", t, ": bad escape"));
        }
        z += extra;
      }
      codes[j] = UnZigZag(z);
      if (std::abs(int64_t(codes[j])) > kMaxCode) {
        return absl::DataLossError(absl::StrCat("xl: token ", t, ": a code beyond 2^24"));
      }
    }
    if (overrun || in != words_end || esc != end ||
        std::any_of(state, state + kLanes, [](uint32_t s) { return s != kStateLow; })) {
      return absl::DataLossError(absl::StrCat("xl: token ", t, " does not decode exactly"));
    }
  }

  // Values: mean + coefficients x axes, block by block.
  const int row = shape.num_kv_heads * shape.head_dim;
  const int coded = tokens - first;
  int col = 0;
  for (int g = 0; g < basis_->num_groups() && coded > 0; ++g) {
    for (int kind = 0; kind < 2; ++kind) {
      const KvBasis::Block& b = basis_->block(g, kind);
      const int k = plan_.kept[2 * g + kind];
      const float s = kind == 0 ? k_step_ : v_step_;
      block_.assign(size_t(coded) * b.dim, 0.f);
      if (k > 0) {
        coef_.resize(size_t(coded) * k);
        for (int t = 0; t < coded; ++t) {
          for (int i = 0; i < k; ++i) {
            coef_[size_t(t) * k + i] = float(codes_[size_t(t + first) * total + col + i]) * s;
          }
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, coded, b.dim, k, 1.f, coef_.data(),
                    k, b.axes.data(), b.dim, 0.f, block_.data(), b.dim);
      }
      for (int t = 0; t < coded; ++t) {
        float* x = block_.data() + size_t(t) * b.dim;
        for (int i = 0; i < b.dim; ++i) x[i] += b.mean[i];
        ScatterBlock(b, kind, row, token, x, t + first, x_.data());
      }
      col += k;
    }
  }
  std::memcpy(out, x_.data(), x_.size() * sizeof(float));
  return absl::OkStatus();
}

}  // namespace kvcast::kvcache::xl
