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
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/kv/kv_page_pool.h"
#include "kernels/forwarding_backend.h"
#include "transport/kvcache/ac/ac_codec.h"
#include "transport/kvcache/ac/ac_tuning.h"
#include "transport/kvcache/ac_pages.h"
#include "transport/kvcache/naming.h"
#include "transport/kvcache/xl/kv_basis.h"
#include "transport/kvcache/xl/xl_codec.h"
#include "transport/kvcache/xl_pages.h"

namespace kvcast::kvquality {

// A track as the harness judges it: a wire compression (a row format's
// rotated or not, for any format: TokenCodec).
struct HarnessTrack {
  kvcache::KvCompression compression;
  // An ac operating point of the harness's own ("ac@K/V"), which
  // compression.ac points to.
  std::shared_ptr<const kvcache::ac::AcPolicy> explored;
  // A cross-layer transform point ("xl@K_STEP/V_STEP", or the wire's "xl"
  // and "xl-lo": xl/xl_point.h), coded over the evaluation's KV basis
  // (modes product and all-kv-token); compression is then unused.
  std::optional<kvcache::xl::XlPoint> xl;
};
// A track name ("int8", "int4-rot", "ac", ...); a row format's with "+rot"
// (its heads rotated around the row codec, as the wire's rotated tracks:
// "int4+rot" is "int4-rot", "int8+rot" a harness-only point; an ac track's
// "+rot" is its policy's wire rotation, ac::AcPolicy::rotate); or "ac@K/V":
// the ac coder at K levels for K units and V
// for V units (any levels > 0: the operating points' space; one decoder
// reads them all); or "xl@KS/VS": the cross-layer transform at steps KS
// for K coefficients and VS for V (any steps > 0). An ac track may end in
//  - "+tuned": the model's per-layer levels from `tuning` (ac_tuning.h);
//  - "+kw": the tuning's K channel weights (transform 2; with "+rot");
//  - "+sinkN": the sequence's first token at steps 2^N finer
//    (ac::AcPolicy::sink_shift);
//  - "#LnK" or "#LnV" (a probe): only layer n's K (or V) units at the
//    point's levels, every other unit at kProbeExactLevels (as good as
//    exact): how sensitive the model is to that layer's K or V.
// InvalidArgument naming the known tracks, for levels that are not
// positive numbers, a malformed probe, or "+tuned" without a tuning.
absl::StatusOr<HarnessTrack> ParseTrack(std::string_view name,
                                        const kvcache::ac::AcLayerTuning* tuning = nullptr);
inline constexpr float kProbeExactLevels = 32767;  // the codes' int16 range
// The probe tracks of every layer of a model: "BASE#L0K", "BASE#L0V", ...
std::vector<std::string> ProbeTracks(std::string_view base, int layers);

// Codes groups of float tokens in place through a track: each token is
// `layers` layers' K row then V row (num_kv_heads * head_dim values each),
// as an ac group holds them, and becomes what the track's decoder gives
// back for it.
class FloatGroupCoder {
 public:
  FloatGroupCoder(int layers, int num_kv_heads, int head_dim);

  // Codes `count` tokens at `tokens` as one group; returns the objects'
  // bytes. An ac track's levels are those of layers [first_layer,
  // first_layer + layers); starts_sequence: token 0 is the sequence's first
  // (ac::AcPolicy::sink_shift). Errors: a group that did not decode.
  absl::StatusOr<size_t> Code(const kvcache::KvCompression& track, float* tokens, int count,
                              int first_layer = 0, bool starts_sequence = false);

 private:
  const int layers_, heads_, head_dim_;
  std::map<std::pair<const kvcache::ac::AcPolicy*, int>,
           std::unique_ptr<kvcache::ac::AcGroupEncoder>> encoders_;
  std::unique_ptr<kvcache::ac::AcGroupDecoder> decoder_;
  std::vector<std::vector<uint8_t>> objects_;
  std::vector<uint8_t> row_;
};

class TrackTransfer {
 public:
  // rope_inv_freq: the model's RoPE inverse frequencies (head_dim / 2), to
  // take RoPE off K for the xl tracks and the basis; basis: the xl tracks'
  // (none: they are refused).
  TrackTransfer(const KvLayout& layout, std::vector<float> rope_inv_freq,
                std::shared_ptr<const kvcache::xl::KvBasis> basis = nullptr);

  // Encodes the tokens at src_slots (in order) into `track`'s objects in
  // groups of group_tokens, decodes each group into the same positions of
  // dst_slots; returns the objects' payload bytes (headers, scales and
  // tables included). A rotated track codes the rotated values, its bytes
  // those of its format; an xl track codes K before RoPE. first_position:
  // the position of src_slots[0] (0: its first token is the sequence's);
  // src and dst may be the same slots. InvalidArgument for slot lists of
  // different sizes, an ac track this shape has not, a rotation of heads
  // that cannot rotate (TokenCodec::Supported), or an xl track without a
  // basis of this shape; the codecs' errors.
  absl::StatusOr<size_t> Transfer(const HarnessTrack& track, Backend* backend, KvPagePool* pool,
                                  absl::Span<const int32_t> src_slots,
                                  absl::Span<const int32_t> dst_slots, int group_tokens,
                                  int first_position = 0);

  // The tokens at `slots` (token i at position first_position + i) as
  // floats in the ac token layout (per layer, K row then V row), K with
  // RoPE taken off: what the KV basis is fitted to. The backend's
  // transfer's errors.
  absl::StatusOr<std::vector<float>> PreRopeTokens(Backend* backend, const KvPagePool& pool,
                                                   absl::Span<const int32_t> slots,
                                                   int first_position = 0);

 private:
  const KvLayout layout_;
  kvcache::AcPageCodec ac_;
  kvcache::XlPageCodec xl_;
  std::vector<uint8_t> bytes_;
  std::vector<std::vector<uint8_t>> objects_;
};

class RoundTripBackend : public ForwardingBackend {
 public:
  explicit RoundTripBackend(Backend* inner) : ForwardingBackend(inner) {}

  // From now on WriteKv into `pool`'s layers codes rows through `track`
  // (nullopt: stores them exactly, as the inner backend does). The rows of
  // one WriteKv call are one group for the ac tracks, so a caller forwards
  // group-sized chunks; a chunk whose first slot is `sequence_start` starts
  // the sequence. InvalidArgument for a track the pool's shape has not (ac,
  // rotation) and for the xl tracks (a token's KV across layers: not
  // codable as the model writes it layer by layer).
  absl::Status SetTrack(std::optional<HarnessTrack> track, const KvPagePool* pool,
                        int32_t sequence_start = -1);

  void WriteKv(const float* k, const float* v, int num_tokens, int stride, const int32_t* slots,
               int num_kv_heads, int head_dim, KvStorage storage, void* k_cache,
               void* v_cache) override;

  // The first error of a round trip since the last call (an ac group that
  // did not decode; WriteKv cannot return it), then OK again.
  absl::Status TakeError();

 private:
  std::optional<HarnessTrack> track_;
  absl::Status error_;
  const KvPagePool* pool_ = nullptr;
  int32_t sequence_start_ = -1;
  std::unique_ptr<FloatGroupCoder> coder_;  // one layer's shape
  std::vector<float> rows_;
};

}  // namespace kvcast::kvquality

#endif  // KVCAST_TOOLS_KVQUALITY_TRACK_CODECS_H_
