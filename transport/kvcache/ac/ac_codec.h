// The arithmetic-coded KV tracks ("ac", "ac-lo"): one group of tokens (a
// 128-token chunk) coded like a video group of pictures. Byte layout and
// arithmetic: docs/kvcache-wire-format.md, "The ac tracks".
//
// Per group, per unit u = (layer, K or V, KV head): one quantization step
// (the unit's largest magnitude in the group over the operating point's
// levels for that layer), made 2^k times finer for a token whose own
// largest magnitude is 2^k times smaller (per token and unit: the
// attention sink's tiny V needs it), integer codes q = round(x / step); per
// channel of the unit, a mode: raw (code q) or delta (q minus the same
// channel's code in the previous token, when both have the same step),
// whichever is cheaper over the group; residuals
// zigzagged and rANS-coded (rans.h, 16 lanes) with two probability tables
// per unit (raw, delta) that travel in the group's first object. Objects
// stay one per token: object 0 = group header + token 0, object t = token t.
// A decoder takes a group's objects in order (delta channels need the
// previous token's codes), as a subgroup stream delivers them. A group may
// code each unit's values Hadamard-rotated (header version 2, transform 1:
// kernels/hadamard.h), rotated back after decoding.
//
// The operating point only changes the encoder's choice of steps; one
// decoder reads every ac track.
//
// Thread safety: an encoder or decoder is used by one thread at a time;
// different instances are independent.
#ifndef KVCAST_TRANSPORT_KVCACHE_AC_AC_CODEC_H_
#define KVCAST_TRANSPORT_KVCACHE_AC_AC_CODEC_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "transport/kvcache/ac/internal/encode_kernels.h"
#include "transport/kvcache/ac/internal/unit_kernels.h"
#include "transport/kvcache/ac/rans.h"

namespace kvcast::kvcache::ac {

// Version 1: values coded as they are. Version 2: the header's second byte
// names a transform of each unit's values (kTransformNone, or
// kTransformHadamard: kernels/hadamard.h's rotation, undone after
// decoding). Encoders write version 1 for untransformed groups.
inline constexpr uint8_t kFormatVersion = 1;
inline constexpr uint8_t kTransformedFormatVersion = 2;
inline constexpr uint8_t kTransformNone = 0;
inline constexpr uint8_t kTransformHadamard = 1;
// Transform 2: each K unit's channels multiplied by per-channel weights
// (one byte each in the header: AcChannelWeight) before the rotation, and
// divided by them after the inverse; V units as transform 1.
inline constexpr uint8_t kTransformWeightedHadamard = 2;

// A K channel weight's code: w = 2^((code - 128) / 16), computed exactly as
// AcChannelWeight does (docs/kvcache-wire-format.md, "Transform").
float AcChannelWeight(uint8_t code);
// The code of the weight nearest `w` in log scale (clamped to 0 .. 255).
uint8_t AcChannelWeightCode(float w);

// Token shape: a token's values are, for each layer, its K row then its V
// row, each num_kv_heads * head_dim floats (heads in order).
struct AcShape {
  int num_layers = 0;
  int num_kv_heads = 0;
  int head_dim = 0;  // a multiple of 16 (one rANS block never spans two units)
  int token_floats() const { return num_layers * 2 * num_kv_heads * head_dim; }
  int num_units() const { return num_layers * 2 * num_kv_heads; }
};
// InvalidArgument unless every field is positive and head_dim % 16 == 0.
absl::Status ValidateShape(const AcShape& shape);

// An operating point: the levels per unit amax (|q| <= levels) of K units
// and of V units (K is the sensitive half), times a per-layer scale where
// a model's tuning gives one (more levels in the layers it is more
// sensitive in; layers past the vectors' ends, and every layer without a
// tuning, at 1). The steps travel in the group header, so a decoder needs
// no tuning.
struct AcPolicy {
  std::string_view track;
  float k_levels = 0;
  float v_levels = 0;
  std::vector<float> k_layer_scale, v_layer_scale;
  // The sequence's first token (the attention sink, whose K is the largest
  // and whose logits every query reads) gets steps 2^sink_shift finer
  // than its own magnitude gives (bounded so that its codes fit 16 bits),
  // in a group that starts the sequence (the encoder is told so).
  int sink_shift = 0;
  // Each unit's values rotated (kernels/hadamard.h) before they are
  // quantized, and back after decoding: an outlier channel no longer sets
  // the step of its whole head. Heads whose size is not a power of two
  // (kernels/hadamard.h) are coded as they are.
  bool rotate = false;
  // With rotate: each K unit's channels weighted before the rotation
  // (transform 2), in proportion to how much a coding error in the channel
  // moves the attention scores (the energy of the queries that read it),
  // so the rotated values' uniform error lands where it matters least.
  // Per layer, KV head and channel (empty: none); layers past its end at 1.
  std::vector<float> k_channel_weights;
  // Whether a worker's tuning gives this point its K channel weights (they
  // paid at ac-lo's few levels, not at ac's: docs/benchmarks.md).
  bool takes_channel_weights = false;
  float LevelsOf(int layer, bool is_v) const {
    const std::vector<float>& s = is_v ? v_layer_scale : k_layer_scale;
    return (is_v ? v_levels : k_levels) * (layer < int(s.size()) ? s[layer] : 1.f);
  }
};
// "ac" (K 11 levels, V 6) and "ac-lo" (K 6, V 2), both rotated, the
// attention sink at steps 2^6 finer: on SmolLM2-135M and natural text 3.19
// and 2.04 bits a value (5.0x and 7.8x smaller than fp16) at +0.42% and
// +2.4% perplexity with the prompt's KV through the track
// (docs/benchmarks.md, "KV quality on natural text").
const AcPolicy& AcHigh();
const AcPolicy& AcLow();
// The policy of a track name; nullptr if it is not an ac track.
const AcPolicy* AcPolicyOf(std::string_view track);

class AcGroupEncoder {
 public:
  AcGroupEncoder(const AcShape& shape, const AcPolicy& policy);

