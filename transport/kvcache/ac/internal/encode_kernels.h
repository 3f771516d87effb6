// The ac encoder's inner loops, scalar, AVX2 and AVX-512: each pass takes one
// unit (head_dim channels: one layer's K or V of one KV head) of every
// token of the group, so that the unit's floats, codes and symbols stay in
// cache from the first pass to the last. All kernel sets give the same
// bytes (ac_codec_test and encode_kernels_test compare them).
//
// Layouts: a unit's codes and symbols are token-major (token t's d
// channels at t * d); channel modes are one 16-bit mask per block of 16
// channels (bit j: channel 16 b + j is a delta channel); tables as rans.h
// lays them out (the raw then the delta table, kMaxSymbols entries each).
#ifndef KVCAST_TRANSPORT_KVCACHE_AC_INTERNAL_ENCODE_KERNELS_H_
#define KVCAST_TRANSPORT_KVCACHE_AC_INTERNAL_ENCODE_KERNELS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "transport/kvcache/ac/internal/unit_kernels.h"
#include "transport/kvcache/ac/rans.h"

namespace kvcast::kvcache::ac::internal {

// An allocator whose vectors grow without zeroing: the symbolizer makes
// room for a token's escapes, writes them, then cuts the list to what it
// wrote (zeroing the room was 1% of encode time on SmolLM2's shape).
template <typename T>
struct NoZeroingAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = NoZeroingAllocator<U>;
  };
  NoZeroingAllocator() = default;
  template <typename U>
  NoZeroingAllocator(const NoZeroingAllocator<U>& /*other*/) {}
  template <typename U>
  void construct(U* p) {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

// One token's rANS stream being encoded (backwards).
struct EncodeStream {
  uint32_t state[kLanes];
  uint8_t* w;  // the word stream starts here; it grows down
  // z - 255 of escapes, in reverse symbol order.
  std::vector<uint32_t, NoZeroingAllocator<uint32_t>> escapes;
};

// Cache lines a kernel prefetches (into L2) as it goes, one per block of
// symbols coded until `left` runs out: the floats of units coded later, so
// that memory is read under the rANS arithmetic rather than in a pass of
// its own (in one burst, prefetches would wait on full miss queues).
// Lines come in runs of run_lines, stride bytes apart.
struct LinePrefetch {
  const char* run = nullptr;
  size_t stride = 0;
  uint32_t run_lines = 1, line = 0;
  size_t left = 0;
  void Next() {
    if (left == 0) return;
    --left;
    __builtin_prefetch(run + size_t(line) * 64, 0, 2);
    if (++line == run_lines) {
      line = 0;
      run += stride;
    }
  }
};

// Writes v as a varint at p, returning the end. Callers leave room for at
// least two bytes: one below 2^14 (a frequency, almost every escape) writes
// both and moves on by one or two without a branch on which (on KV with
// many escapes that branch, mispredicted about every other time, took a
// fifth of encode time).
inline uint8_t* PutVarint(uint32_t v, uint8_t* p) {
  if (v < (1u << 14)) {
    const uint32_t two = v >= 0x80;
    p[0] = uint8_t((v & 0x7f) | (two << 7));
    p[1] = uint8_t(v >> 7);
    return p + 1 + two;
  }
  while (v >= 0x80) {
    *p++ = uint8_t(v) | 0x80;
    v >>= 7;
  }
  *p++ = uint8_t(v);
  return p;
}

struct EncoderKernels {
  // Largest |x[c]| of d values; NaN if any is not finite.
  float (*abs_max)(const float* x, int d);
  // The same of d fp16 values (IEEE binary16 bits), as their floats.
  float (*abs_max_half)(const uint16_t* x, int d);
  // Codes of one unit: token t's d values at x + t * stride become
  // q[t * d + c] = round-half-even(clamp(x * inv[t], -32767, 32767)). For
  // every token t with same[t] (t > 0 and the step of token t - 1), adds
  // |q_t[c]| to raw[c] and |q_t[c] - q_{t-1}[c]| to delta[c].
  void (*quantize)(const float* x, size_t stride, const float* inv, const uint8_t* same,
                   int tokens, int d, int16_t* q, uint32_t* raw, uint32_t* delta);
  // The same of fp16 values, as their floats.
  void (*quantize_half)(const uint16_t* x, size_t stride, const float* inv, const uint8_t* same,
                        int tokens, int d, int16_t* q, uint32_t* raw, uint32_t* delta);
  // Symbols of one unit: sym[t * d + c] = min(z, 255) + (256 if delta-coded),
  // z the zigzagged residual, q_t[c] - q_{t-1}[c] for a delta channel
  // (masks) of a token with same[t], q_t[c] otherwise: the index into the
  // unit's tables. Adds each symbol to counts (2 x kMaxSymbols) and appends
  // token t's escapes (z - 255) to streams[t].escapes from the last channel
  // to the first, the order the rANS coder meets them.
  void (*symbolize)(const int16_t* q, const uint8_t* same, const uint16_t* masks, int tokens,
                    int d, uint16_t* sym, uint32_t* counts, EncodeStream* streams);
  // A table's frequencies from its n symbols' counts (n <= kMaxSymbols):
  // NormalizeFrequencies (rans.h).
  void (*normalize)(const uint32_t* counts, int n, uint16_t* freqs);
  // rANS-codes one unit of every token: symbols sym + t * d into streams[t]
  // (backwards: from the last channel). Tables fc and rcp (rans.h). May
  // prefetch lines of *pf (the scalar kernel does not).
  void (*encode)(EncodeStream* streams, const uint16_t* sym, int tokens, int d,
                 const uint32_t* fc, const double* rcp, LinePrefetch* pf);
  // Varints of escapes[n - 1] down to escapes[0] (the order a decoder
  // meets them) at p, which has room for 5 bytes each; returns the end.
  uint8_t* (*put_escapes)(const uint32_t* escapes, size_t n, uint8_t* p);
  // Varints of v[0] up to v[n - 1] at p, which has room for 2 bytes a
  // value below 2^14 and 3 for the others; returns the end.
  uint8_t* (*put_varints)(const uint16_t* v, size_t n, uint8_t* p);
  // out[i] = the float of fp16 value in[i], i < n (exact).
  void (*widen_half)(const uint16_t* in, size_t n, float* out);
};

// The kernels of unit_kernels.h's ActiveKernelSet().
EncoderKernels SelectEncoderKernels();

// The AVX2 kernels (encode_kernels_avx2.cc) over k's: all but put_escapes
// and put_varints (the scalar ones serve AVX2).
void UseAvx2EncoderKernels(EncoderKernels* k);

// Adds the n symbols sym[0, n) to counts (2 x kMaxSymbols): the AVX2
// kernel, which the AVX-512 set shares (every AVX-512 CPU has AVX2).
void CountSymbolsAvx2(const uint16_t* sym, size_t n, uint32_t* counts);

// Streams keep this much room below their words: the AVX2 rANS kernel
// stores a whole register of renormalization words ending at the stream's
// front, the words it did not emit falling below it.
inline constexpr size_t kStreamSlack = 16;

// For tests: x / f for x < f 2^20 (f = 1 .. 4096) as the set's SIMD rANS
// encoder divides, 16 at a time (false for scalar or a set this CPU lacks).
bool DivideForTest(KernelSet set, const uint32_t* x, const uint32_t* f, uint32_t* quot,
                   uint32_t* rem);
// DivideForTest's AVX2 case (encode_kernels_avx2.cc).
void DivideAvx2ForTest(const uint32_t* x, const uint32_t* f, uint32_t* quot, uint32_t* rem);

}  // namespace kvcast::kvcache::ac::internal

#endif  // KVCAST_TRANSPORT_KVCACHE_AC_INTERNAL_ENCODE_KERNELS_H_
