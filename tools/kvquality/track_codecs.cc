// Track codecs for the harness: see track_codecs.h.
#include "tools/kvquality/track_codecs.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/kv/token_codec.h"
#include "common/dtype.h"
#include "kernels/kv_codec.h"
#include "tools/kvquality/rotation.h"

namespace kvcast::kvquality {

absl::StatusOr<HarnessTrack> ParseTrack(std::string_view name) {
  constexpr std::string_view kRot = "+rot";
  HarnessTrack t;
  if (name.size() > kRot.size() && name.substr(name.size() - kRot.size()) == kRot) {
    name.remove_suffix(kRot.size());
    t.rotate = true;
  }
  auto c = kvcache::CompressionOfTrackName(name);
  if (!c.ok()) return absl::InvalidArgumentError(c.status().message());
  t.compression = *c;
  if (t.rotate && t.compression.ac != nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", std::string(name), "+rot\": only the row formats rotate"));
  }
  return t;
}

TrackTransfer::TrackTransfer(const KvLayout& layout) : layout_(layout), ac_(layout) {}

absl::StatusOr<size_t> TrackTransfer::Transfer(const HarnessTrack& harness_track,
                                               Backend* backend, KvPagePool* pool,
                                               absl::Span<const int32_t> src_slots,
                                               absl::Span<const int32_t> dst_slots,
                                               int group_tokens) {
  if (src_slots.size() != dst_slots.size() || group_tokens < 1) {
    return absl::InvalidArgumentError(absl::StrCat("transfer: ", src_slots.size(), " -> ",
                                                   dst_slots.size(), " slots, groups of ",
                                                   group_tokens));
  }
  const kvcache::KvCompression& track = harness_track.compression;
  if (harness_track.rotate) {
    return TransferRotated(track.format, backend, pool, src_slots, dst_slots);
  }
  if (track.ac != nullptr) {
    if (absl::Status s = ac_.Supported(); !s.ok()) return s;
  }
  const TokenCodec codec(layout_, track.format);
  size_t bytes = 0;
  for (size_t first = 0; first < src_slots.size(); first += group_tokens) {
    const size_t count = std::min(src_slots.size() - first, size_t(group_tokens));
    const auto src = src_slots.subspan(first, count);
    const auto dst = dst_slots.subspan(first, count);
    if (track.ac != nullptr) {
      if (absl::Status s = ac_.Encode(*track.ac, backend, *pool, src, &objects_); !s.ok()) return s;
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

absl::StatusOr<size_t> TrackTransfer::TransferRotated(KvFormat format, Backend* backend,
                                                      KvPagePool* pool,
                                                      absl::Span<const int32_t> src_slots,
                                                      absl::Span<const int32_t> dst_slots) {
  const int heads = layout_.num_kv_heads, dim = layout_.head_dim;
  if (!RotatableHeadDim(dim)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rotation: heads of ", dim, " (a power of two rotates)"));
  }
  // The tokens as fp16 payloads (every layer's K row, then V row: what the
  // pages hold, in any storage), each row rotated, coded and rotated back.
  const TokenCodec fp16(layout_, KvFormat::kFp16);
  std::vector<uint8_t> half(src_slots.size() * fp16.token_bytes());
  if (absl::Status s = fp16.Encode(backend, *pool, src_slots, half.data()); !s.ok()) return s;
  const int row = heads * dim, block = ScaleBlock(format, dim);
  bytes_.resize(KvRowBytes(format, heads, dim, block));
  rows_.resize(row);
  uint16_t* values = reinterpret_cast<uint16_t*>(half.data());
  const size_t rows = src_slots.size() * 2 * layout_.num_layers;
  for (size_t r = 0; r < rows; ++r) {
    uint16_t* h = values + r * row;
    for (int i = 0; i < row; ++i) rows_[i] = HalfToFloat(h[i]);
    RotateHeads(rows_.data(), row, dim, false);
    EncodeKvRow(format, rows_.data(), heads, dim, block, bytes_.data());
    DecodeKvRow(format, bytes_.data(), heads, dim, block, rows_.data());
    RotateHeads(rows_.data(), row, dim, true);
    for (int i = 0; i < row; ++i) h[i] = FloatToHalf(rows_[i]);
  }
  if (absl::Status s = fp16.Decode(backend, half.data(), dst_slots, pool); !s.ok()) return s;
  return bytes_.size() * rows;
}

absl::Status RoundTripBackend::SetTrack(std::optional<HarnessTrack> harness_track,
                                        const KvPagePool* pool) {
  if (harness_track && harness_track->rotate && !RotatableHeadDim(pool->layout().head_dim)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rotation: heads of ", pool->layout().head_dim, " (a power of two rotates)"));
  }
  std::optional<kvcache::KvCompression> track;
  if (harness_track) track = harness_track->compression;
  if (track && track->ac != nullptr) {
    const KvLayout& l = pool->layout();
    const kvcache::ac::AcShape layer_shape{1, l.num_kv_heads, l.head_dim};
    if (absl::Status s = kvcache::ac::ValidateShape(layer_shape); !s.ok()) return s;
    // One encoder per layer, with that layer's levels: an ac group codes
    // every unit on its own, so coding a layer alone gives its values as
    // the whole token's group would.
    ac_encoders_.clear();
    const kvcache::ac::AcPolicy& p = *track->ac;
    for (int layer = 0; layer < l.num_layers; ++layer) {
      const kvcache::ac::AcPolicy layer_policy{p.track, p.LevelsOf(layer, false),
                                               p.LevelsOf(layer, true)};
      ac_encoders_.push_back(
          std::make_unique<kvcache::ac::AcGroupEncoder>(layer_shape, layer_policy));
    }
    ac_decoder_ = std::make_unique<kvcache::ac::AcGroupDecoder>(layer_shape);
  }
  track_ = harness_track;
  pool_ = pool;
  return absl::OkStatus();
}

absl::Status RoundTripBackend::TakeError() {
  absl::Status s = error_;
  error_ = absl::OkStatus();
  return s;
}

void RoundTripBackend::RoundTrip(int layer, int tokens, int row_floats) {
  const int heads = pool_->layout().num_kv_heads, dim = pool_->layout().head_dim;
  const kvcache::KvCompression& track = track_->compression;
  if (track.ac != nullptr) {
    ac_encoders_[layer]->Encode(rows_.data(), tokens, &objects_);
    const std::vector<absl::Span<const uint8_t>> spans(objects_.begin(), objects_.end());
    if (absl::Status s = ac_decoder_->DecodeGroup(spans, rows_.data()); !s.ok() && error_.ok()) {
      error_ = s;
    }
    return;
  }
  const int block = ScaleBlock(track.format, dim);
  coded_.resize(KvRowBytes(track.format, heads, dim, block));
  for (size_t r = 0; r < size_t(tokens) * 2; ++r) {
    float* row = rows_.data() + r * row_floats;
    if (track_->rotate) RotateHeads(row, row_floats, dim, false);
    EncodeKvRow(track.format, row, heads, dim, block, coded_.data());
    DecodeKvRow(track.format, coded_.data(), heads, dim, block, row);
    if (track_->rotate) RotateHeads(row, row_floats, dim, true);
  }
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
  RoundTrip(layer, num_tokens, row);
  inner()->WriteKv(rows_.data(), rows_.data() + row, num_tokens, 2 * row, slots, num_kv_heads,
                   head_dim, storage, k_cache, v_cache);
}

}  // namespace kvcast::kvquality
