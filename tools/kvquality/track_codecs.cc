// Track codecs for the harness: see track_codecs.h.
#include "tools/kvquality/track_codecs.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/kv/token_codec.h"
#include "common/status_macros.h"
#include "kernels/kv_codec.h"
#include "kernels/hadamard.h"

namespace kvcast::kvquality {

namespace {

// Removes `suffix` from the end of *name; whether it was there.
bool TakeSuffix(std::string_view* name, std::string_view suffix) {
  if (name->size() <= suffix.size() || name->substr(name->size() - suffix.size()) != suffix) {
    return false;
  }
  name->remove_suffix(suffix.size());
  return true;
}

// "#LnK" / "#LnV" at the end of *name, taken off: the layer and kind.
absl::StatusOr<std::optional<std::pair<int, bool>>> TakeProbe(std::string_view* name) {
  const size_t at = name->rfind("#L");
  if (at == std::string_view::npos) return std::nullopt;
  const std::string_view probe = name->substr(at + 2);
  int layer = -1;
  if (probe.size() < 2 || (probe.back() != 'K' && probe.back() != 'V') ||
      !absl::SimpleAtoi(absl::string_view(probe.data(), probe.size() - 1), &layer) || layer < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "\"", std::string(*name), "\": a probe is #L<layer>K or #L<layer>V"));
  }
  name->remove_suffix(name->size() - at);
  return std::make_pair(layer, probe.back() == 'V');
}

// Only `layer`'s K (or V) units at the policy's levels; every other at
// kProbeExactLevels.
kvcache::ac::AcPolicy Probe(const kvcache::ac::AcPolicy& p, int layer, bool is_v) {
  kvcache::ac::AcPolicy out{p.track, kProbeExactLevels, kProbeExactLevels};
  std::vector<float>& probed = is_v ? out.v_layer_scale : out.k_layer_scale;
  probed.assign(layer + 1, 1.f);
  probed[layer] = (is_v ? p.v_levels : p.k_levels) / kProbeExactLevels;
  // Layers past the vector's end keep scale 1: exact.
  return out;
}

}  // namespace

