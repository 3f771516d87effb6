// The cross-layer transform tracks ("xl") between a page pool and objects:
// a group's tokens are read through the backend as fp16 token payloads,
// widened, RoPE taken off each K row at its token's position (the basis
// is fitted to K before RoPE: xl/kv_basis.h) and coded by
// xl::XlGroupEncoder; landing decodes a whole group, puts RoPE back at the
// same positions and writes fp16 payloads into the pages.
//
// Encode and Decode each come in two halves, as AcPageCodec's: the pages'
// side (Gather, Scatter: the thread that owns the pool and backend) and
// the coding (EncodeGathered, DecodeToHalf: any thread, e.g. an
// AcCodecThread's).
//
// Thread safety: none (scratch buffers are reused); one per thread.
#ifndef KVCAST_TRANSPORT_KVCACHE_XL_PAGES_H_
#define KVCAST_TRANSPORT_KVCACHE_XL_PAGES_H_

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/kv/kv_page_pool.h"
#include "engine/kv/token_codec.h"
#include "kernels/backend.h"
#include "transport/kvcache/xl/kv_basis.h"
#include "transport/kvcache/xl/xl_codec.h"

namespace kvcast::kvcache {

class XlPageCodec {
 public:
  // rope_inv_freq: the model's RoPE inverse frequencies (head_dim / 2
  // values: engine/transformer.h's RopeInverseFrequencies); basis: the
  // model's (null: no xl track, Supported says so).
  XlPageCodec(const KvLayout& layout, std::vector<float> rope_inv_freq,
              std::shared_ptr<const xl::KvBasis> basis);

  // InvalidArgument without a basis, or with one of another shape.
  absl::Status Supported() const;
  const std::shared_ptr<const xl::KvBasis>& basis() const { return basis_; }
  const std::vector<float>& rope_inv_freq() const { return inv_freq_; }

  // The tokens at `slots` (token i at position first_position + i) as
  // floats in the token layout (per layer, K row then V row), K before
  // RoPE. The backend's transfer's errors.
  absl::Status GatherPreRope(Backend* backend, const KvPagePool& pool,
                             absl::Span<const int32_t> slots, int first_position,
                             std::vector<float>* out) const;

  // (*objects)[t] = object t of the group whose tokens sit at `slots` (the
  // whole group, in order; first_position 0: the sequence's first group,
  // its token 0 sent as fp16). Errors: Supported's, GatherPreRope's.
  absl::Status Encode(const xl::XlPoint& point, Backend* backend, const KvPagePool& pool,
                      absl::Span<const int32_t> slots, int first_position,
                      std::vector<std::vector<uint8_t>>* objects);

  // Decodes a whole group, objects[t] = object t's payload, into `slots`
  // (token i at position first_position + i). The errors of
  // xl::XlGroupDecoder::DecodeGroup (nothing written) and of the backend's
  // transfer; InvalidArgument for one object per slot not holding, or
  // Supported's.
  absl::Status Decode(Backend* backend, absl::Span<const absl::Span<const uint8_t>> objects,
                      absl::Span<const int32_t> slots, int first_position, KvPagePool* pool);

  // The halves. Gather: the tokens at `slots` as fp16 token payloads
  // (the backend's transfer's errors). EncodeGathered: such payloads of
  // `tokens` tokens coded as Encode codes them (Supported must hold).
  // DecodeToHalf: a group decoded into fp16 payloads (Decode's errors
  // but the transfer's). Scatter: payloads written into `slots`.
  absl::Status Gather(Backend* backend, const KvPagePool& pool, absl::Span<const int32_t> slots,
                      std::vector<uint8_t>* half) const;
  void EncodeGathered(const xl::XlPoint& point, const uint8_t* half, int tokens,
                      int first_position, std::vector<std::vector<uint8_t>>* objects);
  absl::Status DecodeToHalf(absl::Span<const absl::Span<const uint8_t>> objects,
                            int first_position, std::vector<uint8_t>* half);
  absl::Status Scatter(Backend* backend, const uint8_t* half, absl::Span<const int32_t> slots,
                       KvPagePool* pool) const;

 private:
  // Turns every K row of `count` tokens at `tokens` (token i at position
  // first_position + i) by RoPE's angles times `sign` (-1: takes it off).
  void RotateK(float* tokens, int count, int first_position, int sign) const;
  // fp16 payloads of `count` tokens widened into *out, RoPE taken off K.
  void WidenPreRope(const uint8_t* half, int count, int first_position,
                    std::vector<float>* out) const;

  const KvLayout layout_;
  const std::vector<float> inv_freq_;
  const std::shared_ptr<const xl::KvBasis> basis_;
  const TokenCodec fp16_;
  std::map<std::pair<float, float>, std::unique_ptr<xl::XlGroupEncoder>> encoders_;
  std::unique_ptr<xl::XlGroupDecoder> decoder_;
  std::vector<float> floats_;
  std::vector<uint8_t> half_;
};

}  // namespace kvcast::kvcache

#endif  // KVCAST_TRANSPORT_KVCACHE_XL_PAGES_H_
