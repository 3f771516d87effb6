// The cross-layer transform tracks ("xl", issue 42): a group of tokens
// coded as each token's coefficients in a model's KV basis (kv_basis.h:
// principal axes over groups of G layers, K before RoPE and V), quantized
// with one step per kind, entropy-coded with rANS (ac/rans.h) under one
// table per class of components. Byte layout: docs/kvcache-wire-format.md,
// "The xl tracks".
//
// Per basis block (a group of layers, K or V) and the point's step s for
// its kind, component i (variances descending) is coded when its
// calibration variance is at least s^2 / 12 (the reverse water-filling
// rule: a component below it costs more bits than the error it removes),
// so the coded components are a prefix of each block; its class is
// clamp(floor(4 log2(sqrt(variance_i) / s)) + 8, 0, 47), which groups
// components of like spread under one probability table. Codes q =
// round(c / s) of the coefficients c = u_i . (x - mean); the values come
// back as mean + sum_i q_i s u_i. The sequence's first token (the
// attention sink) can travel as fp16 values instead.
//
// Objects are one per token: object 0 = group header + token 0, object t =
// token t; each token's section decodes on its own (no deltas between
// tokens), given the header.
//
// Thread safety: an encoder or decoder is used by one thread at a time.
#ifndef KVCAST_TRANSPORT_KVCACHE_XL_XL_CODEC_H_
#define KVCAST_TRANSPORT_KVCACHE_XL_XL_CODEC_H_

#include <cstdint>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "transport/kvcache/xl/kv_basis.h"
#include "transport/kvcache/xl/xl_point.h"

namespace kvcast::kvcache::xl {

inline constexpr uint8_t kFormatVersion = 1;
inline constexpr int kClasses = 48;

// The absolute (K, V) steps of `point` over `basis`.
std::pair<float, float> StepsOf(const KvBasis& basis, const XlPoint& point);

// Which components of a basis a point codes, and their tables.
struct XlPlan {
  // Per block (group, kind) in basis order: coded components (a prefix).
  std::vector<int> kept;
  // Per coefficient of a token, in order: its table, kind * kClasses +
  // its component's class.
  std::vector<uint8_t> tables;
  int total_kept = 0;  // coefficients a token
};
XlPlan PlanOf(const KvBasis& basis, float k_step, float v_step);

class XlGroupEncoder {
 public:
  // The point's steps must be positive and finite.
  XlGroupEncoder(std::shared_ptr<const KvBasis> basis, const XlPoint& point);
  float k_step() const { return k_step_; }
  float v_step() const { return v_step_; }

  // Encodes `tokens` (1..65535) tokens, token t's token_floats() values at
  // kv + t * token_floats() (K before RoPE); (*objects)[t] gets object t's
  // payload. starts_sequence: token 0 is the sequence's first, sent as fp16.
  void Encode(const float* kv, int tokens, std::vector<std::vector<uint8_t>>* objects,
              bool starts_sequence = false);

 private:
  const std::shared_ptr<const KvBasis> basis_;
  const float k_step_, v_step_;
  const XlPlan plan_;
  std::vector<float> x_, coef_;
  std::vector<int32_t> codes_;            // tokens x total_kept
};

class XlGroupDecoder {
 public:
  explicit XlGroupDecoder(std::shared_ptr<const KvBasis> basis);

  // Decodes a whole group, objects[t] = object t's payload, into out[0, T *
  // token_floats()) (K before RoPE). InvalidArgument for a header of
  // another version, shape or basis, or objects.size() other than the
  // header's T; DataLoss for a payload that does not decode exactly
  // (truncated, trailing bytes, bad tables, rANS states that do not end at
  // 2^16). Nothing is written on an error.
  absl::Status DecodeGroup(absl::Span<const absl::Span<const uint8_t>> objects, float* out);

 private:
  const std::shared_ptr<const KvBasis> basis_;
  float k_step_ = 0, v_step_ = 0;
  XlPlan plan_;
  std::vector<int32_t> codes_;
  std::vector<float> coef_, x_, block_;
  std::vector<uint32_t> slots_;  // per (kind, class) x kProbScale
};

}  // namespace kvcast::kvcache::xl

#endif  // KVCAST_TRANSPORT_KVCACHE_XL_XL_CODEC_H_