absl::StatusOr<HarnessTrack> ParseTrack(std::string_view name,
                                        const kvcache::ac::AcLayerTuning* tuning) {
  constexpr std::string_view kExplored = "ac@", kXl = "xl@";
  const std::string full(name);
  HarnessTrack t;
  if (name.substr(0, kXl.size()) == kXl) {
    const std::vector<std::string> steps = absl::StrSplit(std::string(name.substr(kXl.size())), '/');
    float k = 0, v = 0;
    if (steps.size() != 2 || !absl::SimpleAtof(steps[0], &k) || !absl::SimpleAtof(steps[1], &v) ||
        !(k > 0) || !(v > 0) || !std::isfinite(k) || !std::isfinite(v)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "\"", full, "\": a cross-layer transform point is xl@K_STEP/V_STEP, both > 0"));
    }
    t.xl = kvcache::xl::XlPoint{kXl, k, v};
    return t;
  }
  // Suffixes, in any order.
  bool rotate = false, tuned = false, weighted = false;
  int sink = 0;
  for (bool more = true; more;) {
    more = false;
    if (TakeSuffix(&name, "+rot")) more = rotate = true;
    if (TakeSuffix(&name, "+tuned")) more = tuned = true;
    if (TakeSuffix(&name, "+kw")) more = weighted = true;
    const size_t at = name.rfind("+sink");
    if (at != std::string_view::npos && at > 0 && name.find('+', at + 1) == std::string_view::npos) {
      if (!absl::SimpleAtoi(absl::string_view(name.data() + at + 5, name.size() - at - 5), &sink) ||
          sink < 1 || sink > kvcache::ac::internal::kMaxShift) {
        return absl::InvalidArgumentError(
            absl::StrCat("\"", full, "\": +sinkN takes N = 1 .. 15 (steps 2^N finer)"));
      }
      name.remove_suffix(name.size() - at);
      more = true;
    }
  }
  ASSIGN_OR_RETURN(const auto probe, TakeProbe(&name));
  kvcache::ac::AcPolicy policy;
  if (name.substr(0, kExplored.size()) == kExplored) {
    const std::vector<std::string> levels =
        absl::StrSplit(std::string(name.substr(kExplored.size())), '/');
    float k = 0, v = 0;
    if (levels.size() != 2 || !absl::SimpleAtof(levels[0], &k) ||
        !absl::SimpleAtof(levels[1], &v) || !(k > 0) || !(v > 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "\"", std::string(name), "\": an explored ac point is ac@K_LEVELS/V_LEVELS, both > 0"));
    }
    policy = kvcache::ac::AcPolicy{kvcache::ac::AcHigh().track, k, v};
  } else {
    auto c = kvcache::CompressionOfTrackName(name);
    if (!c.ok()) return absl::InvalidArgumentError(c.status().message());
    t.compression = *c;
    if (c->xl != nullptr) {  // a named point over the evaluation's basis
      if (tuned || weighted || probe || sink > 0 || rotate) {
        return absl::InvalidArgumentError(
            absl::StrCat("\"", full, "\": the xl tracks take no suffix"));
      }
      t.xl = *c->xl;
      return t;
    }
    if (t.compression.ac == nullptr) {
      if (tuned || weighted || probe || sink > 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("\"", full, "\": only ac tracks take +tuned, +kw, +sinkN or a probe"));
      }
      t.compression.rotated |= rotate;
      return t;
    }
    policy = *t.compression.ac;
  }
  if (tuned) {
    if (tuning == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"", full, "\": +tuned needs a tuning (kv_quality --ac_tuning)"));
    }
    policy = kvcache::ac::Tuned(policy, *tuning);
  }
  if (weighted) {
    if (tuning == nullptr || tuning->k_channel.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "\"", full, "\": +kw needs a tuning with K channel weights (kv_quality --ac_tuning)"));
    }
    policy = kvcache::ac::WithChannelWeights(policy, *tuning);
  }
  if (probe) policy = Probe(policy, probe->first, probe->second);
  if (sink > 0) policy.sink_shift = sink;
  if (rotate) policy.rotate = true;  // the ac group header's transform
  t.explored = std::make_shared<const kvcache::ac::AcPolicy>(std::move(policy));
  t.compression = kvcache::KvCompression(t.explored.get());
  return t;
}

std::vector<std::string> ProbeTracks(std::string_view base, int layers) {
  std::vector<std::string> out;
  for (int l = 0; l < layers; ++l) {
    for (const char* kind : {"K", "V"}) out.push_back(absl::StrCat(std::string(base), "#L", l, kind));
  }
  return out;
}

FloatGroupCoder::FloatGroupCoder(int layers, int num_kv_heads, int head_dim)
    : layers_(layers), heads_(num_kv_heads), head_dim_(head_dim) {}

