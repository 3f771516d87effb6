// TokenCodec: see token_codec.h.
#include "transport/kvcache/token_codec.h"

namespace kvcast::kvcache {

int ScaleBlock(KvFormat format, int head_dim) {
  if (KvFormatBits(format) == 4 && head_dim % 32 == 0) return 32;
  return head_dim;
}

TokenCodec::TokenCodec(const KvLayout& layout, KvFormat format)
    : layout_(layout),
      format_(format),
      block_(ScaleBlock(format, layout.head_dim)),
      row_bytes_(KvRowBytes(format, layout.num_kv_heads, layout.head_dim, block_)) {}

void TokenCodec::Encode(Backend* backend, const KvPagePool& pool,
                        absl::Span<const int32_t> slots, uint8_t* out) const {
  const size_t stride = token_bytes();
  for (int l = 0; l < layout_.num_layers; ++l) {
    uint8_t* k_out = out + size_t(2 * l) * row_bytes_;
    backend->EncodeKv(format_, block_, pool.k_cache(l), slots.data(), slots.size(),
                      layout_.num_kv_heads, layout_.head_dim, k_out, stride);
    backend->EncodeKv(format_, block_, pool.v_cache(l), slots.data(), slots.size(),
                      layout_.num_kv_heads, layout_.head_dim, k_out + row_bytes_, stride);
  }
}

void TokenCodec::Decode(Backend* backend, const uint8_t* in, absl::Span<const int32_t> slots,
                        KvPagePool* pool) const {
  const size_t stride = token_bytes();
  for (int l = 0; l < layout_.num_layers; ++l) {
    const uint8_t* k_in = in + size_t(2 * l) * row_bytes_;
    backend->DecodeKv(format_, block_, k_in, stride, slots.size(), layout_.num_kv_heads,
                      layout_.head_dim, slots.data(), pool->k_cache(l));
    backend->DecodeKv(format_, block_, k_in + row_bytes_, stride, slots.size(),
                      layout_.num_kv_heads, layout_.head_dim, slots.data(), pool->v_cache(l));
  }
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

}  // namespace kvcast::kvcache
