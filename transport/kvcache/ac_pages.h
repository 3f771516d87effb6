// The arithmetic-coded tracks ("ac", "ac-lo") between a page pool and
// objects: a group's tokens are read through the backend as fp16 token
// payloads (so any backend serves them) and coded by
// ac::AcGroupEncoder::EncodeHalf; landing decodes a whole group with
// ac::AcGroupDecoder::DecodeGroupHalf into fp16 payloads and writes them
// back. The fp16 step rounds by at most 2^-11 of a value, far inside the
// tracks' quantization steps.
//
// Thread safety: none (scratch buffers are reused); one per loop thread.
#ifndef KVCAST_TRANSPORT_KVCACHE_AC_PAGES_H_
#define KVCAST_TRANSPORT_KVCACHE_AC_PAGES_H_

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/kv/kv_page_pool.h"
#include "kernels/backend.h"
#include "transport/kvcache/ac/ac_codec.h"
#include "engine/kv/token_codec.h"

namespace kvcast::kvcache {

class AcPageCodec {
 public:
  explicit AcPageCodec(const KvLayout& layout);

  // InvalidArgument when this model's shape has no ac track (ac::ValidateShape).
  absl::Status Supported() const { return ac::ValidateShape(shape_); }

  // (*objects)[t] = object t of the group whose tokens sit at `slots` (the
  // whole group, in order): Gather, then EncodeGathered. starts_sequence:
  // the group is the prompt's first (its token 0 the attention sink,
  // ac::AcPolicy::sink_shift). Errors: Gather's.
  absl::Status Encode(const ac::AcPolicy& policy, Backend* backend, const KvPagePool& pool,
                      absl::Span<const int32_t> slots, std::vector<std::vector<uint8_t>>* objects,
                      bool starts_sequence = false);
  // The two halves of Encode. Gather reads the tokens at `slots` through
  // the backend as fp16 token payloads into *half (the thread that owns the
  // pool); EncodeGathered codes such payloads of `tokens` tokens and touches
  // neither pool nor backend (any thread, one at a time per codec).
  // Gather's errors: the backend's transfer's.
  absl::Status Gather(Backend* backend, const KvPagePool& pool, absl::Span<const int32_t> slots,
                      std::vector<uint8_t>* half) const;
  void EncodeGathered(const ac::AcPolicy& policy, const uint8_t* half, int tokens,
                      std::vector<std::vector<uint8_t>>* objects, bool starts_sequence = false);

  // Decodes a whole group, objects[t] = object t's payload, into `slots` of
  // `pool`. The errors of ac::AcGroupDecoder::DecodeGroup (nothing is
  // written) and of Scatter.
  absl::Status Decode(Backend* backend, absl::Span<const absl::Span<const uint8_t>> objects,
                      absl::Span<const int32_t> slots, KvPagePool* pool);
  // The two halves of Decode. DecodeToHalf decodes a group's objects into
  // fp16 token payloads in *half and touches neither pool nor backend (any
  // thread, one at a time per codec; same errors as Decode); Scatter writes
  // such payloads into `slots` through the backend (the pool's thread;
  // errors: the backend's transfer's).
  absl::Status DecodeToHalf(absl::Span<const absl::Span<const uint8_t>> objects,
                            std::vector<uint8_t>* half);
  absl::Status Scatter(Backend* backend, const uint8_t* half, absl::Span<const int32_t> slots,
                       KvPagePool* pool) const;

 private:
  const KvLayout layout_;
  const ac::AcShape shape_;
  const TokenCodec fp16_;
  std::map<const ac::AcPolicy*, std::unique_ptr<ac::AcGroupEncoder>> encoders_;
  std::unique_ptr<ac::AcGroupDecoder> decoder_;
  std::vector<uint8_t> half_;  // fp16 token payloads of a group
};

}  // namespace kvcast::kvcache

#endif  // KVCAST_TRANSPORT_KVCACHE_AC_PAGES_H_
