// Interleaved rANS, the entropy coder of the arithmetic-coded KV tracks
// (docs/kvcache-wire-format.md, "The ac tracks", states the arithmetic so
// an independent decoder can be written from it).
//
//   state x: uint32, normalized to [2^16, 2^32) between symbols
//   probabilities: frequencies f_s summing to M = 2^12; C_s = sum of f_k, k < s
//   decode one symbol: slot = x mod M; s = the symbol with C_s <= slot < C_s + f_s;
//                      x = f_s * (x >> 12) + slot - C_s;
//                      if x < 2^16: x = (x << 16) | next 16-bit word of the stream
//   encode (symbols in reverse): if x >= f_s << 20: emit x & 0xffff, x >>= 16;
//                                x = ((x / f_s) << 12) + x mod f_s + C_s
//
// kLanes states run interleaved (symbol i of a run uses lane i mod kLanes)
// and share one word stream, read in symbol order. Encoders start every
// lane at 2^16, so a decoder that ends anywhere else was given a corrupt
// stream.
//
// Tables are flat arrays so that SIMD kernels can gather from them:
//   encoder: fc[s] = f_s << 16 | C_s and rcp[s] = 1.0 / f_s (double), kMaxSymbols each;
//   decoder: slot[k] = s << 24 | (f_s - 1) << 12 | C_s for the symbol s of slot k, kProbScale.
// x / f is floor(x * rcp + 2^-14) in double: exact for x < 2^32, f <= 2^12
// (the error of the product is below 2^-20 and a non-integer quotient is at
// least 2^-12 from the next integer). The AVX-512 encoder divides in float
// (rcp14 and a Newton step) and corrects the quotient once instead
// (internal/encode_kernels.cc); both are exact, so both write the same bytes.
//
// Thread safety: pure functions on their arguments.
#ifndef KVCAST_TRANSPORT_KVCACHE_AC_RANS_H_
#define KVCAST_TRANSPORT_KVCACHE_AC_RANS_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/types/span.h"

namespace kvcast::kvcache::ac {

inline constexpr int kProbBits = 12;
inline constexpr uint32_t kProbScale = 1u << kProbBits;  // M
inline constexpr uint32_t kStateLow = 1u << 16;           // L: lower bound of a normalized state
inline constexpr int kLanes = 16;
inline constexpr int kMaxSymbols = 256;
inline constexpr double kDivisionNudge = 0x1p-14;

// Frequencies summing to kProbScale for symbol counts `counts` (at most
// kMaxSymbols; not all zero): every symbol with a count gets at least 1, the
// rest in proportion (the rounding surplus goes to the most frequent
// symbol). Symbols with count 0 get 0.
std::vector<uint16_t> NormalizeFrequencies(absl::Span<const uint32_t> counts);
// The same into freqs[0, counts.size()).
void NormalizeFrequencies(absl::Span<const uint32_t> counts, uint16_t* freqs);

// NormalizeFrequencies' last step (and its SIMD versions'): n frequencies
// summing to kProbScale - diff brought to kProbScale, the surplus (or
// deficit) on the most frequent symbol (first_largest(freqs, n): the
// index of the first largest).
template <typename FirstLargest>
inline void SettleSurplus(int32_t diff, uint16_t* freqs, int n, FirstLargest first_largest) {
  while (diff != 0) {
    const int top = first_largest(freqs, n);
    if (diff > 0) {
      freqs[top] += diff;
      return;
    }
    const int32_t take = std::min<int32_t>(-diff, freqs[top] - 1);
    if (take == 0) return;  // unreachable: at most 256 symbols of >= 1 each
    freqs[top] -= take;
    diff += take;
  }
}

// False unless 1 <= freqs.size() <= kMaxSymbols and the frequencies sum to
// kProbScale. Entries of symbols past freqs.size() are left alone.
bool ValidFrequencies(absl::Span<const uint16_t> freqs);
bool BuildEncodeTable(absl::Span<const uint16_t> freqs, uint32_t* fc, double* rcp);
bool BuildDecodeTable(absl::Span<const uint16_t> freqs, uint32_t* slot);

// Encodes a symbol of table entry (fc, rcp) (f > 0) into *x, writing a
// renormalization word, if any, as the 2 bytes (little-endian) before *out
// and moving *out back (the stream is built backwards).
inline void RansEncode(uint32_t* x, uint32_t fc, double rcp, uint8_t** out) {
  const uint32_t f = fc >> 16;
  uint32_t v = *x;
  if (uint64_t{v} >= (uint64_t{f} << 20)) {
    *out -= 2;
    const uint16_t w = static_cast<uint16_t>(v);
    std::memcpy(*out, &w, 2);
    v >>= 16;
  }
  const uint32_t q = static_cast<uint32_t>(static_cast<double>(v) * rcp + kDivisionNudge);
  *x = (q << kProbBits) + (v - q * f) + (fc & 0xffff);
}

// Decodes one symbol from *x with decoder table `slot`, reading a word
// (2 bytes, little-endian) at *in when the state falls below kStateLow; a
// read that would pass `end` sets *overrun and reads nothing.
inline uint32_t RansDecode(uint32_t* x, const uint32_t* slot, const uint8_t** in,
                           const uint8_t* end, bool* overrun) {
  const uint32_t k = *x & (kProbScale - 1);
  const uint32_t e = slot[k];
  uint32_t v = (((e >> 12) & 0xfff) + 1) * (*x >> kProbBits) + k - (e & 0xfff);
  if (v < kStateLow) {
    if (end - *in >= 2) {
      uint16_t w;
      std::memcpy(&w, *in, 2);
      v = (v << 16) | w;
      *in += 2;
    } else {
      *overrun = true;
    }
  }
  *x = v;
  return e >> 24;
}

}  // namespace kvcast::kvcache::ac

#endif  // KVCAST_TRANSPORT_KVCACHE_AC_RANS_H_
