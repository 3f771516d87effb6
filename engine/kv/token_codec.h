// TokenCodec: one token's KV <-> one KVCache object payload (wire format v1,
// docs/kvcache-wire-format.md).
//
// Payload of a token = for each layer 0..L-1: its K row, then its V row,
// each an encoded row of kernels/kv_codec.h (num_kv_heads * head_dim values,
// scales first). Every token of a format has the same size, token_bytes().
//
// Encode/Decode are one Backend::EncodeKv / DecodeKv call over every layer;
// their byte buffers are host memory, ideally from Backend::AllocateStaging
// (page-locked on a GPU, so the copy to or from the device is one DMA).
//
// A rotated codec (the int4-rot and fp4-e2m1-rot tracks) codes each head's
// values Hadamard-rotated (kernels/hadamard.h): y = H (D x) of the token's
// fp16 values, whatever the pages' storage, so every backend sends the
// same bytes; decoded, x = D (H y) / d, rounded to fp16 into the pages. It
// goes through the host: one fp16 EncodeKv / DecodeKv call, the rotation
// and the row codec on the calling thread.
//
// Thread safety: immutable after construction; Encode/Decode follow the
// backend's threading contract.
#ifndef KVCAST_ENGINE_KV_TOKEN_CODEC_H_
#define KVCAST_ENGINE_KV_TOKEN_CODEC_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "engine/kv/kv_page_pool.h"
#include "kernels/backend.h"
#include "kernels/kv_codec.h"

namespace kvcast {

// Values per scale in wire format v1: one scale per head for the 8-bit
// formats, one per 32 values for the 4-bit ones (per head when head_dim is
// not a multiple of 32). Unscaled formats: head_dim (unused).
int ScaleBlock(KvFormat format, int head_dim);

class TokenCodec {
 public:
  TokenCodec(const KvLayout& layout, KvFormat format, bool rotated = false);

  KvFormat format() const { return format_; }
  bool rotated() const { return rotated_; }
  // InvalidArgument when the layout's heads cannot rotate (head_dim not a
  // power of two, 2 .. 1024) and the codec is rotated; else OK. Encode and
  // Decode require it.
  absl::Status Supported() const;
  int block() const { return block_; }
  size_t row_bytes() const { return row_bytes_; }
  size_t token_bytes() const { return row_bytes_ * 2 * layout_.num_layers; }

  // Encodes the tokens at `slots` of `pool` into `out`, token t at
  // out + t * token_bytes(). Errors: the backend's transfer's.
  absl::Status Encode(Backend* backend, const KvPagePool& pool, absl::Span<const int32_t> slots,
                      uint8_t* out) const;
  // Decodes token t at in + t * token_bytes() into slot slots[t] of `pool`.
  // Errors: the backend's transfer's (those slots are then undefined).
  absl::Status Decode(Backend* backend, const uint8_t* in, absl::Span<const int32_t> slots,
                      KvPagePool* pool) const;

 private:
  // Every layer's K and V of `pool`, in payload order.
  KvArrays Arrays(const KvPagePool& pool) const;
  absl::Status EncodeRotated(Backend* backend, const KvPagePool& pool,
                             absl::Span<const int32_t> slots, uint8_t* out) const;
  absl::Status DecodeRotated(Backend* backend, const uint8_t* in,
                             absl::Span<const int32_t> slots, KvPagePool* pool) const;

  const KvLayout layout_;
  const KvFormat format_;
  const bool rotated_;
  const int block_;
  const size_t row_bytes_;
};

// The KV slots of tokens [first, first + count) of a sequence whose tokens
// start at slot 0 of `pages` (page_tokens tokens per page).
std::vector<int32_t> SlotsOf(absl::Span<const int32_t> pages, int page_tokens, int first,
                             int count);

}  // namespace kvcast

#endif  // KVCAST_ENGINE_KV_TOKEN_CODEC_H_
