// The arithmetic-coded KV tracks: see ac_codec.h and
// docs/kvcache-wire-format.md.
#include "transport/kvcache/ac/ac_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "kernels/hadamard.h"
#include "transport/kvcache/ac/internal/unit_kernels.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the ac track is little-endian");

namespace kvcast::kvcache::ac {
namespace {

using internal::GetVarint;
using internal::kInversePowersOfTwo;
using internal::kMaxShift;

template <typename T>
bool GetLe(const uint8_t** p, const uint8_t* end, T* v) {
  if (end - *p < ptrdiff_t(sizeof(T))) return false;
  std::memcpy(v, *p, sizeof(T));
  *p += sizeof(T);
  return true;
}

absl::Status Corrupt(const std::string& what) {
  return absl::DataLossError(absl::StrCat("ac object: ", what));
}

}  // namespace

absl::Status ValidateShape(const AcShape& s) {
  if (s.num_layers <= 0 || s.num_kv_heads <= 0 || s.head_dim <= 0 || s.head_dim % 16 != 0 ||
      s.num_layers > 65535 || s.num_kv_heads > 65535 || s.head_dim > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the ac track needs positive layer and head counts and a head_dim that is a multiple of "
        "16 (at most 65535 each); this model has ", s.num_layers, " layers, ", s.num_kv_heads,
        " KV heads of ", s.head_dim));
  }
  return absl::OkStatus();
}

namespace {

AcPolicy RotatedPoint(std::string_view track, float k_levels, float v_levels) {
  AcPolicy p{track, k_levels, v_levels};
  p.rotate = true;
  p.sink_shift = 6;
  return p;
}

}  // namespace

const AcPolicy& AcHigh() {
  static const AcPolicy p = RotatedPoint("ac", 11, 6);
  return p;
}

const AcPolicy& AcLow() {
  static const AcPolicy p = [] {
    AcPolicy low = RotatedPoint("ac-lo", 6, 2);
    low.takes_channel_weights = true;
    return low;
  }();
  return p;
}

float AcChannelWeight(uint8_t code) {
  // 2^(i/16) for i = 0 .. 15, binary32 rounded to nearest (the wire
  // format's table, by bit pattern).
  static constexpr uint32_t kFraction[16] = {
      0x3f800000, 0x3f85aac3, 0x3f8b95c2, 0x3f91c3d3, 0x3f9837f0, 0x3f9ef532, 0x3fa5fed7, 0x3fad583f,
      0x3fb504f3, 0x3fbd08a4, 0x3fc5672a, 0x3fce248c, 0x3fd744fd, 0x3fe0ccdf, 0x3feac0c7, 0x3ff5257d};
  float f;
  std::memcpy(&f, &kFraction[code & 15], sizeof(f));
  return std::ldexp(f, int(code >> 4) - 8);  // exact: a power of two times a normal float
}

uint8_t AcChannelWeightCode(float w) {
  if (!(w > 0) || !std::isfinite(w)) return w > 0 ? 255 : 0;
  return uint8_t(std::clamp(std::lround(16 * std::log2(double(w))) + 128, 0L, 255L));
}

const AcPolicy* AcPolicyOf(std::string_view track) {
  for (const AcPolicy* p : {&AcHigh(), &AcLow()}) {
    if (p->track == track) return p;
  }
  return nullptr;
}

// ---- decoder -----------------------------------------------------------------

AcGroupDecoder::AcGroupDecoder(const AcShape& shape)
    : shape_(shape),
      decode_unit_(internal::SelectDecodeUnit()),
      decode_unit_half_(internal::SelectDecodeUnitHalf()),
      build_table_(internal::SelectBuildTable()),
      narrow_half_(internal::SelectNarrowHalf()) {
  const int units = shape.num_units();
  steps_.resize(units);
  masks_.resize(size_t(units) * shape.head_dim / 16);
  for (int m = 0; m < 2; ++m) nsym_[m].resize(units);
  freqs_.resize(size_t(units) * 2 * kMaxSymbols);
  run_slots_.resize(size_t(kRunUnits) * 2 * kProbScale);
  prev_.resize(shape.token_floats());
  prev_shift_.resize(units);
}

