// The ac tracks on a page pool: see ac_pages.h.
#include "transport/kvcache/ac_pages.h"

namespace kvcast::kvcache {

AcPageCodec::AcPageCodec(const KvLayout& layout)
    : layout_(layout),
      shape_{layout.num_layers, layout.num_kv_heads, layout.head_dim},
      fp16_(layout, KvFormat::kFp16) {}

absl::Status AcPageCodec::Encode(const ac::AcPolicy& policy, Backend* backend,
                                 const KvPagePool& pool, absl::Span<const int32_t> slots,
                                 std::vector<std::vector<uint8_t>>* objects,
                                 bool starts_sequence) {
  if (absl::Status s = Gather(backend, pool, slots, &half_); !s.ok()) return s;
  EncodeGathered(policy, half_.data(), int(slots.size()), objects, starts_sequence);
  return absl::OkStatus();
}

absl::Status AcPageCodec::Gather(Backend* backend, const KvPagePool& pool,
                                 absl::Span<const int32_t> slots, std::vector<uint8_t>* half) const {
  half->resize(slots.size() * size_t(shape_.token_floats()) * 2);
  return fp16_.Encode(backend, pool, slots, half->data());
}

void AcPageCodec::EncodeGathered(const ac::AcPolicy& policy, const uint8_t* half, int tokens,
                                 std::vector<std::vector<uint8_t>>* objects,
                                 bool starts_sequence) {
  auto& encoder = encoders_[&policy];
  if (!encoder) encoder = std::make_unique<ac::AcGroupEncoder>(shape_, policy);
  // fp16 token payloads are the group's values in order, as binary16
  // (no scales), read without widening them first.
  encoder->EncodeHalf(reinterpret_cast<const uint16_t*>(half), tokens, objects, starts_sequence);
}

absl::Status AcPageCodec::Decode(Backend* backend,
                                 absl::Span<const absl::Span<const uint8_t>> objects,
                                 absl::Span<const int32_t> slots, KvPagePool* pool) {
  if (objects.size() != slots.size()) {
    return absl::InvalidArgumentError("ac group: one object per slot");
  }
  if (absl::Status s = DecodeToHalf(objects, &half_); !s.ok()) return s;
  return Scatter(backend, half_.data(), slots, pool);
}

absl::Status AcPageCodec::DecodeToHalf(absl::Span<const absl::Span<const uint8_t>> objects,
                                       std::vector<uint8_t>* half) {
  if (!decoder_) decoder_ = std::make_unique<ac::AcGroupDecoder>(shape_);
  // fp16 token payloads are the group's values in order, as binary16.
  half->resize(objects.size() * size_t(shape_.token_floats()) * 2);
  return decoder_->DecodeGroupHalf(objects, reinterpret_cast<uint16_t*>(half->data()));
}

absl::Status AcPageCodec::Scatter(Backend* backend, const uint8_t* half,
                                  absl::Span<const int32_t> slots, KvPagePool* pool) const {
  return fp16_.Decode(backend, half, slots, pool);
}

}  // namespace kvcast::kvcache
