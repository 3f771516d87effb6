// The xl tracks between pages and objects: see xl_pages.h.
#include "transport/kvcache/xl_pages.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"

namespace kvcast::kvcache {

XlPageCodec::XlPageCodec(const KvLayout& layout, std::vector<float> rope_inv_freq,
                         std::shared_ptr<const xl::KvBasis> basis)
    : layout_(layout),
      inv_freq_(std::move(rope_inv_freq)),
      basis_(std::move(basis)),
      fp16_(layout, KvFormat::kFp16) {}

absl::Status XlPageCodec::Supported() const {
  if (basis_ == nullptr) {
    return absl::InvalidArgumentError("the xl tracks need the model's KV basis");
  }
  const xl::AcShape& s = basis_->shape();
  if (s.num_layers != layout_.num_layers || s.num_kv_heads != layout_.num_kv_heads ||
      s.head_dim != layout_.head_dim || int(inv_freq_.size()) != layout_.head_dim / 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a KV basis of shape ", s.num_layers, "x", s.num_kv_heads, "x", s.head_dim,
        " for a model of ", layout_.num_layers, "x", layout_.num_kv_heads, "x",
        layout_.head_dim));
  }
  return absl::OkStatus();
}

void XlPageCodec::RotateK(float* tokens, int count, int first_position, int sign) const {
  const int d = layout_.head_dim, half = d / 2, row = layout_.num_kv_heads * d;
  const size_t token = size_t(layout_.num_layers) * 2 * row;
  for (int t = 0; t < count; ++t) {
    const double pos = first_position + t;
    for (int i = 0; i < half; ++i) {
      const double a = pos * inv_freq_[i];
      const float c = float(std::cos(a)), s = float(sign * std::sin(a));
      for (int l = 0; l < layout_.num_layers; ++l) {
        float* k = tokens + t * token + size_t(l) * 2 * row;
        for (int h = 0; h < layout_.num_kv_heads; ++h, k += d) {
          const float x0 = k[i], x1 = k[i + half];
          k[i] = x0 * c - x1 * s;
          k[i + half] = x1 * c + x0 * s;
        }
      }
    }
  }
}

void XlPageCodec::WidenPreRope(const uint8_t* half, int count, int first_position,
                               std::vector<float>* out) const {
  out->resize(size_t(count) * layout_.num_layers * 2 * layout_.token_floats());
  const uint16_t* h = reinterpret_cast<const uint16_t*>(half);
  for (size_t i = 0; i < out->size(); ++i) (*out)[i] = HalfToFloat(h[i]);
  RotateK(out->data(), count, first_position, -1);
}

absl::Status XlPageCodec::Gather(Backend* backend, const KvPagePool& pool,
                                 absl::Span<const int32_t> slots,
                                 std::vector<uint8_t>* half) const {
  half->resize(slots.size() * fp16_.token_bytes());
  return fp16_.Encode(backend, pool, slots, half->data());
}

absl::Status XlPageCodec::Scatter(Backend* backend, const uint8_t* half,
                                  absl::Span<const int32_t> slots, KvPagePool* pool) const {
  return fp16_.Decode(backend, half, slots, pool);
}

absl::Status XlPageCodec::GatherPreRope(Backend* backend, const KvPagePool& pool,
                                        absl::Span<const int32_t> slots, int first_position,
                                        std::vector<float>* out) const {
  std::vector<uint8_t> half;
  if (absl::Status s = Gather(backend, pool, slots, &half); !s.ok()) return s;
  WidenPreRope(half.data(), int(slots.size()), first_position, out);
  return absl::OkStatus();
}

absl::Status XlPageCodec::Encode(const xl::XlPoint& point, Backend* backend,
                                 const KvPagePool& pool, absl::Span<const int32_t> slots,
                                 int first_position,
                                 std::vector<std::vector<uint8_t>>* objects) {
  if (absl::Status s = Supported(); !s.ok()) return s;
  if (absl::Status s = Gather(backend, pool, slots, &half_); !s.ok()) return s;
  EncodeGathered(point, half_.data(), int(slots.size()), first_position, objects);
  return absl::OkStatus();
}

void XlPageCodec::EncodeGathered(const xl::XlPoint& point, const uint8_t* half, int tokens,
                                 int first_position,
                                 std::vector<std::vector<uint8_t>>* objects) {
  WidenPreRope(half, tokens, first_position, &floats_);
  auto& encoder = encoders_[xl::StepsOf(*basis_, point)];
  if (!encoder) encoder = std::make_unique<xl::XlGroupEncoder>(basis_, point);
  encoder->Encode(floats_.data(), tokens, objects, /*starts_sequence=*/first_position == 0);
}

absl::Status XlPageCodec::Decode(Backend* backend,
                                 absl::Span<const absl::Span<const uint8_t>> objects,
                                 absl::Span<const int32_t> slots, int first_position,
                                 KvPagePool* pool) {
  if (absl::Status s = Supported(); !s.ok()) return s;
  if (objects.size() != slots.size()) {
    return absl::InvalidArgumentError("xl group: one object per slot");
  }
  if (absl::Status s = DecodeToHalf(objects, first_position, &half_); !s.ok()) return s;
  return Scatter(backend, half_.data(), slots, pool);
}

absl::Status XlPageCodec::DecodeToHalf(absl::Span<const absl::Span<const uint8_t>> objects,
                                       int first_position, std::vector<uint8_t>* half) {
  if (!decoder_) decoder_ = std::make_unique<xl::XlGroupDecoder>(basis_);
  floats_.resize(objects.size() * size_t(basis_->shape().token_floats()));
  if (absl::Status s = decoder_->DecodeGroup(objects, floats_.data()); !s.ok()) return s;
  RotateK(floats_.data(), int(objects.size()), first_position, +1);
  half->resize(floats_.size() * 2);
  uint16_t* h = reinterpret_cast<uint16_t*>(half->data());
  for (size_t i = 0; i < floats_.size(); ++i) h[i] = FloatToHalf(floats_[i]);
  return absl::OkStatus();
}

}  // namespace kvcast::kvcache