absl::Status AcGroupDecoder::ParseHeader(const uint8_t** p, const uint8_t* end) {
  uint8_t version = 0, transform = 0;
  uint16_t tokens = 0, layers = 0, heads = 0, dim = 0;
  if (!GetLe(p, end, &version) || !GetLe(p, end, &transform) || !GetLe(p, end, &tokens) ||
      !GetLe(p, end, &layers) || !GetLe(p, end, &heads) || !GetLe(p, end, &dim)) {
    return Corrupt("truncated group header");
  }
  if (version != kFormatVersion && version != kTransformedFormatVersion) {
    return absl::InvalidArgumentError(absl::StrCat("ac object: format version ", version,
                                                   "; this decoder reads ", kFormatVersion,
                                                   " and ", kTransformedFormatVersion));
  }
  if (version == kFormatVersion) transform = kTransformNone;  // a reserved byte in version 1
  if (transform > kTransformWeightedHadamard) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ac object: transform ", transform,
        "; this decoder knows 0 (none), 1 (Hadamard), 2 (weighted K, Hadamard)"));
  }
  if (layers != shape_.num_layers || heads != shape_.num_kv_heads || dim != shape_.head_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ac object: group of ", layers, " layers x ", heads, " KV heads x ", dim,
        "; this model has ", shape_.num_layers, " x ", shape_.num_kv_heads, " x ", shape_.head_dim));
  }
  if (tokens == 0) return Corrupt("a group of 0 tokens");
  if (transform != kTransformNone && !HadamardDim(dim)) {
    return Corrupt(absl::StrCat("a Hadamard transform of heads of ", dim));
  }
  const int d = shape_.head_dim;
  if (transform == kTransformWeightedHadamard) {
    weights_.resize(size_t(shape_.num_layers) * shape_.num_kv_heads * d);
    if (size_t(end - *p) < weights_.size()) return Corrupt("truncated group header");
    for (float& w : weights_) w = AcChannelWeight(*(*p)++);
  }
  for (int u = 0; u < shape_.num_units(); ++u) {
    if (!GetLe(p, end, &steps_[u])) return Corrupt("truncated group header");
    for (int b = 0; b < d / 16; ++b) {
      if (!GetLe(p, end, &masks_[size_t(u) * d / 16 + b])) return Corrupt("truncated group header");
    }
    for (int m = 0; m < 2; ++m) {
      uint32_t nsym;
      if (!GetVarint(p, end, &nsym) || nsym > kMaxSymbols) return Corrupt("bad table size");
      nsym_[m][u] = int(nsym);
      uint16_t* freqs = &freqs_[(size_t(u) * 2 + m) * kMaxSymbols];
      for (uint32_t s = 0; s < nsym; ++s) {
        uint32_t f;
        if (!GetVarint(p, end, &f) || f > kProbScale) return Corrupt("bad table frequency");
        freqs[s] = uint16_t(f);
      }
      if (nsym > 0 && !ValidFrequencies(absl::MakeConstSpan(freqs, nsym))) {
        return Corrupt(absl::StrCat("unit ", u, ": frequencies do not sum to ", kProbScale));
      }
    }
    if (nsym_[0][u] == 0) return Corrupt(absl::StrCat("unit ", u, " has no raw table"));
  }
  tokens_ = tokens;
  transform_ = transform;
  return absl::OkStatus();
}

void AcGroupDecoder::BuildTables(int u, uint32_t* slots) const {
  for (int m = 0; m < 2; ++m) {
    if (nsym_[m][u] == 0) continue;
    build_table_(&freqs_[(size_t(u) * 2 + m) * kMaxSymbols], nsym_[m][u], slots + m * kProbScale);
  }
}

absl::Status AcGroupDecoder::OpenToken(const uint8_t* p, const uint8_t* end, Cursor* cur) const {
  const int units = shape_.num_units();
  if (end - p < units) return Corrupt("truncated step shifts");
  cur->shifts = p;
  p += units;
  for (uint32_t& x : cur->state) {
    if (!GetLe(&p, end, &x)) return Corrupt("truncated rANS states");
    if (x < kStateLow) return Corrupt("a rANS state below 2^16");
  }
  uint32_t nwords;
  if (!GetVarint(&p, end, &nwords) || uint64_t(nwords) * 2 > uint64_t(end - p)) {
    return Corrupt("word count past the payload");
  }
  cur->w = p;
  cur->words_end = p + size_t(nwords) * 2;
  cur->esc = cur->words_end;
  cur->end = end;
  cur->overrun = false;
  return absl::OkStatus();
}

