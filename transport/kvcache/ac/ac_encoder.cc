// The ac tracks' encoder: see ac_codec.h and docs/kvcache-wire-format.md.
//
// A group is coded unit by unit from the last (rANS codes backwards, so
// each token's word stream grows down from its end), every pass over one
// unit of every token while that unit's floats, codes and symbols are in
// cache: steps (a chunk of units at a time, so that each token's floats
// are read from memory in runs of a few KiB), codes and mode costs, modes,
// symbols and their counts, tables, rANS. Only then the group header,
// which needs every unit's choices, and each token's section.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "transport/kvcache/ac/ac_codec.h"

#include "common/dtype.h"
#include "kernels/hadamard.h"
#include "transport/kvcache/ac/internal/encode_kernels.h"
#include "transport/kvcache/ac/internal/unit_kernels.h"

namespace kvcast::kvcache::ac {
namespace {

using internal::kInversePowersOfTwo;
using internal::kMaxShift;

// Floats per token of the units whose steps are chosen together: their
// values for every token (128 tokens: 512 KiB) stay in L2 until coded.
constexpr int kChunkFloats = 512;

// The smallest unit step the encoder uses (see ChooseSteps).
constexpr float kMinStep = 0x1p-100f;

// `wanted`, at most what keeps codes of a token at that much finer steps
// within 16 bits (|q| <= levels 2^shift <= 32767).
int SinkShift(int wanted, float levels) {
  int s = 0;
  while (s < wanted && levels * float(1 << (s + 1)) <= 32767.f) ++s;
  return s;
}

// The header and token sections are written through a pointer into a
// vector sized for the most they can take, then cut to what was written
// (a push_back a byte was a visible cost).
using internal::PutVarint;

template <typename T>
uint8_t* PutLe(T v, uint8_t* p) {
  std::memcpy(p, &v, sizeof(T));
  return p + sizeof(T);
}

// The kernel for the values' type.
float AbsMax(const internal::EncoderKernels& k, const float* x, int d) { return k.abs_max(x, d); }
float AbsMax(const internal::EncoderKernels& k, const uint16_t* x, int d) {
  return k.abs_max_half(x, d);
}
template <typename... Args>
void Quantize(const internal::EncoderKernels& k, const float* x, Args... args) {
  k.quantize(x, args...);
}
template <typename... Args>
void Quantize(const internal::EncoderKernels& k, const uint16_t* x, Args... args) {
  k.quantize_half(x, args...);
}

// The policy as this shape takes it: heads that cannot rotate are coded as
// they are.
AcPolicy ForShape(const AcPolicy& policy, const AcShape& shape) {
  AcPolicy p = policy;
  p.rotate = p.rotate && HadamardDim(shape.head_dim);
  return p;
}

}  // namespace

AcGroupEncoder::AcGroupEncoder(const AcShape& shape, const AcPolicy& policy)
    : shape_(shape), policy_(ForShape(policy, shape)), kernels_(internal::SelectEncoderKernels()) {
  const int units = shape.num_units(), d = shape.head_dim;
  steps_.resize(units);
  masks_.resize(size_t(units) * d / 16);
  for (int m = 0; m < 2; ++m) {
    freqs_[m].resize(size_t(units) * kMaxSymbols);
    nsym_[m].resize(units);
  }
  if (policy_.rotate && !policy_.k_channel_weights.empty()) {  // transform 2
    const size_t k_units = size_t(shape.num_layers) * shape.num_kv_heads;
    weight_codes_.resize(k_units * d);
    weights_.resize(k_units * d);
    for (size_t i = 0; i < weights_.size(); ++i) {
      const float w = i < policy_.k_channel_weights.size() ? policy_.k_channel_weights[i] : 1.f;
      weight_codes_[i] = AcChannelWeightCode(w);
      weights_[i] = AcChannelWeight(weight_codes_[i]);
    }
  }
  raw_cost_.resize(d);
  delta_cost_.resize(d);
  counts_.resize(2 * kMaxSymbols);
  fc_.resize(2 * kMaxSymbols);
  rcp_.resize(2 * kMaxSymbols);
}

template <typename T>
void AcGroupEncoder::ChooseSteps(const T* kv, int tokens, int lo, int hi,
                                 bool starts_sequence) {
  const int d = shape_.head_dim, units = shape_.num_units(), n = shape_.token_floats();
  const int m = hi - lo;
  tok_amax_.resize(size_t(tokens) * m);
  float amax[kChunkFloats / 16];
  bool bad[kChunkFloats / 16];
  std::fill(amax, amax + m, 0.f);
  std::fill(bad, bad + m, false);
  for (int t = 0; t < tokens; ++t) {
    const T* x = kv + size_t(t) * n + size_t(lo) * d;
    for (int k = 0; k < m; ++k) {
      const float a = AbsMax(kernels_, x + k * d, d);
      bad[k] |= std::isnan(a);
      tok_amax_[size_t(t) * m + k] = a;
      if (!std::isnan(a)) amax[k] = std::max(amax[k], a);
    }
  }
  const int per_layer = 2 * shape_.num_kv_heads;
  for (int k = 0; k < m; ++k) {
    const int u = lo + k;
    const bool is_v = (u / shape_.num_kv_heads) % 2 == 1;
    const float levels = policy_.LevelsOf(u / per_layer, is_v);
    // A unit below 2^-100 per level is negligible and codes as zeros (step
    // 0): its token steps could be subnormal, without a finite reciprocal.
    const bool negligible = amax[k] < levels * kMinStep;
    steps_[u] = bad[k] ? std::numeric_limits<float>::quiet_NaN() : negligible ? 0.f : amax[k] / levels;
    if (bad[k] || negligible) continue;
    // A token whose largest value is 2^k times smaller than the group's
    // gets a step 2^k times finer (the attention sink's small V, say).
    for (int t = 0; t < tokens; ++t) {
      const float a = tok_amax_[size_t(t) * m + k];
      // floor(log2(ratio)), ratio >= 1: its exponent (a float's bits,
      // not frexp, a call per token and unit); infinite ratios take the
      // finest step, as zero tokens do.
      int e = kMaxShift;
      if (a > 0) {
        const float ratio = amax[k] / a;
        uint32_t bits;
        std::memcpy(&bits, &ratio, sizeof(bits));
        e = int(bits >> 23) - 127;
      }
      if (t == 0 && starts_sequence) e = std::max(e, 0) + SinkShift(policy_.sink_shift, levels);
      shifts_[size_t(t) * units + u] = uint8_t(std::clamp(e, 0, kMaxShift));
    }
  }
}

template <typename T>
void AcGroupEncoder::EncodeUnit(const T* kv, int tokens, int u, internal::LinePrefetch* next) {
  const int d = shape_.head_dim, units = shape_.num_units(), n = shape_.token_floats();
  for (int t = 0; t < tokens; ++t) same_[t] = SameShift(t, u);
  // Codes, and per channel the sums of |residual| of raw and delta mode
  // over the continued tokens.
  std::fill(raw_cost_.begin(), raw_cost_.end(), 0);
  std::fill(delta_cost_.begin(), delta_cost_.end(), 0);
  const float step = steps_[u];
  if (!(step > 0)) {  // 0, or NaN (non-finite input): every code 0
    std::fill(codes_.begin(), codes_.end(), 0);
  } else {
    for (int t = 0; t < tokens; ++t) {
      // step >= 2^-100 (ChooseSteps), so the token step is >= 2^-115: a
      // normal float with a finite reciprocal.
      inv_[t] = 1.f / (step * kInversePowersOfTwo[shifts_[size_t(t) * units + u]]);
    }
    Quantize(kernels_, kv + size_t(u) * d, size_t(n), inv_.data(), same_.data(), tokens, d,
             codes_.data(), raw_cost_.data(), delta_cost_.data());
  }
  // Mode per channel: the smaller sum.
  uint16_t* mask = masks_.data() + size_t(u) * d / 16;
  for (int c = 0; c < d; ++c) {
    if (c % 16 == 0) mask[c / 16] = 0;
    mask[c / 16] |= uint16_t(delta_cost_[c] < raw_cost_[c]) << (c % 16);
  }
  std::fill(counts_.begin(), counts_.end(), 0);
  kernels_.symbolize(codes_.data(), same_.data(), mask, tokens, d, symbols_.data(), counts_.data(),
                     streams_.data());
  ChooseTables(u);
  kernels_.encode(streams_.data(), symbols_.data(), tokens, d, fc_.data(), rcp_.data(), next);
}

void AcGroupEncoder::ChooseTables(int u) {
  for (int m = 0; m < 2; ++m) {
    const uint32_t* counts = counts_.data() + m * kMaxSymbols;
    int nsym = kMaxSymbols;
    while (nsym > 0 && counts[nsym - 1] == 0) --nsym;
    nsym_[m][u] = nsym;
    if (nsym == 0) continue;
    uint16_t* f = freqs_[m].data() + size_t(u) * kMaxSymbols;
    kernels_.normalize(counts, nsym, f);
    BuildEncodeTable(absl::MakeConstSpan(f, nsym), &fc_[m * kMaxSymbols], &rcp_[m * kMaxSymbols]);
  }
}

void AcGroupEncoder::AppendHeader(int tokens, std::vector<uint8_t>* out) const {
  const int d = shape_.head_dim, units = shape_.num_units();
  size_t most = 12 + weight_codes_.size();
  for (int u = 0; u < units; ++u) {  // varints of table sizes and frequencies: <= 4096, 2 bytes
    most += 4 + d / 8 + 2 * (2 + nsym_[0][u] + nsym_[1][u]);
  }
  const size_t start = out->size();
  out->resize(start + most);
  uint8_t* p = out->data() + start;
  *p++ = policy_.rotate ? kTransformedFormatVersion : kFormatVersion;
  *p++ = !policy_.rotate           ? kTransformNone
         : weight_codes_.empty() ? kTransformHadamard
                                 : kTransformWeightedHadamard;
  p = PutLe<uint16_t>(tokens, p);
  p = PutLe<uint16_t>(shape_.num_layers, p);
  p = PutLe<uint16_t>(shape_.num_kv_heads, p);
  p = PutLe<uint16_t>(shape_.head_dim, p);
  if (!weight_codes_.empty()) p = std::copy(weight_codes_.begin(), weight_codes_.end(), p);
  for (int u = 0; u < units; ++u) {
    p = PutLe<float>(steps_[u], p);
    for (int b = 0; b < d / 16; ++b) p = PutLe<uint16_t>(masks_[size_t(u) * d / 16 + b], p);
    for (int m = 0; m < 2; ++m) {
      p = PutVarint(nsym_[m][u], p);
      p = kernels_.put_varints(freqs_[m].data() + size_t(u) * kMaxSymbols, nsym_[m][u], p);
    }
  }
  out->resize(p - out->data());
}

template <typename T>
void AcGroupEncoder::Rotate(const T* kv, int tokens) {
  const size_t d = shape_.head_dim, n = size_t(tokens) * shape_.token_floats();
  const size_t units = shape_.num_units(), heads = shape_.num_kv_heads;
  rotated_.resize(n);
  for (size_t i = 0, u = 0; i < n; i += d, u = u + 1 == units ? 0 : u + 1) {  // a head at a time, in cache
    float* x = &rotated_[i];
    if constexpr (std::is_same_v<T, float>) {
      std::memcpy(x, kv + i, d * sizeof(float));
    } else {
      kernels_.widen_half(kv + i, d, x);
    }
    if (!weights_.empty() && (u / heads) % 2 == 0) {  // a K unit: weighted (transform 2)
      const float* w = &weights_[((u / (2 * heads)) * heads + u % heads) * d];
      for (size_t c = 0; c < d; ++c) x[c] *= w[c];
    }
    RotateHead(x, int(d));
  }
}

void AcGroupEncoder::Encode(const float* kv, int tokens,
                            std::vector<std::vector<uint8_t>>* objects, bool starts_sequence) {
  if (policy_.rotate) {
    Rotate(kv, tokens);
    kv = rotated_.data();
  }
  EncodeValues(kv, tokens, objects, starts_sequence);
}

void AcGroupEncoder::EncodeHalf(const uint16_t* kv, int tokens,
                                std::vector<std::vector<uint8_t>>* objects, bool starts_sequence) {
  if (policy_.rotate) {  // rotated as floats
    Rotate(kv, tokens);
    EncodeValues(rotated_.data(), tokens, objects, starts_sequence);
    return;
  }
  EncodeValues(kv, tokens, objects, starts_sequence);
}

template <typename T>
void AcGroupEncoder::EncodeValues(const T* kv, int tokens,
                                  std::vector<std::vector<uint8_t>>* objects,
                                  bool starts_sequence) {
  const int d = shape_.head_dim, units = shape_.num_units(), n = shape_.token_floats();
  // Every token is its own rANS stream, at most 2 bytes a value, with
  // room below for a SIMD kernel's whole-register stores.
  const size_t stream_bytes = size_t(n) * 2 + internal::kStreamSlack;
  words_.resize(stream_bytes * tokens);
  if (streams_.size() < size_t(tokens)) streams_.resize(tokens);
  for (int t = 0; t < tokens; ++t) {
    std::fill(streams_[t].state, streams_[t].state + kLanes, kStateLow);
    streams_[t].w = words_.data() + stream_bytes * (t + 1);
    streams_[t].escapes.clear();
  }
  shifts_.assign(size_t(tokens) * units, 0);
  inv_.resize(tokens);
  same_.resize(tokens);
  codes_.resize(size_t(tokens) * d);
  symbols_.resize(size_t(tokens) * d);
  const int chunk = std::clamp(kChunkFloats / d, 1, units);
  for (int hi = units; hi > 0; hi -= chunk) {
    const int lo = std::max(0, hi - chunk);
    ChooseSteps(kv, tokens, lo, hi, starts_sequence);
    // While this chunk is coded, its rANS kernels prefetch the next one's
    // floats, each unit an equal share.
    const int next_lo = std::max(0, lo - chunk);
    internal::LinePrefetch next;
    next.run = reinterpret_cast<const char*>(kv + size_t(next_lo) * d);
    next.stride = size_t(n) * sizeof(T);
    next.run_lines = uint32_t((lo - next_lo) * d * sizeof(T) / 64);
    const size_t lines = size_t(next.run_lines) * tokens;
    for (int u = hi - 1; u >= lo; --u) {
      const int i = hi - 1 - u;
      next.left = lines * (i + 1) / (hi - lo) - lines * i / (hi - lo);
      EncodeUnit(kv, tokens, u, &next);
    }
  }

  objects->resize(tokens);
  for (auto& o : *objects) o.clear();
  AppendHeader(tokens, &(*objects)[0]);
  for (int t = 0; t < tokens; ++t) {
    internal::EncodeStream& st = streams_[t];
    std::vector<uint8_t>& out = (*objects)[t];
    const uint8_t* const end = words_.data() + stream_bytes * (t + 1);
    out.reserve(out.size() + units + 4 * kLanes + 5 + (end - st.w) + 5 * st.escapes.size());
    size_t start = out.size();
    out.resize(start + units + 4 * kLanes + 5);
    uint8_t* p = out.data() + start;
    std::memcpy(p, shifts_.data() + size_t(t) * units, units);
    p += units;
    for (uint32_t x : st.state) p = PutLe<uint32_t>(x, p);
    p = PutVarint(uint32_t((end - st.w) / 2), p);
    out.resize(p - out.data());
    // The words by insert, not resize and copy: resize would first zero
    // them (2-3% of encode time on SmolLM2's shape).
    out.insert(out.end(), static_cast<const uint8_t*>(st.w), end);
    start = out.size();
    out.resize(start + 5 * st.escapes.size());
    p = out.data() + start;
    p = kernels_.put_escapes(st.escapes.data(), st.escapes.size(), p);
    out.resize(p - out.data());
  }
}

}  // namespace kvcast::kvcache::ac
