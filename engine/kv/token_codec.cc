// TokenCodec: see token_codec.h.
#include "engine/kv/token_codec.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/hadamard.h"

namespace kvcast {

int ScaleBlock(KvFormat format, int head_dim) {
  if (KvFormatBits(format) == 4 && head_dim % 32 == 0) return 32;
  return head_dim;
}

TokenCodec::TokenCodec(const KvLayout& layout, KvFormat format, bool rotated)
    : layout_(layout),
      format_(format),
      rotated_(rotated),
      block_(ScaleBlock(format, layout.head_dim)),
      row_bytes_(KvRowBytes(format, layout.num_kv_heads, layout.head_dim, block_)) {}

absl::Status TokenCodec::Supported() const {
  if (rotated_ && !HadamardDim(layout_.head_dim)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a rotated KV track needs heads of a power of two values (2 .. 1024); "
                     "this model's have ",
                     layout_.head_dim));
  }
  return absl::OkStatus();
}

KvArrays TokenCodec::Arrays(const KvPagePool& pool) const {
  return KvArrays{pool.k_pages(0), 2 * layout_.num_layers, pool.layer_values(),
                  layout_.num_kv_heads, layout_.head_dim, pool.layout().storage};
}

absl::Status TokenCodec::Encode(Backend* backend, const KvPagePool& pool,
                                absl::Span<const int32_t> slots, uint8_t* out) const {
  if (rotated_) return EncodeRotated(backend, pool, slots, out);
  return backend->EncodeKv(format_, block_, Arrays(pool), slots.data(), int(slots.size()), out,
                           token_bytes());
}

absl::Status TokenCodec::Decode(Backend* backend, const uint8_t* in,
                                absl::Span<const int32_t> slots, KvPagePool* pool) const {
  if (rotated_) return DecodeRotated(backend, in, slots, pool);
  return backend->DecodeKv(format_, block_, in, token_bytes(), slots.data(), int(slots.size()),
                           Arrays(*pool));
}

namespace {

// A rotated codec's scratch on the calling thread: the tokens as fp16 rows
// and one row as floats.
struct RotationScratch {
  std::vector<uint8_t> half;
  std::vector<float> row;
};

RotationScratch& Scratch(size_t half_bytes, size_t row_values) {
  thread_local RotationScratch scratch;
  scratch.half.resize(half_bytes);
  scratch.row.resize(row_values);
  return scratch;
}

}  // namespace

absl::Status TokenCodec::EncodeRotated(Backend* backend, const KvPagePool& pool,
                                       absl::Span<const int32_t> slots, uint8_t* out) const {
  if (absl::Status s = Supported(); !s.ok()) return s;
  const int heads = layout_.num_kv_heads, dim = layout_.head_dim;
  const int values = heads * dim;
  const size_t half_row = size_t(values) * 2, half_token = half_row * 2 * layout_.num_layers;
  RotationScratch& scratch = Scratch(slots.size() * half_token, values);
  if (absl::Status s = backend->EncodeKv(KvFormat::kFp16, dim, Arrays(pool), slots.data(),
                                         int(slots.size()), scratch.half.data(), half_token);
      !s.ok()) {
    return s;
  }
  for (size_t t = 0; t < slots.size(); ++t) {
    for (int a = 0; a < 2 * layout_.num_layers; ++a) {
      DecodeKvRow(KvFormat::kFp16, scratch.half.data() + t * half_token + a * half_row, heads, dim,
                  dim, scratch.row.data());
      RotateHeads(scratch.row.data(), values, dim, /*inverse=*/false);
      EncodeKvRow(format_, scratch.row.data(), heads, dim, block_,
                  out + t * token_bytes() + a * row_bytes_);
    }
  }
  return absl::OkStatus();
}

absl::Status TokenCodec::DecodeRotated(Backend* backend, const uint8_t* in,
                                       absl::Span<const int32_t> slots, KvPagePool* pool) const {
  if (absl::Status s = Supported(); !s.ok()) return s;
  const int heads = layout_.num_kv_heads, dim = layout_.head_dim;
  const int values = heads * dim;
  const size_t half_row = size_t(values) * 2, half_token = half_row * 2 * layout_.num_layers;
  RotationScratch& scratch = Scratch(slots.size() * half_token, values);
  for (size_t t = 0; t < slots.size(); ++t) {
    for (int a = 0; a < 2 * layout_.num_layers; ++a) {
      DecodeKvRow(format_, in + t * token_bytes() + a * row_bytes_, heads, dim, block_,
                  scratch.row.data());
      RotateHeads(scratch.row.data(), values, dim, /*inverse=*/true);
      EncodeKvRow(KvFormat::kFp16, scratch.row.data(), heads, dim, dim,
                  scratch.half.data() + t * half_token + a * half_row);
    }
  }
  return backend->DecodeKv(KvFormat::kFp16, dim, scratch.half.data(), half_token, slots.data(),
                           int(slots.size()), Arrays(*pool));
}

std::vector<int32_t> SlotsOf(absl::Span<const int32_t> pages, int page_tokens, int first,
                             int count) {
  std::vector<int32_t> slots(count);
  for (int i = 0; i < count; ++i) {
    const int t = first + i;
    slots[i] = pages[t / page_tokens] * page_tokens + t % page_tokens;
  }
  return slots;
}

}  // namespace kvcast