namespace {
// The kernel for the output's type.
template <typename... Args>
const char* RunDecodeUnit(internal::DecodeUnitFn f, internal::DecodeUnitHalfFn, float* const* outs,
                          Args... args) {
  return f(args..., outs);
}
template <typename... Args>
const char* RunDecodeUnit(internal::DecodeUnitFn, internal::DecodeUnitHalfFn f,
                          uint16_t* const* outs, Args... args) {
  return f(args..., outs);
}
}  // namespace

template <typename Out>
absl::Status AcGroupDecoder::DecodeUnit(int t, int count, int u, Cursor* curs,
                                        const uint32_t* slots, Out* out, size_t out_stride) {
  const int d = shape_.head_dim;
  const uint16_t* masks = &masks_[size_t(u) * d / 16];
  const bool has_delta = std::any_of(masks, masks + d / 16, [](uint16_t m) { return m != 0; });
  internal::DecodeCursor* cursors[internal::kMaxTokensPerCall];
  bool same[internal::kMaxTokensPerCall];
  float steps[internal::kMaxTokensPerCall];
  Out* outs[internal::kMaxTokensPerCall];
  for (int k = 0; k < count; ++k) {
    const uint8_t shift = curs[k].shifts[u];
    if (shift > kMaxShift) return Corrupt(absl::StrCat("step shift ", shift));
    same[k] = t + k > 0 && shift == prev_shift_[u];
    prev_shift_[u] = shift;
    if (same[k] && has_delta && nsym_[1][u] == 0) {
      return Corrupt(absl::StrCat("unit ", u, " has no delta table"));
    }
    cursors[k] = &curs[k];
    steps[k] = steps_[u] * kInversePowersOfTwo[shift];
    outs[k] = out + k * out_stride;
  }
  if (transform_ != kTransformNone) {
    // The rotated values as floats, rotated back, then stored (narrowed
    // after the inverse, so fp16 output is FloatToHalf of the floats).
    unrotate_.resize(size_t(count) * d);
    float* rotated[internal::kMaxTokensPerCall];
    for (int k = 0; k < count; ++k) rotated[k] = unrotate_.data() + size_t(k) * d;
    if (const char* why = decode_unit_(cursors, count, slots, masks, same, &prev_[size_t(u) * d],
                                       steps, d, rotated)) {
      return Corrupt(why);
    }
    const int heads = shape_.num_kv_heads;
    const float* w = transform_ == kTransformWeightedHadamard && (u / heads) % 2 == 0
                         ? &weights_[size_t((u / (2 * heads)) * heads + u % heads) * d]
                         : nullptr;  // a K unit's weights
    for (int k = 0; k < count; ++k) {
      UnrotateHead(rotated[k], d);
      if (w != nullptr) {
        for (int c = 0; c < d; ++c) rotated[k][c] /= w[c];
      }
      if constexpr (std::is_same_v<Out, float>) {
        std::memcpy(outs[k], rotated[k], sizeof(float) * d);
      } else {
        narrow_half_(rotated[k], d, outs[k]);
      }
    }
    return absl::OkStatus();
  }
  if (const char* why = RunDecodeUnit(decode_unit_, decode_unit_half_, outs, cursors, count, slots,
                                      masks, same, &prev_[size_t(u) * d], steps, d)) {
    return Corrupt(why);
  }
  return absl::OkStatus();
}

void AcGroupDecoder::Prefetch(const Cursor& cur, int u0, int u1) const {
  __builtin_prefetch(cur.shifts + u0, 0, 3);
  // Units take under a byte a value from the word stream (ac's about 5.5
  // bits) and a little from the escapes.
  const ptrdiff_t words = ptrdiff_t(u1 - u0) * shape_.head_dim;
  for (ptrdiff_t at = 0; at < words; at += 64) {
    __builtin_prefetch(cur.w + std::min(at, cur.words_end - cur.w), 0, 3);
  }
  __builtin_prefetch(cur.esc, 0, 3);
}

absl::Status AcGroupDecoder::CloseToken(const Cursor& cur) const {
  if (cur.overrun) return Corrupt("the word stream ends early");
  if (cur.w != cur.words_end) return Corrupt("unread words");
  if (cur.esc != cur.end) return Corrupt("trailing bytes");
  for (uint32_t x : cur.state) {
    if (x != kStateLow) return Corrupt("rANS states do not end at 2^16");
  }
  return absl::OkStatus();
}