  // Encodes `tokens` (1..65535) tokens, token t's token_floats() values at
  // kv + t * token_floats(); (*objects)[t] gets object t's payload.
  // starts_sequence: token 0 is the sequence's first (AcPolicy::sink_shift).
  void Encode(const float* kv, int tokens, std::vector<std::vector<uint8_t>>* objects,
              bool starts_sequence = false);
  // The same from fp16 values (IEEE binary16 bits), as KV pages hold them:
  // the bytes Encode gives for their float values, without a float copy.
  void EncodeHalf(const uint16_t* kv, int tokens, std::vector<std::vector<uint8_t>>* objects,
                  bool starts_sequence = false);

 private:
  // Encode of float or fp16 (uint16_t) values.
  template <typename T>
  void EncodeValues(const T* kv, int tokens, std::vector<std::vector<uint8_t>>* objects,
                    bool starts_sequence);
  // Steps and shifts of units [lo, hi).
  template <typename T>
  void ChooseSteps(const T* kv, int tokens, int lo, int hi, bool starts_sequence);
  // Unit u of every token, from the values to its rANS symbols (the
  // unit's modes and tables on the way), prefetching lines of `next`.
  template <typename T>
  void EncodeUnit(const T* kv, int tokens, int u, internal::LinePrefetch* next);
  void ChooseTables(int u);
  void AppendHeader(int tokens, std::vector<uint8_t>* out) const;
  // Whether token t codes unit u against token t - 1 (same step).
  bool SameShift(int t, int u) const {
    const size_t units = steps_.size();
    return t > 0 && shifts_[t * units + u] == shifts_[(t - 1) * units + u];
  }

  // Values of a rotating policy into rotated_, a head at a time (widened
  // from fp16 when T is uint16_t), weighted (transform 2) and rotated.
  template <typename T>
  void Rotate(const T* kv, int tokens);

  const AcShape shape_;
  const AcPolicy policy_;
  const internal::EncoderKernels kernels_;
  // Transform 2: per K unit (layer x head) x channel, the weights' codes
  // and values (empty: no weights).
  std::vector<uint8_t> weight_codes_;
  std::vector<float> weights_;
  std::vector<float> steps_;         // per unit (NaN: non-finite input)
  std::vector<uint8_t> shifts_;      // tokens x units: token step = unit step / 2^shift
  std::vector<uint16_t> masks_;      // per unit x block of 16 channels: delta channels
  std::vector<uint16_t> freqs_[2];   // per unit x kMaxSymbols, raw / delta tables
  std::vector<int> nsym_[2];         // per unit (0: table unused)
  // Scratch for one unit of every token (or a chunk of units), kept
  // between groups: a group is coded unit by unit, from the last (rANS
  // codes backwards), each unit through every pass while it is in cache.
  std::vector<float> tok_amax_;      // tokens x chunk units
  std::vector<float> inv_;           // per token: 1 / its step
  std::vector<uint8_t> same_;        // per token: SameShift
  std::vector<int16_t> codes_;       // tokens x head_dim
  std::vector<uint16_t> symbols_;    // tokens x head_dim: table index (encode_kernels.h)
  std::vector<uint32_t> raw_cost_, delta_cost_;  // per channel
  std::vector<uint32_t> counts_;     // (raw, delta) x kMaxSymbols
  std::vector<uint32_t> fc_;         // the unit's tables: (raw, delta) x kMaxSymbols (rans.h)
  std::vector<double> rcp_;
  std::vector<uint8_t> words_;       // every token's word stream, built backwards
  std::vector<float> rotated_;       // a rotating policy's values, rotated
  std::vector<internal::EncodeStream> streams_;  // per token
};

class AcGroupDecoder {
 public:
  explicit AcGroupDecoder(const AcShape& shape);

