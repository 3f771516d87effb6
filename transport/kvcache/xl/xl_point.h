// The xl tracks' operating points (xl_codec.h codes them): what a track
// name stands for, without the codec (the scheduler and relays name
// tracks and need no BLAS).
//
// Thread safety: immutable values.
#ifndef KVCAST_TRANSPORT_KVCACHE_XL_XL_POINT_H_
#define KVCAST_TRANSPORT_KVCACHE_XL_XL_POINT_H_

#include <string_view>

namespace kvcast::kvcache::xl {

// An operating point: the quantization steps of K and V coefficients,
// absolute, or (relative) in units of the basis' RMS per kind (the square
// root of the mean calibration variance over every block of that kind), so
// that one point means the same trade on models whose KV is scaled
// differently. The steps travel in the group header: a decoder needs no
// point.
struct XlPoint {
  std::string_view track;
  float k_step = 0;
  float v_step = 0;
  bool relative = false;
};
// "xl" (K 0.39, V 0.16 RMS) and "xl-lo" (K 0.98, V 0.32 RMS), relative: on
// SmolLM2-135M and natural text 2.46 and 1.51 bits a value (6.5x and 10.6x
// smaller than fp16) at -0.04% and +0.47% perplexity with the prompt's KV
// through the track (docs/benchmarks.md, "The xl codec").
const XlPoint& XlHigh();
const XlPoint& XlLow();
// The point of a track name; nullptr if it is not an xl track.
const XlPoint* XlPointOf(std::string_view track);

}  // namespace kvcast::kvcache::xl

#endif  // KVCAST_TRANSPORT_KVCACHE_XL_XL_POINT_H_