absl::Status AcGroupDecoder::Decode(int object_id, absl::Span<const uint8_t> payload, float* out) {
  if (object_id != next_ && object_id != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ac object ", object_id, " out of order: expected ", next_));
  }
  next_ = 0;  // until this object decodes
  const uint8_t* p = payload.data();
  const uint8_t* end = p + payload.size();
  if (object_id == 0) {
    tokens_ = 0;
    if (absl::Status s = ParseHeader(&p, end); !s.ok()) return s;
    slots_.resize(size_t(shape_.num_units()) * 2 * kProbScale);
    for (int u = 0; u < shape_.num_units(); ++u) BuildTables(u, &slots_[size_t(u) * 2 * kProbScale]);
  } else if (object_id >= tokens_) {
    return absl::InvalidArgumentError(
        absl::StrCat("ac object ", object_id, " past the group's ", tokens_, " tokens"));
  }
  Cursor cur;
  if (absl::Status s = OpenToken(p, end, &cur); !s.ok()) return s;
  for (int u = 0; u < shape_.num_units(); ++u) {
    const uint32_t* slots = &slots_[size_t(u) * 2 * kProbScale];
    float* values = out + size_t(u) * shape_.head_dim;
    if (absl::Status s = DecodeUnit(object_id, 1, u, &cur, slots, values, 0); !s.ok()) return s;
  }
  if (absl::Status s = CloseToken(cur); !s.ok()) return s;
  next_ = object_id + 1;
  return absl::OkStatus();
}

absl::Status AcGroupDecoder::DecodeGroup(absl::Span<const absl::Span<const uint8_t>> objects,
                                         float* out) {
  return DecodeRuns(objects, out);
}

absl::Status AcGroupDecoder::DecodeGroupHalf(absl::Span<const absl::Span<const uint8_t>> objects,
                                             uint16_t* out) {
  return DecodeRuns(objects, out);
}

template <typename Out>
absl::Status AcGroupDecoder::DecodeRuns(absl::Span<const absl::Span<const uint8_t>> objects,
                                        Out* out) {
  next_ = 0;
  tokens_ = 0;
  if (objects.empty()) return absl::InvalidArgumentError("ac group: no objects");
  const uint8_t* p = objects[0].data();
  if (absl::Status s = ParseHeader(&p, p + objects[0].size()); !s.ok()) return s;
  if (int(objects.size()) != tokens_) {
    return absl::InvalidArgumentError(absl::StrCat("ac group of ", tokens_, " tokens given ",
                                                   objects.size(), " objects"));
  }
  std::vector<Cursor> cursors(tokens_);
  for (int t = 0; t < tokens_; ++t) {
    const uint8_t* begin = t == 0 ? p : objects[t].data();
    const uint8_t* end = objects[t].data() + objects[t].size();
    if (absl::Status s = OpenToken(begin, end, &cursors[t]); !s.ok()) return s;
  }
  // A run of kRunUnits units at a time, their tables built once and kept
  // in cache (L2), and within it a few tokens at a time (independent rANS
  // chains in flight) through every unit of the run: each token's values
  // of the run are contiguous in `out`, written in order. (Unit by unit
  // over all tokens, a unit's tokens were token_floats() apart, 256 KB on
  // Llama-3-8B's shape, all in the same few cache sets: those scattered
  // stores took more than half of the decode time.) Tokens further on
  // have their streams prefetched, as they lie apart too.
  const size_t n = shape_.token_floats();
  const int units = shape_.num_units(), d = shape_.head_dim;
  for (int u0 = 0; u0 < units; u0 += kRunUnits) {
    const int u1 = std::min(units, u0 + kRunUnits);
    for (int u = u0; u < u1; ++u) BuildTables(u, &run_slots_[size_t(u - u0) * 2 * kProbScale]);
    for (int t = 0; t < tokens_; t += internal::kMaxTokensPerCall) {
      const int count = std::min(internal::kMaxTokensPerCall, tokens_ - t);
      for (int k = t + kPrefetchAhead; k < std::min(tokens_, t + kPrefetchAhead + count); ++k) {
        Prefetch(cursors[k], u0, u1);
      }
      for (int u = u0; u < u1; ++u) {
        const uint32_t* slots = &run_slots_[size_t(u - u0) * 2 * kProbScale];
        if (absl::Status s = DecodeUnit(t, count, u, &cursors[t], slots,
                                        out + t * n + size_t(u) * d, n);
            !s.ok()) {
          return s;
        }
      }
    }
  }
  for (const Cursor& c : cursors) {
    if (absl::Status s = CloseToken(c); !s.ok()) return s;
  }
  next_ = tokens_;
  return absl::OkStatus();
}

}  // namespace kvcast::kvcache::ac