  // Decodes object `object_id` of the group into out[0, token_floats()).
  // Objects must come in order 0, 1, 2, ...; object 0 starts a new group.
  // Errors: InvalidArgument for an object out of order or a header of
  // another shape; DataLoss for a payload that does not decode exactly
  // (truncated, trailing bytes, bad tables, rANS states that do not end at
  // 2^16). After an error the decoder needs object 0 again.
  absl::Status Decode(int object_id, absl::Span<const uint8_t> payload, float* out);

  // Decodes a whole group, objects[t] = object t's payload, into out[0,
  // T * token_floats()): the same result and errors as Decode of each in
  // order, faster (a run of units over all tokens at a time, so that the
  // run's tables stay in cache). InvalidArgument when objects.size() is not
  // the header's T.
  absl::Status DecodeGroup(absl::Span<const absl::Span<const uint8_t>> objects, float* out);
  // The same with each value narrowed to fp16 (IEEE binary16 bits, rounded
  // to nearest even) as it is stored, as KV pages hold them: FloatToHalf
  // of DecodeGroup's floats, without a float copy.
  absl::Status DecodeGroupHalf(absl::Span<const absl::Span<const uint8_t>> objects,
                               uint16_t* out);

  int tokens_in_group() const { return tokens_; }  // from object 0's header (0 before)

 private:
  // Where one token's section is being read.
  struct Cursor : internal::DecodeCursor {
    const uint8_t* shifts;
  };
  absl::Status ParseHeader(const uint8_t** p, const uint8_t* end);
  // Unit u's decoder tables (raw, then delta if it has one) into
  // slots[0, 2 kProbScale), from the frequencies ParseHeader checked.
  void BuildTables(int u, uint32_t* slots) const;
  absl::Status OpenToken(const uint8_t* p, const uint8_t* end, Cursor* cur) const;
  // Unit u of tokens t .. t+count-1 (count <= internal::kMaxTokensPerCall)
  // from cursors curs[0, count) into token k's d values at out + k *
  // out_stride, with the unit's tables `slots`. A unit's tokens decode in
  // order.
  template <typename Out>
  absl::Status DecodeUnit(int t, int count, int u, Cursor* curs, const uint32_t* slots, Out* out,
                          size_t out_stride);
  // DecodeGroup into float or fp16 (uint16_t) values.
  template <typename Out>
  absl::Status DecodeRuns(absl::Span<const absl::Span<const uint8_t>> objects, Out* out);
  // Prefetches the lines a token's units [u0, u1) read: the step shifts
  // and, from cursor cur, the words and escapes.
  void Prefetch(const Cursor& cur, int u0, int u1) const;
  absl::Status CloseToken(const Cursor& cur) const;
  // DecodeGroup's run of units whose tables it keeps (256 KB: in L2).
  static constexpr int kRunUnits = 8;
  static constexpr int kPrefetchAhead = 16;  // tokens

  const AcShape shape_;
  int tokens_ = 0;
  int next_ = 0;  // the object expected next
  const internal::DecodeUnitFn decode_unit_;
  const internal::DecodeUnitHalfFn decode_unit_half_;
  const internal::BuildTableFn build_table_;
  const internal::NarrowHalfFn narrow_half_;
  std::vector<float> steps_;
  std::vector<uint16_t> masks_;  // as the encoder's
  std::vector<int> nsym_[2];
  std::vector<uint16_t> freqs_;  // per unit x (raw, delta) x kMaxSymbols
  // Decode's tables: per unit x (raw, delta) x kProbScale (rans.h), built
  // from object 0. DecodeGroup builds kRunUnits units' at a time into
  // run_slots_ instead, where they stay in cache while they are decoded
  // (every unit's at once were 16 MB on Llama-3-8B's shape, written to
  // memory and read back).
  std::vector<uint32_t> slots_;
  std::vector<uint32_t> run_slots_;
  std::vector<int32_t> prev_;  // the previous token's codes
  std::vector<uint8_t> prev_shift_;  // and step shifts
  uint8_t transform_ = kTransformNone;  // the group's, from its header
  std::vector<float> weights_;   // transform 2: per K unit x channel, from the header
  std::vector<float> unrotate_;  // a transformed unit's values before the inverse
};

}  // namespace kvcast::kvcache::ac

#endif  // KVCAST_TRANSPORT_KVCACHE_AC_AC_CODEC_H_
