// libFuzzer target for the ac group decoder (ac_codec.h), which decodes
// bytes remote peers send (objects landing through the KV lander).
//
// Input: byte 0 picks the mode, the shape, the kernel set (bits 3-4: the
// best this CPU runs, AVX2, scalar, the best) and whether the round trip
// rotates (bit 5: a Hadamard-transformed group), byte 1 the group's tokens
// (1..8); the rest:
//  - raw mode: the objects themselves, each a 2-byte little-endian length
//    then that many bytes. DecodeGroup and object-by-object Decode may
//    refuse them (any status) but must not crash, and must agree.
//  - round-trip mode: the group's values (one signed byte each, scaled),
//    encoded with AcGroupEncoder (ac, ac-lo, or ac-lo rotated; as the
//    sequence's first group when byte 1's top bit is set), which must
//    decode (both ways, the same floats) within half a step of each value;
//    then one byte of one object is replaced (position and value from the
//    input) and decoding must not crash.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/hadamard.h"
#include "transport/kvcache/ac/ac_codec.h"
#include "transport/kvcache/ac/internal/unit_kernels.h"

namespace ac = kvcast::kvcache::ac;

namespace {

const ac::AcShape kShapes[2] = {{1, 1, 16}, {2, 2, 32}};

// Built once per shape (their tables are the expensive part) and reused, as
// the lander reuses its decoder group after group: a decoder restarts at
// each object 0, also after an error.
const ac::AcPolicy& Rotated() {
  static const ac::AcPolicy p = [] {
    ac::AcPolicy r = ac::AcLow();
    r.rotate = true;
    return r;
  }();
  return p;
}

struct Codecs {
  ac::AcGroupDecoder group, one;
  ac::AcGroupEncoder near, low, rotated;
  explicit Codecs(const ac::AcShape& s)
      : group(s), one(s), near(s, ac::AcHigh()), low(s, ac::AcLow()),
        rotated(s, Rotated()) {}
};
// Per shape and kernel set (the set a codec uses is fixed when it is made).
Codecs& CodecsOf(int shape, int set) {
  using ac::internal::KernelSet;
  static Codecs* codecs[2][4] = {};
  static constexpr KernelSet kSets[4] = {KernelSet::kAvx512, KernelSet::kAvx2, KernelSet::kScalar,
                                         KernelSet::kAvx512};
  if (codecs[shape][set] == nullptr) {
    ac::internal::CapKernelSet(kSets[set]);
    codecs[shape][set] = new Codecs(kShapes[shape]);
    ac::internal::CapKernelSet(KernelSet::kAvx512);
  }
  return *codecs[shape][set];
}

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "ac_decoder_fuzzer: %s\n", what);
    std::abort();
  }
}

// DecodeGroup and Decode of each object in order: the same status and, when
// ok, the same floats.
absl::Status DecodeBothWays(int shape_index, int set,
                            const std::vector<std::vector<uint8_t>>& objs,
                            std::vector<float>* out) {
  const ac::AcShape& shape = kShapes[shape_index];
  Codecs& c = CodecsOf(shape_index, set);
  std::vector<absl::Span<const uint8_t>> spans(objs.begin(), objs.end());
  out->assign(objs.size() * shape.token_floats(), 0.f);
  const absl::Status whole = c.group.DecodeGroup(spans, out->data());
  std::vector<float> each(out->size(), 0.f);
  absl::Status first_error;
  for (size_t t = 0; t < objs.size() && first_error.ok(); ++t) {
    first_error = c.one.Decode(int(t), spans[t], each.data() + t * shape.token_floats());
  }
  // A group of the wrong size is refused whole; object by object it fails
  // only where an object is missing or extra.
  if (whole.ok()) {
    Check(first_error.ok(), "DecodeGroup accepted what Decode refused");
    Check(std::memcmp(out->data(), each.data(), each.size() * sizeof(float)) == 0,
          "DecodeGroup and Decode decoded different floats");
  }
  return whole;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const bool round_trip = data[0] & 1;
  const int shape_index = (data[0] >> 1) & 1;
  const ac::AcShape& shape = kShapes[shape_index];
  const bool low = (data[0] >> 2) & 1;
  const int set = (data[0] >> 3) & 3;
  const bool rotate = (data[0] >> 5) & 1;
  const int tokens = 1 + data[1] % 8;
  const bool starts_sequence = data[1] & 0x80;
  data += 2;
  size -= 2;
  std::vector<float> out;
  if (!round_trip) {
    std::vector<std::vector<uint8_t>> objs;
    while (size >= 2 && objs.size() < 16) {
      const size_t n = std::min<size_t>(data[0] | data[1] << 8, size - 2);
      objs.emplace_back(data + 2, data + 2 + n);
      data += 2 + n;
      size -= 2 + n;
    }
    if (!objs.empty()) DecodeBothWays(shape_index, set, objs, &out).IgnoreError();
    return 0;
  }
  const size_t floats = size_t(tokens) * shape.token_floats();
  std::vector<float> kv(floats);
  for (size_t i = 0; i < floats; ++i) {
    kv[i] = i < size ? float(int8_t(data[i])) / 16.f : 0.f;
  }
  std::vector<std::vector<uint8_t>> objs;
  Codecs& codecs = CodecsOf(shape_index, set);
  const ac::AcPolicy& policy = rotate ? Rotated() : low ? ac::AcLow() : ac::AcHigh();
  (rotate ? codecs.rotated : low ? codecs.low : codecs.near)
      .Encode(kv.data(), tokens, &objs, starts_sequence);
  Check(int(objs.size()) == tokens, "the encoder gave another number of objects");
  Check(DecodeBothWays(shape_index, set, objs, &out).ok(), "a fresh encoding did not decode");
  // Each value within half its unit's step: the unit's largest coded value
  // (rotated, for a rotating policy: the inverse averages the errors) over
  // its levels.
  std::vector<float> coded = kv;
  if (policy.rotate) kvcast::RotateHeads(coded.data(), int(floats), shape.head_dim, false);
  const int n = shape.token_floats(), d = shape.head_dim;
  for (int u = 0; u < shape.num_units(); ++u) {
    float amax = 0;
    for (int t = 0; t < tokens; ++t) {
      for (int c = 0; c < d; ++c) amax = std::max(amax, std::fabs(coded[size_t(t) * n + u * d + c]));
    }
    const bool is_v = (u / shape.num_kv_heads) % 2 == 1;
    const float half_step = amax / policy.LevelsOf(u / (2 * shape.num_kv_heads), is_v) / 2;
    for (int t = 0; t < tokens; ++t) {
      for (int c = 0; c < d; ++c) {
        const size_t i = size_t(t) * n + u * d + c;
        Check(std::isfinite(out[i]) && std::fabs(out[i] - kv[i]) <= half_step * 1.001f + 1e-6f,
              "a decoded value is off");
      }
    }
  }
  if (size > floats + 3) {  // corrupt one byte of one object, decode again
    const uint8_t* c = data + floats;
    auto& obj = objs[c[0] % objs.size()];
    if (!obj.empty()) {
      obj[(c[1] | c[2] << 8) % obj.size()] = c[3];
      DecodeBothWays(shape_index, set, objs, &out).IgnoreError();
    }
  }
  return 0;
}
