// Interleaved rANS, the entropy coder of the arithmetic-coded KV track
// (docs/kvcache-wire-format.md, "The ac tracks"; the arithmetic is stated
// there so an independent decoder can be written from it).
//
//   state x: uint32, normalized to [2^16, 2^32) between symbols
//   probabilities: frequencies f_s summing to M = 2^12; c_s = sum of f_k, k < s
//   decode one symbol: slot = x mod M; s = the symbol with c_s <= slot < c_s + f_s;
//                      x = f_s * (x >> 12) + slot - c_s;
//                      if x < 2^16: x = (x << 16) | next 16-bit word of the stream
//   encode (symbols in reverse): if x >= f_s << 20: emit x & 0xffff, x >>= 16;
//                                x = ((x / f_s) << 12) + x mod f_s + c_s
//
// kLanes states run interleaved: symbol i of a block uses lane i mod kLanes,
// and all lanes share one word stream, read in symbol order. Encoders start
// every lane at 2^16, so a decoder that ends anywhere else has been given a
// corrupt stream.
//
// Thread safety: tables are immutable once built; the inline coding steps
// touch only their arguments.
#ifndef KVCAST_TRANSPORT_KVCACHE_AC_RANS_H_
#define KVCAST_TRANSPORT_KVCACHE_AC_RANS_H_

#include <array>
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

// Frequencies summing to kProbScale for symbol counts `counts` (at most
// kMaxSymbols; not all zero): every symbol with a count gets at least 1, the
// rest in proportion (largest remainders last adjusted on the most frequent
// symbols). Symbols with count 0 get 0.
std::vector<uint16_t> NormalizeFrequencies(absl::Span<const uint32_t> counts);

// One probability model for the encoder.
struct RansTable {
  // False (and num_symbols 0) unless 1 <= freqs.size() <= kMaxSymbols and
  // the frequencies sum to kProbScale.
  bool Build(absl::Span<const uint16_t> freqs);

  int num_symbols = 0;
  std::array<uint16_t, kMaxSymbols> freq{};
  std::array<uint16_t, kMaxSymbols> cum{};
  // x / f = (x * rcp) >> 45 exactly for x < 2^32, f <= 2^12.
  std::array<uint64_t, kMaxSymbols> rcp{};
};

// The same model for the decoder: per slot, symbol << 24 | (f_s - 1) << 12 | c_s.
struct RansDecodeTable {
  bool Build(absl::Span<const uint16_t> freqs);  // as RansTable::Build

  int num_symbols = 0;
  std::array<uint32_t, kProbScale> slot{};
};

// Encodes symbol `s` (freq > 0) into *x, writing a renormalization word, if
// any, as the 2 bytes (little-endian) before *out, moving *out back (the
// stream is built backwards).
inline void RansEncode(uint32_t* x, const RansTable& t, int s, uint8_t** out) {
  const uint32_t f = t.freq[s];
  uint32_t v = *x;
  if (uint64_t{v} >= (uint64_t{f} << 20)) {
    *out -= 2;
    const uint16_t w = static_cast<uint16_t>(v);
    std::memcpy(*out, &w, 2);
    v >>= 16;
  }
  const uint32_t q = static_cast<uint32_t>((static_cast<unsigned __int128>(v) * t.rcp[s]) >> 45);
  *x = (q << kProbBits) + (v - q * f) + t.cum[s];
}

// Decodes one symbol from *x, reading a word (2 bytes, little-endian) at
// *in when the state falls below kStateLow; a read that would pass `end`
// sets *overrun and reads nothing.
inline int RansDecode(uint32_t* x, const RansDecodeTable& t, const uint8_t** in,
                      const uint8_t* end, bool* overrun) {
  const uint32_t slot = *x & (kProbScale - 1);
  const uint32_t e = t.slot[slot];
  uint32_t v = (((e >> 12) & 0xfff) + 1) * (*x >> kProbBits) + slot - (e & 0xfff);
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