absl::StatusOr<size_t> FloatGroupCoder::Code(const kvcache::KvCompression& track, float* tokens,
                                             int count, int first_layer, bool starts_sequence) {
  const int row = heads_ * head_dim_;
  if (const kvcache::ac::AcPolicy* p = track.ac; p != nullptr) {
    const kvcache::ac::AcShape shape{layers_, heads_, head_dim_};
    auto& encoder = encoders_[{p, first_layer}];
    if (!encoder) {
      // Layers coded apart from the rest take their own layer's levels: an
      // ac group codes every unit on its own, so the values are those the
      // whole token's group would give.
      kvcache::ac::AcPolicy policy = *p;
      if (first_layer != 0) {
        policy.k_levels = p->LevelsOf(first_layer, false);
        policy.v_levels = p->LevelsOf(first_layer, true);
        policy.k_layer_scale.clear();
        policy.v_layer_scale.clear();
        // ... and the K channel weights of those layers.
        const size_t per_layer = size_t(heads_) * head_dim_;
        const size_t from = std::min(size_t(first_layer) * per_layer, p->k_channel_weights.size());
        policy.k_channel_weights.assign(p->k_channel_weights.begin() + from, p->k_channel_weights.end());
      }
      encoder = std::make_unique<kvcache::ac::AcGroupEncoder>(shape, policy);
    }
    if (!decoder_) decoder_ = std::make_unique<kvcache::ac::AcGroupDecoder>(shape);
    encoder->Encode(tokens, count, &objects_, starts_sequence);
    size_t bytes = 0;
    for (const auto& o : objects_) bytes += o.size();
    const std::vector<absl::Span<const uint8_t>> spans(objects_.begin(), objects_.end());
    if (absl::Status s = decoder_->DecodeGroup(spans, tokens); !s.ok()) return s;
    return bytes;
  }
  const int block = ScaleBlock(track.format, head_dim_);
  row_.resize(KvRowBytes(track.format, heads_, head_dim_, block));
  const size_t rows = size_t(count) * 2 * layers_;
  for (size_t r = 0; r < rows; ++r) {
    EncodeKvRow(track.format, tokens + r * row, heads_, head_dim_, block, row_.data());
    DecodeKvRow(track.format, row_.data(), heads_, head_dim_, block, tokens + r * row);
  }
  return row_.size() * rows;
}

TrackTransfer::TrackTransfer(const KvLayout& layout, std::vector<float> rope_inv_freq,
                             std::shared_ptr<const kvcache::xl::KvBasis> basis)
    : layout_(layout), ac_(layout), xl_(layout, std::move(rope_inv_freq), std::move(basis)) {}

absl::StatusOr<std::vector<float>> TrackTransfer::PreRopeTokens(Backend* backend,
                                                                const KvPagePool& pool,
                                                                absl::Span<const int32_t> slots,
                                                                int first_position) {
  std::vector<float> out;
  RETURN_IF_ERROR(xl_.GatherPreRope(backend, pool, slots, first_position, &out));
  return out;
}

absl::StatusOr<size_t> TrackTransfer::Transfer(const HarnessTrack& harness_track,
                                               Backend* backend, KvPagePool* pool,
                                               absl::Span<const int32_t> src_slots,
                                               absl::Span<const int32_t> dst_slots,
                                               int group_tokens, int first_position) {
  if (src_slots.size() != dst_slots.size() || group_tokens < 1) {
    return absl::InvalidArgumentError(absl::StrCat("transfer: ", src_slots.size(), " -> ",
                                                   dst_slots.size(), " slots, groups of ",
                                                   group_tokens));
  }
  if (harness_track.xl) {
    RETURN_IF_ERROR(xl_.Supported());
    size_t bytes = 0;
    for (size_t first = 0; first < src_slots.size(); first += group_tokens) {
      const size_t count = std::min(src_slots.size() - first, size_t(group_tokens));
      const int position = first_position + int(first);
      RETURN_IF_ERROR(xl_.Encode(*harness_track.xl, backend, *pool, src_slots.subspan(first, count),
                                 position, &objects_));
      for (const auto& o : objects_) bytes += o.size();
      const std::vector<absl::Span<const uint8_t>> spans(objects_.begin(), objects_.end());
      RETURN_IF_ERROR(xl_.Decode(backend, spans, dst_slots.subspan(first, count), position, pool));
    }
    return bytes;
  }
  const kvcache::KvCompression& track = harness_track.compression;
  const TokenCodec codec(layout_, track.format, track.rotated);
  if (absl::Status s = track.ac != nullptr ? ac_.Supported() : codec.Supported(); !s.ok()) {
    return s;
  }
  size_t bytes = 0;
  for (size_t first = 0; first < src_slots.size(); first += group_tokens) {
    const size_t count = std::min(src_slots.size() - first, size_t(group_tokens));
    const auto src = src_slots.subspan(first, count);
    const auto dst = dst_slots.subspan(first, count);
    if (track.ac != nullptr) {
      if (absl::Status s = ac_.Encode(*track.ac, backend, *pool, src, &objects_,
                                      /*starts_sequence=*/first_position + first == 0);
          !s.ok()) {
        return s;
      }
      for (const auto& o : objects_) bytes += o.size();
      const std::vector<absl::Span<const uint8_t>> spans(objects_.begin(), objects_.end());
      if (absl::Status s = ac_.Decode(backend, spans, dst, pool); !s.ok()) return s;
    } else {
      bytes_.resize(count * codec.token_bytes());
      if (absl::Status s = codec.Encode(backend, *pool, src, bytes_.data()); !s.ok()) return s;
      bytes += bytes_.size();
      if (absl::Status s = codec.Decode(backend, bytes_.data(), dst, pool); !s.ok()) return s;
    }
  }
  return bytes;
}

