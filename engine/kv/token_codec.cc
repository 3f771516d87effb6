// TokenCodec: see token_codec.h.
#include "engine/kv/token_codec.h"

namespace kvcast {

int ScaleBlock(KvFormat format, int head_dim) {
  if (KvFormatBits(format) == 4 && head_dim % 32 == 0) return 32;
  return head_dim;
}

TokenCodec::TokenCodec(const KvLayout& layout, KvFormat format)
    : layout_(layout),
      format_(format),
      block_(ScaleBlock(format, layout.head_dim)),
      row_bytes_(KvRowBytes(format, layout.num_kv_heads, layout.head_dim, block_)) {}

KvArrays TokenCodec::Arrays(const KvPagePool& pool) const {
  return KvArrays{pool.k_pages(0), 2 * layout_.num_layers, pool.layer_values(),
                  layout_.num_kv_heads, layout_.head_dim, pool.layout().storage};
}

absl::Status TokenCodec::Encode(Backend* backend, const KvPagePool& pool,
                                absl::Span<const int32_t> slots, uint8_t* out) const {
  return backend->EncodeKv(format_, block_, Arrays(pool), slots.data(), int(slots.size()), out,
                           token_bytes());
}

absl::Status TokenCodec::Decode(Backend* backend, const uint8_t* in,
                                absl::Span<const int32_t> slots, KvPagePool* pool) const {
  return backend->DecodeKv(format_, block_, in, token_bytes(), slots.data(), int(slots.size()),
                           Arrays(*pool));
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
