// A KV track's codec applied where the harness needs it (docs/kv-quality.md):
//
//  - TrackTransfer (product mode): a prompt's KV from its pages through the
//    track's real wire codec, group by group, as a prefill worker publishes
//    it (engine/kv/token_codec.h, transport/kvcache/ac_pages.h), into other
//    pages as a decode worker lands it; the payload bytes counted.
//  - RoundTripBackend (all-KV mode): a backend whose WriteKv stores every
//    K/V row the model computes as the track's decoder gives it back, so
//    attention reads only coded KV, the current token's included.
//
// Thread safety: none; one thread (the model's) uses each.
#ifndef KVCAST_TOOLS_KVQUALITY_TRACK_CODECS_H_
#define KVCAST_TOOLS_KVQUALITY_TRACK_CODECS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/kv/kv_page_pool.h"
#include "kernels/forwarding_backend.h"
#include "transport/kvcache/ac/ac_codec.h"
#include "transport/kvcache/ac_pages.h"
#include "transport/kvcache/naming.h"

namespace kvcast::kvquality {

// A track as the harness judges it: a wire compression, with or without
// the rotation study (rotation.h) around a row format's codec.
struct HarnessTrack {
  kvcache::KvCompression compression;
  bool rotate = false;
};
// A track name ("int8", "ac", ...), or a row format's with "+rot"
// ("int4+rot"). InvalidArgument naming the known tracks, or saying that
// the ac tracks do not rotate.
absl::StatusOr<HarnessTrack> ParseTrack(std::string_view name);

class TrackTransfer {
 public:
  explicit TrackTransfer(const KvLayout& layout);

  // Encodes the tokens at src_slots (in order) into `track`'s objects in
  // groups of group_tokens, decodes each group into the same positions of
  // dst_slots; returns the objects' payload bytes (headers, scales and
  // tables included). A rotated track codes each rotated row, its bytes
  // those of its format. InvalidArgument for slot lists of different sizes,
  // an ac track this shape has not, or a rotation of heads that cannot
  // rotate; the codecs' errors.
  absl::StatusOr<size_t> Transfer(const HarnessTrack& track, Backend* backend, KvPagePool* pool,
                                  absl::Span<const int32_t> src_slots,
                                  absl::Span<const int32_t> dst_slots, int group_tokens);

 private:
  // The rotated row path of Transfer.
  absl::StatusOr<size_t> TransferRotated(KvFormat format, Backend* backend, KvPagePool* pool,
                                         absl::Span<const int32_t> src_slots,
                                         absl::Span<const int32_t> dst_slots);

  const KvLayout layout_;
  kvcache::AcPageCodec ac_;
  std::vector<uint8_t> bytes_;
  std::vector<std::vector<uint8_t>> objects_;
  std::vector<float> rows_;
};

class RoundTripBackend : public ForwardingBackend {
 public:
  explicit RoundTripBackend(Backend* inner) : ForwardingBackend(inner) {}

  // From now on WriteKv into `pool`'s layers codes rows through `track`
  // (nullopt: stores them exactly, as the inner backend does). The rows of
  // one WriteKv call are one group for the ac tracks, so a caller forwards
  // group-sized chunks. InvalidArgument for an ac track the pool's shape
  // has not.
  absl::Status SetTrack(std::optional<HarnessTrack> track, const KvPagePool* pool);

  void WriteKv(const float* k, const float* v, int num_tokens, int stride, const int32_t* slots,
               int num_kv_heads, int head_dim, KvStorage storage, void* k_cache,
               void* v_cache) override;

  // The first error of a round trip since the last call (an ac group that
  // did not decode; WriteKv cannot return it), then OK again.
  absl::Status TakeError();

 private:
  // Replaces rows_ ([tokens][K row, V row]) by what `track_` gives back for
  // them, layer `layer`'s.
  void RoundTrip(int layer, int tokens, int row_floats);

  std::optional<HarnessTrack> track_;
  absl::Status error_;
  const KvPagePool* pool_ = nullptr;
  std::vector<float> rows_;
  std::vector<uint8_t> coded_;
  std::vector<std::vector<uint8_t>> objects_;
  std::vector<std::unique_ptr<kvcache::ac::AcGroupEncoder>> ac_encoders_;  // per layer
  std::unique_ptr<kvcache::ac::AcGroupDecoder> ac_decoder_;
};

}  // namespace kvcast::kvquality

#endif  // KVCAST_TOOLS_KVQUALITY_TRACK_CODECS_H_