absl::Status RoundTripBackend::SetTrack(std::optional<HarnessTrack> track,
                                        const KvPagePool* pool, int32_t sequence_start) {
  if (track && track->xl) {
    return absl::InvalidArgumentError(
        "all-kv: the xl tracks code a token across layers, which the model writes one by one "
        "(modes product and all-kv-token)");
  }
  if (track) {
    const KvLayout& l = pool->layout();
    if (track->compression.rotated && !HadamardDim(l.head_dim)) {
      return absl::InvalidArgumentError(
          absl::StrCat("rotation: heads of ", l.head_dim, " (a power of two rotates)"));
    }
    if (track->compression.ac != nullptr) {
      if (absl::Status s = kvcache::ac::ValidateShape({1, l.num_kv_heads, l.head_dim}); !s.ok()) {
        return s;
      }
    }
    if (!coder_) coder_ = std::make_unique<FloatGroupCoder>(1, l.num_kv_heads, l.head_dim);
  }
  track_ = track;
  pool_ = pool;
  sequence_start_ = sequence_start;
  return absl::OkStatus();
}

absl::Status RoundTripBackend::TakeError() {
  absl::Status s = error_;
  error_ = absl::OkStatus();
  return s;
}

void RoundTripBackend::WriteKv(const float* k, const float* v, int num_tokens, int stride,
                               const int32_t* slots, int num_kv_heads, int head_dim,
                               KvStorage storage, void* k_cache, void* v_cache) {
  int layer = -1;
  if (track_ && pool_ != nullptr) {
    for (int l = 0; l < pool_->layout().num_layers && layer < 0; ++l) {
      if (pool_->k_pages(l) == k_cache) layer = l;
    }
  }
  if (layer < 0) {  // exact, or another pool's
    inner()->WriteKv(k, v, num_tokens, stride, slots, num_kv_heads, head_dim, storage, k_cache,
                     v_cache);
    return;
  }
  // The rows as an ac group's tokens hold them: K row, then V row.
  const int row = num_kv_heads * head_dim;
  rows_.resize(size_t(num_tokens) * 2 * row);
  for (int t = 0; t < num_tokens; ++t) {
    std::copy(k + size_t(t) * stride, k + size_t(t) * stride + row, &rows_[size_t(t) * 2 * row]);
    std::copy(v + size_t(t) * stride, v + size_t(t) * stride + row,
              &rows_[(size_t(t) * 2 + 1) * row]);
  }
  const bool rotated = track_->compression.rotated;
  if (rotated) RotateHeads(rows_.data(), int(rows_.size()), head_dim, false);
  if (auto b = coder_->Code(track_->compression, rows_.data(), num_tokens, layer,
                            /*starts_sequence=*/slots[0] == sequence_start_);
      !b.ok() && error_.ok()) {
    error_ = b.status();
  }
  if (rotated) RotateHeads(rows_.data(), int(rows_.size()), head_dim, true);
  inner()->WriteKv(rows_.data(), rows_.data() + row, num_tokens, 2 * row, slots, num_kv_heads,
                   head_dim, storage, k_cache, v_cache);
}

}  // namespace kvcast::kvquality
