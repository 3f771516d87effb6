#include "transport/kvcache/ac/ac_codec.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "gtest/gtest.h"
#include "kernels/hadamard.h"
#include "transport/kvcache/ac/internal/unit_kernels.h"
#include "transport/kvcache/ac/testing/synthetic_kv.h"

namespace kvcast::kvcache::ac {
namespace {

constexpr AcShape kShape{3, 2, 32};

std::vector<float> MakeKv(const AcShape& s, int tokens, uint32_t seed) {
  return SyntheticKv(s, tokens, seed, /*sink=*/true);
}

// Decodes object by object and as a group; both must agree bit for bit.
std::vector<float> DecodeAll(const AcShape& s, const std::vector<std::vector<uint8_t>>& objects) {
  AcGroupDecoder dec(s);
  std::vector<float> out(objects.size() * s.token_floats());
  for (size_t t = 0; t < objects.size(); ++t) {
    absl::Status st = dec.Decode(t, objects[t], out.data() + t * s.token_floats());
    EXPECT_TRUE(st.ok()) << "object " << t << ": " << st;
  }
  std::vector<float> group(out.size());
  const std::vector<absl::Span<const uint8_t>> spans(objects.begin(), objects.end());
  absl::Status st = AcGroupDecoder(s).DecodeGroup(spans, group.data());
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(0, std::memcmp(out.data(), group.data(), out.size() * sizeof(float)));
  return out;
}

AcPolicy RotatedPolicy() {
  AcPolicy p{"ac@15/8+rot", 15, 8};
  p.rotate = true;
  return p;
}

// A fine unrotated point (the ac track's before it moved): codes of up to
// 255, so escapes and long delta runs are common.
const AcPolicy& Fine() {
  static const AcPolicy p{"ac@255/191", 255, 191};
  return p;
}


// Every value within half a step of its unit's step (amax / levels; for a
// rotating policy, of the rotated values: the inverse rotation averages
// the rotated values' errors, so none grows).
void ExpectWithinHalfStep(const AcShape& s, const AcPolicy& p, const std::vector<float>& in,
                          const std::vector<float>& out, int tokens) {
  const int n = s.token_floats(), d = s.head_dim;
  std::vector<float> coded = in;
  if (p.rotate && HadamardDim(d)) RotateHeads(coded.data(), int(coded.size()), d, false);
  for (int u = 0; u < s.num_units(); ++u) {
    float amax = 0;
    for (int t = 0; t < tokens; ++t) {
      for (int c = 0; c < d; ++c) amax = std::max(amax, std::fabs(coded[size_t(t) * n + u * d + c]));
    }
    const int layer = u / (2 * s.num_kv_heads);
    const bool is_v = (u / s.num_kv_heads) % 2 == 1;
    const float step = amax / p.LevelsOf(layer, is_v);
    for (int t = 0; t < tokens; ++t) {
      for (int c = 0; c < d; ++c) {
        const size_t i = size_t(t) * n + u * d + c;
        ASSERT_LE(std::fabs(in[i] - out[i]), step * 0.5001f + std::fabs(in[i]) * 1e-6f)
            << "unit " << u << " token " << t;
      }
    }
  }
}

TEST(AcCodec, RoundTripsWithinHalfAStepAtEveryOperatingPoint) {
  const AcPolicy layered{"test", 15, 7, {4.f, 4.f}, {4.f, 0.5f}};  // per-layer levels
  for (const AcPolicy* p : {&AcHigh(), &AcLow(), &Fine(), &layered}) {
    for (int tokens : {1, 2, 77, 128}) {
      const auto kv = MakeKv(kShape, tokens, tokens);
      AcGroupEncoder enc(kShape, *p);
      std::vector<std::vector<uint8_t>> objects;
      enc.Encode(kv.data(), tokens, &objects);
      ASSERT_EQ(objects.size(), size_t(tokens));
      ExpectWithinHalfStep(kShape, *p, kv, DecodeAll(kShape, objects), tokens);
    }
  }
}

// A group that starts the sequence codes its first token (the attention
// sink) at steps 2^sink_shift finer, as far as 16-bit codes allow; the
// other tokens decode to the same values.
TEST(AcCodec, TheSequencesFirstTokenGetsFinerSteps) {
  const auto kv = MakeKv(kShape, 32, 5);
  for (float k_levels : {15.f, 4000.f}) {
    AcPolicy p{"test", k_levels, 8};
    p.sink_shift = 4;
    std::vector<std::vector<uint8_t>> plain, sink;
    AcGroupEncoder(kShape, p).Encode(kv.data(), 32, &plain);
    AcGroupEncoder(kShape, p).Encode(kv.data(), 32, &sink, /*starts_sequence=*/true);
    const auto a = DecodeAll(kShape, plain), b = DecodeAll(kShape, sink);
    const int n = kShape.token_floats();
    double err[2] = {0, 0};  // over token 0's K values
    const int row = kShape.num_kv_heads * kShape.head_dim;
    for (int i = 0; i < n; ++i) {
      if ((i / row) % 2 == 1) continue;  // a V row
      err[0] = std::max(err[0], double(std::fabs(a[i] - kv[i])));
      err[1] = std::max(err[1], double(std::fabs(b[i] - kv[i])));
    }
    // 4000 levels leave room for 2^3 (4000 x 2^4 > 32767), 15 for all 4.
    const double finer = k_levels == 15.f ? 16 : 8;
    // (Largest errors over the token's units: within 2x of the steps'.)
    EXPECT_LE(err[1], err[0] / finer * 2) << k_levels;
    EXPECT_GT(err[1], err[0] / finer / 2) << k_levels;
    EXPECT_GT(sink[0].size(), plain[0].size());
    EXPECT_EQ(0, std::memcmp(a.data() + n, b.data() + n, (a.size() - n) * sizeof(float)));
  }
}

TEST(AcCodec, CompressesAndTheLowPointIsSmaller) {
  const auto kv = MakeKv(kShape, 128, 3);
  size_t bytes[2] = {0, 0};
  int k = 0;
  for (const AcPolicy* p : {&AcHigh(), &AcLow()}) {
    AcGroupEncoder enc(kShape, *p);
    std::vector<std::vector<uint8_t>> objects;
    enc.Encode(kv.data(), 128, &objects);
    for (const auto& o : objects) bytes[k] += o.size();
    ++k;
  }
  const size_t fp16 = 128 * kShape.token_floats() * 2;
  EXPECT_LT(bytes[0], fp16 * 0.65) << "ac";
  EXPECT_LT(bytes[1], bytes[0] * 0.92) << "ac-lo";
}

std::string SetName(const testing::TestParamInfo<internal::KernelSet>& info) {
  return internal::KernelSetName(info.param);
}

// Parameter: the kernel set encoders and decoders use (skipped where the
// CPU lacks it).
class AcCodecKernels : public testing::TestWithParam<internal::KernelSet> {
 protected:
  void SetUp() override {
    if (!internal::KernelSetAvailable(GetParam())) {
      GTEST_SKIP() << "no " << internal::KernelSetName(GetParam()) << " here";
    }
    internal::CapKernelSet(GetParam());
  }
  void TearDown() override { internal::CapKernelSet(internal::KernelSet::kAvx512); }
};
INSTANTIATE_TEST_SUITE_P(Sets, AcCodecKernels,
                         testing::Values(internal::KernelSet::kScalar, internal::KernelSet::kAvx2,
                                         internal::KernelSet::kAvx512),
                         SetName);

// Parameter: a SIMD kernel set, compared with the scalar reference.
class AcSimdKernels : public AcCodecKernels {
 protected:
  void UseScalar() { internal::CapKernelSet(internal::KernelSet::kScalar); }
  void UseSimd() { internal::CapKernelSet(GetParam()); }
  void Use(bool scalar) { scalar ? UseScalar() : UseSimd(); }
};
INSTANTIATE_TEST_SUITE_P(Sets, AcSimdKernels,
                         testing::Values(internal::KernelSet::kAvx2, internal::KernelSet::kAvx512),
                         SetName);

// The SIMD kernels give the scalar kernels'
// bytes and floats exactly, also for escapes and both operating points.
TEST_P(AcSimdKernels, SimdKernelsEqualScalar) {
  const AcPolicy rotated = RotatedPolicy();
  for (const AcPolicy* p : {&AcHigh(), &AcLow(), &rotated}) {
    for (int tokens : {1, 50, 128}) {
      const auto kv = MakeKv(kShape, tokens, 40 + tokens);
      std::vector<std::vector<uint8_t>> simd, scalar;
      AcGroupEncoder(kShape, *p).Encode(kv.data(), tokens, &simd);
      UseScalar();
      AcGroupEncoder(kShape, *p).Encode(kv.data(), tokens, &scalar);
      const auto scalar_out = DecodeAll(kShape, simd);
      UseSimd();
      ASSERT_EQ(simd, scalar);
      const auto simd_out = DecodeAll(kShape, simd);
      ASSERT_EQ(0, std::memcmp(simd_out.data(), scalar_out.data(), simd_out.size() * 4));
    }
  }
}

// Inputs that take the encoder's every path: zero units, tokens of zeros
// (shift 15), non-finite units, subnormal and huge magnitudes, rounding
// ties, jumps that need escapes in both modes, lone outliers.
std::vector<float> AwkwardKv(const AcShape& s, int tokens, uint32_t seed) {
  std::vector<float> kv = SyntheticKv(s, tokens, seed, /*sink=*/seed % 2 == 0);
  std::mt19937 rng(seed);
  const int n = s.token_floats(), d = s.head_dim, units = s.num_units();
  for (int u = 0; u < units; ++u) {
    const int kind = (u + seed) % 9;
    for (int t = 0; t < tokens; ++t) {
      float* x = kv.data() + size_t(t) * n + size_t(u) * d;
      for (int c = 0; c < d; ++c) {
        switch (kind) {
          case 0: x[c] = 0.f; break;                                  // a unit of zeros
          case 1: if (t % 3 == 1) x[c] = 0.f; break;                  // tokens of zeros
          case 2: x[c] *= 1e-39f; break;                              // subnormal
          case 3: x[c] *= 1e37f; break;                               // huge
          case 4: x[c] = float(int(rng() % 9) - 4) * 0.5f; break;     // rounding ties
          case 5: x[c] = (t + c) % 2 ? 1.f : -1.f; break;             // jumps: delta escapes
          case 6: x[c] = c == 3 ? 1000.f : x[c] * 0.001f * float(1 << (t % 20)); break;
          case 7: if (t == tokens / 2 && c == d - 1) x[c] = (seed % 3 == 0 ? NAN : INFINITY); break;
          default: break;
        }
      }
    }
  }
  return kv;
}

// As SimdKernelsEqualScalar, on the awkward inputs and odd token counts.
TEST_P(AcSimdKernels, SimdKernelsEqualScalarOnAwkwardInputs) {
  const AcShape s{2, 3, 48};
  for (const AcPolicy* p : {&AcHigh(), &AcLow(), &Fine()}) {
    for (int tokens : {1, 2, 3, 17, 64, 129}) {
      for (uint32_t seed : {10u, 11u, 12u}) {
        const auto kv = AwkwardKv(s, tokens, seed + tokens);
        std::vector<std::vector<uint8_t>> simd, scalar;
        AcGroupEncoder(s, *p).Encode(kv.data(), tokens, &simd);
        UseScalar();
        AcGroupEncoder(s, *p).Encode(kv.data(), tokens, &scalar);
        UseSimd();
        ASSERT_EQ(simd, scalar) << tokens << " tokens, seed " << seed;
      }
    }
  }
}

// The SIMD decoder against the scalar one on the awkward inputs: token
// counts around its 8 / 4 / 2 / 1-token calls, tiny and huge units, and
// damaged objects (the same error, message included).
TEST_P(AcSimdKernels, SimdDecoderEqualsScalarOnAwkwardInputs) {
  for (const AcShape& s : {AcShape{2, 3, 48}, AcShape{3, 1, 16}, AcShape{1, 2, 512}}) {
    for (const AcPolicy* p : {&AcHigh(), &AcLow(), &Fine()}) {
      for (int tokens : {1, 2, 3, 7, 9, 15, 17, 129}) {
        const uint32_t seed = 20u + tokens + s.head_dim;
        const auto kv = AwkwardKv(s, tokens, seed);
        std::vector<std::vector<uint8_t>> objects;
        AcGroupEncoder(s, *p).Encode(kv.data(), tokens, &objects);
        std::mt19937 rng(seed);
        auto damaged = objects;
        auto& victim = damaged[rng() % tokens];
        if (rng() % 2) {
          victim.resize(victim.size() - 1 - rng() % 8);
        } else {
          victim[victim.size() - 1 - rng() % std::min<size_t>(victim.size(), 64)] ^= 0x5a;
        }
        std::vector<float> out[2];
        absl::Status status[2];
        for (int scalar : {0, 1}) {
          Use(scalar);
          out[scalar] = DecodeAll(s, objects);
          std::vector<float> all(size_t(tokens) * s.token_floats());
          const std::vector<absl::Span<const uint8_t>> spans(damaged.begin(), damaged.end());
          status[scalar] = AcGroupDecoder(s).DecodeGroup(spans, all.data());
        }
        UseSimd();
        ASSERT_EQ(0, std::memcmp(out[0].data(), out[1].data(), out[0].size() * 4))
            << s.head_dim << " x " << tokens << " tokens";
        EXPECT_EQ(status[0], status[1]) << s.head_dim << " x " << tokens << " tokens";
      }
    }
  }
}

// A token 2^k times quieter than its unit's loudest gets a step 2^k finer;
// near the bottom of float32 that step would have no finite reciprocal
// (and 0 * inf is NaN). A unit that small codes as zeros; one just above
// it keeps its values, on both kernel sets.
TEST_P(AcSimdKernels, TinyUnitsAndFineTokenSteps) {
  const AcShape s{1, 1, 16};
  std::vector<float> kv(4 * 32, 0.f);
  for (int c = 0; c < 16; ++c) {
    kv[c] = 1e-38f;                     // K: below 2^-100 a level: zeros
    kv[32 + c] = c % 2 ? 3e-42f : 0.f;
    kv[16 + c] = 1e-27f;                // V: step 3.9e-30
    kv[48 + c] = c % 2 ? 3e-32f : 0.f;  // shift 15: a token step of 1.2e-34
    kv[80 + c] = c % 3 ? -2e-31f * c : 0.f;
  }
  std::vector<std::vector<uint8_t>> objects[2];
  for (bool scalar : {false, true}) {
    Use(scalar);
    AcGroupEncoder(s, Fine()).Encode(kv.data(), 4, &objects[scalar]);
  }
  UseSimd();
  EXPECT_EQ(objects[0], objects[1]);
  const auto out = DecodeAll(s, objects[0]);
  for (int t = 0; t < 4; ++t) {
    float token_amax = 0;  // half the token's step is below token_amax / 255
    for (int c = 0; c < 16; ++c) token_amax = std::max(token_amax, std::fabs(kv[t * 32 + 16 + c]));
    for (int c = 0; c < 16; ++c) {
      EXPECT_EQ(out[t * 32 + c], 0.f) << t << " " << c;
      const float x = kv[t * 32 + 16 + c], y = out[t * 32 + 16 + c];
      if (x == 0.f) {
        EXPECT_EQ(y, 0.f) << t << " " << c;
      }
      EXPECT_LE(std::fabs(y - x), token_amax / 255) << t << " " << c;
    }
  }
}

// FNV-1a over every object's bytes, lengths included.
uint64_t Digest(const std::vector<std::vector<uint8_t>>& objects) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](uint8_t b) { h = (h ^ b) * 1099511628211ull; };
  for (const auto& o : objects) {
    for (int k = 0; k < 4; ++k) mix(uint8_t(o.size() >> (8 * k)));
    for (uint8_t b : o) mix(b);
  }
  return h;
}

// The encoder's bytes are part of the format's history (decoders elsewhere
// are tested against them): these digests were taken before the encoder
// was rewritten for speed, and both kernel sets must still give them. The
// cases with subnormal units changed once since, on purpose: a unit below
// 2^-100 a level now codes as zeros (TinyUnitsAndFineTokenSteps).
TEST_P(AcCodecKernels, BytesMatchTheReferenceDigests) {
  struct Case {
    AcShape shape;
    int tokens;
    uint32_t seed;
    bool plain = false;  // SyntheticKv as it is
  };
  const Case cases[] = {{{3, 2, 32}, 1, 1},  {{3, 2, 32}, 2, 2},   {{3, 2, 32}, 3, 3},
                        {{2, 1, 16}, 17, 4}, {{1, 3, 64}, 77, 5},  {{3, 2, 32}, 128, 6},
                        {{2, 2, 48}, 130, 7}, {{4, 3, 16}, 9, 8},  {{1, 1, 128}, 64, 9},
                        {{2, 4, 128}, 128, 2, true}, {{3, 3, 64}, 128, 2, true}};
  std::string got;
  for (const Case& c : cases) {
    const auto kv = c.plain ? SyntheticKv(c.shape, c.tokens, c.seed, false)
                            : AwkwardKv(c.shape, c.tokens, c.seed);
    for (const AcPolicy* p : {&AcHigh(), &AcLow(), &Fine()}) {
      std::vector<std::vector<uint8_t>> objects;
      AcGroupEncoder(c.shape, *p).Encode(kv.data(), c.tokens, &objects, c.seed % 2 == 1);
      got += absl::StrCat(absl::Hex(Digest(objects)), " ");
      DecodeAll(c.shape, objects);
    }
  }
  EXPECT_EQ(got,
            "9153e72d4da586b3 cf769c9e6f5de413 19c8dae52d86da79 88a977bea7b4ca36 3a7b8d61da0409a9 "
            "6f59b3a9bd0bedd2 da7dc36a91bfb9da 158ea4d0c1634ef3 166d515c01aa4b1a f26e9bd100b5d022 "
            "b2ea01b42a6e956c ec2b400e7794867 f0cdbaeff5cf2c98 ef2deb9f0c77acaa a9756d896ab26aff "
            "20e960542331c63c 1e7b8ccf6509db14 130799b2536ce4d4 20ed801bd4a25647 6539583aeb35ed0d "
            "c443b9087900142b efbf62074246c627 81b40d6ef1e96957 e5e02f45c6511119 6c5605029c09423f "
            "3a13c64449f091d6 9c51b42c661c8000 b181a86b4efd00f7 467caf6b91e0570 ed2b06df9bb35758 "
            "f77da0521d63d0d5 b8168215182e0fb8 a5d8bd0c2e2a09b4 ");
}

TEST_P(AcCodecKernels, EscapesCarryLargeResiduals) {
  // One channel ramps smoothly (delta mode) and then jumps across the whole
  // range: a residual of about -2 * levels needs the escape.
  AcShape s{1, 1, 16};
  std::vector<float> kv(64 * 32, 0.f);
  for (int t = 0; t < 64; ++t) {
    for (int i = 0; i < 32; ++i) kv[t * 32 + i] = 0.01f * (i + 1) * (t < 63 ? t : -63);
  }
  AcGroupEncoder enc(s, Fine());
  std::vector<std::vector<uint8_t>> objects;
  enc.Encode(kv.data(), 64, &objects);
  ExpectWithinHalfStep(s, Fine(), kv, DecodeAll(s, objects), 64);
}

// Escapes whose varints take three or five bytes (longer than the encoder
// writes, still valid: the same values) decode alike on both kernel sets:
// the SIMD decoder's fast path for one- and two-byte escapes must step
// aside for them.
TEST_P(AcSimdKernels, LongEscapeVarintsDecodeAlike) {
  const AcShape s{1, 1, 16};
  std::vector<float> kv(64 * 32);
  for (int t = 0; t < 64; ++t) {  // every other token jumps: many escapes
    for (int i = 0; i < 32; ++i) kv[t * 32 + i] = 0.01f * (i + 1) * (t % 2 ? t : -t);
  }
  std::vector<std::vector<uint8_t>> objects;
  AcGroupEncoder(s, Fine()).Encode(kv.data(), 64, &objects);
  const std::vector<float> want = DecodeAll(s, objects);
  int rewritten = 0;
  for (size_t t = 1; t < objects.size(); ++t) {  // object 0 also holds the group header
    std::vector<uint8_t>& o = objects[t];
    // Its section: a shift per unit, 16 states, the word count, the words,
    // then the escapes' varints to the end.
    const uint8_t* p = o.data() + s.num_units() + 4 * 16;
    uint32_t words = 0;
    ASSERT_TRUE(internal::GetVarint(&p, o.data() + o.size(), &words));
    p += 2 * size_t(words);
    std::vector<uint8_t> longer(static_cast<const uint8_t*>(o.data()), p);
    const uint8_t* const end = o.data() + o.size();
    for (int i = 0; p < end; ++i) {
      uint32_t v = 0;
      ASSERT_TRUE(internal::GetVarint(&p, end, &v));
      const int len = i % 2 ? 3 : 5;  // 7 bits a byte, high bits continue
      for (int b = 0; b < len; ++b) {
        longer.push_back(uint8_t((v >> (7 * b)) & 0x7f) | (b + 1 < len ? 0x80 : 0));
      }
      ++rewritten;
    }
    o = std::move(longer);
  }
  ASSERT_GT(rewritten, 100);
  for (bool scalar : {false, true}) {
    Use(scalar);
    const std::vector<float> got = DecodeAll(s, objects);
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float)))
        << (scalar ? "scalar" : internal::KernelSetName(GetParam())) << " kernels";
  }
  UseSimd();
}

// Encoding fp16 values (as KV pages hold them) gives the bytes of encoding
// their floats, on both kernel sets: subnormal, infinite and NaN halves
// included, and a unit of zeros.
TEST_P(AcSimdKernels, EncodeHalfGivesTheBytesOfItsFloats) {
  for (const AcShape& s : {kShape, AcShape{2, 3, 48}}) {
    for (int trial = 0; trial < 6; ++trial) {
      const int tokens = 1 + trial * 7;
      std::mt19937 rng(40 + trial);
      std::vector<uint16_t> half(size_t(tokens) * s.token_floats());
      for (uint16_t& h : half) {
        const int r = rng() % 20;
        h = r == 0 ? uint16_t(rng() % 0x400)                    // subnormal or zero
            : r == 1 && trial % 3 == 0 ? uint16_t(0x7c00)       // inf
            : r == 2 && trial % 3 == 1 ? uint16_t(0x7e01)       // NaN
            : FloatToHalf(std::normal_distribution<float>(0, 2)(rng));
        if (rng() % 2) h ^= 0x8000;
      }
      std::fill_n(half.begin() + s.head_dim, s.head_dim, 0);  // token 0, unit 1
      std::vector<float> floats(half.size());
      for (size_t i = 0; i < half.size(); ++i) floats[i] = HalfToFloat(half[i]);
      for (bool scalar : {false, true}) {
        Use(scalar);
        for (const AcPolicy* p : {&AcHigh(), &AcLow(), &Fine()}) {
          std::vector<std::vector<uint8_t>> from_floats, from_half;
          AcGroupEncoder(s, *p).Encode(floats.data(), tokens, &from_floats);
          AcGroupEncoder(s, *p).EncodeHalf(half.data(), tokens, &from_half);
          EXPECT_EQ(from_floats, from_half) << "trial " << trial << (scalar ? ", scalar" : "");
        }
      }
      UseSimd();
    }
  }
}

// Decoding into fp16 gives FloatToHalf of the floats DecodeGroup gives,
// and the same errors, on both kernel sets (non-finite units, whose
// values decode to NaN, and damaged groups included).
TEST_P(AcSimdKernels, DecodeGroupHalfNarrowsWhatDecodeGroupGives) {
  for (const AcShape& s : {kShape, AcShape{2, 3, 48}}) {
    for (int trial = 0; trial < 6; ++trial) {
      const int tokens = 1 + trial * 7;
      auto kv = MakeKv(s, tokens, 60 + trial);
      if (trial % 2) kv[s.head_dim + 3] = std::numeric_limits<float>::infinity();
      for (size_t i = 0; i < kv.size(); i += 97) kv[i] *= 1e-30f;  // fp16 subnormals and zeros
      std::vector<std::vector<uint8_t>> objects;
      AcGroupEncoder(s, trial < 3 ? AcHigh() : AcLow()).Encode(kv.data(), tokens, &objects);
      if (trial == 5) objects[tokens / 2].pop_back();  // damaged: both fail alike
      const std::vector<absl::Span<const uint8_t>> spans(objects.begin(), objects.end());
      for (bool scalar : {false, true}) {
        Use(scalar);
        std::vector<float> floats(kv.size());
        std::vector<uint16_t> half(kv.size());
        const absl::Status fs = AcGroupDecoder(s).DecodeGroup(spans, floats.data());
        const absl::Status hs = AcGroupDecoder(s).DecodeGroupHalf(spans, half.data());
        EXPECT_EQ(fs, hs) << "trial " << trial;
        if (!fs.ok()) continue;
        for (size_t i = 0; i < kv.size(); ++i) {
          ASSERT_EQ(half[i], FloatToHalf(floats[i]))
              << "trial " << trial << ", value " << i << (scalar ? ", scalar" : "");
        }
      }
      UseSimd();
    }
  }
}

TEST(AcCodec, NonFiniteUnitsDecodeToNanAndZerosToZeros) {
  auto kv = MakeKv(kShape, 4, 9);
  const int d = kShape.head_dim, n = kShape.token_floats();
  kv[2 * n + 3 * d + 5] = std::numeric_limits<float>::infinity();  // unit 3, token 2
  for (int t = 0; t < 4; ++t) std::fill_n(kv.begin() + t * n + 4 * d, d, 0.f);  // unit 4
  AcGroupEncoder enc(kShape, AcHigh());
  std::vector<std::vector<uint8_t>> objects;
  enc.Encode(kv.data(), 4, &objects);
  const auto out = DecodeAll(kShape, objects);
  for (int t = 0; t < 4; ++t) {
    for (int c = 0; c < d; ++c) {
      EXPECT_TRUE(std::isnan(out[t * n + 3 * d + c]));
      EXPECT_EQ(out[t * n + 4 * d + c], 0.f);
      EXPECT_FALSE(std::isnan(out[t * n + 2 * d + c]));
    }
  }
}

TEST_P(AcCodecKernels, DamagedObjectsAreRefused) {
  const auto kv = MakeKv(kShape, 8, 5);
  AcGroupEncoder enc(kShape, AcHigh());
  std::vector<std::vector<uint8_t>> objects;
  enc.Encode(kv.data(), 8, &objects);
  std::vector<float> out(kShape.token_floats());
  {
    AcGroupDecoder dec(kShape);
    EXPECT_EQ(dec.Decode(1, objects[1], out.data()).code(), absl::StatusCode::kInvalidArgument);
    ASSERT_TRUE(dec.Decode(0, objects[0], out.data()).ok());
    EXPECT_EQ(dec.tokens_in_group(), 8);
    EXPECT_EQ(dec.Decode(2, objects[2], out.data()).code(), absl::StatusCode::kInvalidArgument);
    auto truncated = objects[1];
    truncated.pop_back();
    EXPECT_EQ(dec.Decode(1, truncated, out.data()).code(), absl::StatusCode::kDataLoss);
    // After an error the group starts again at object 0.
    EXPECT_EQ(dec.Decode(1, objects[1], out.data()).code(), absl::StatusCode::kInvalidArgument);
    ASSERT_TRUE(dec.Decode(0, objects[0], out.data()).ok());
    auto trailing = objects[1];
    trailing.push_back(0);
    EXPECT_EQ(dec.Decode(1, trailing, out.data()).code(), absl::StatusCode::kDataLoss);
  }
  // A flipped bit in a token's rANS part (after its step shifts) is mostly
  // caught by the final states or the word and escape accounting (not a
  // flip inside an escape's value, say): 185 of 200 here. QUIC's AEAD, not
  // this, protects objects in transit.
  std::mt19937 rng(11);
  int caught = 0;
  for (int trial = 0; trial < 200; ++trial) {
    AcGroupDecoder dec(kShape);
    ASSERT_TRUE(dec.Decode(0, objects[0], out.data()).ok());
    auto bad = objects[1];
    const size_t units = kShape.num_units();
    bad[units + rng() % (bad.size() - units)] ^= uint8_t(1u << (rng() % 8));
    caught += !dec.Decode(1, bad, out.data()).ok();
  }
  EXPECT_GE(caught, 180);
  // A group decode refuses a damaged token the same way, and a short list.
  {
    std::vector<absl::Span<const uint8_t>> spans(objects.begin(), objects.end());
    auto truncated = objects[3];
    truncated.pop_back();
    spans[3] = truncated;
    AcGroupDecoder dec(kShape);
    std::vector<float> all(8 * kShape.token_floats());
    EXPECT_EQ(dec.DecodeGroup(spans, all.data()).code(), absl::StatusCode::kDataLoss);
    spans.pop_back();
    EXPECT_EQ(dec.DecodeGroup(spans, all.data()).code(), absl::StatusCode::kInvalidArgument);
  }
  // Another shape's header.
  AcGroupDecoder other(AcShape{3, 2, 48});
  EXPECT_EQ(other.Decode(0, objects[0], out.data()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateShape(AcShape{2, 2, 24}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ValidateShape(kShape).ok());
}

// A rotated group says so in its header (version 2, transform 1) and
// decodes to the values rotated back: with an outlier channel, much closer
// than the same levels unrotated (the outlier no longer sets its head's
// step). Object by object, whole, and into fp16 alike.
TEST_P(AcCodecKernels, RotatedGroupsSpreadOutliersAndDecodeBack) {
  const AcShape s{2, 2, 32};
  auto kv = MakeKv(s, 40, 8);
  for (int t = 0; t < 40; ++t) kv[size_t(t) * s.token_floats() + 5] = 30.f;  // outlier channel
  AcPolicy plain_policy = RotatedPolicy();
  plain_policy.rotate = false;
  std::vector<std::vector<uint8_t>> rotated, plain;
  AcGroupEncoder(s, RotatedPolicy()).Encode(kv.data(), 40, &rotated);
  AcGroupEncoder(s, plain_policy).Encode(kv.data(), 40, &plain);
  EXPECT_EQ(rotated[0][0], kTransformedFormatVersion);
  EXPECT_EQ(rotated[0][1], kTransformHadamard);
  EXPECT_EQ(plain[0][0], kFormatVersion);
  const auto r = DecodeAll(s, rotated), p = DecodeAll(s, plain);
  double err_r = 0, err_p = 0;  // over unit 0 (the outlier's head)
  for (int t = 0; t < 40; ++t) {
    for (int c = 0; c < 32; ++c) {
      const size_t i = size_t(t) * s.token_floats() + c;
      err_r += (r[i] - kv[i]) * (r[i] - kv[i]);
      err_p += (p[i] - kv[i]) * (p[i] - kv[i]);
    }
  }
  EXPECT_LT(err_r, err_p / 4);
  AcGroupDecoder one(s);
  std::vector<float> each(r.size());
  for (int t = 0; t < 40; ++t) {
    ASSERT_TRUE(one.Decode(t, rotated[t], each.data() + size_t(t) * s.token_floats()).ok());
  }
  EXPECT_EQ(0, std::memcmp(each.data(), r.data(), r.size() * sizeof(float)));
  std::vector<uint16_t> half(r.size());
  const std::vector<absl::Span<const uint8_t>> spans(rotated.begin(), rotated.end());
  ASSERT_TRUE(AcGroupDecoder(s).DecodeGroupHalf(spans, half.data()).ok());
  for (size_t i = 0; i < r.size(); ++i) ASSERT_EQ(half[i], FloatToHalf(r[i])) << i;
}

// Weighted K channels (transform 2): a K channel weighted 4 comes back with
// 1/16 the error of one weighted 1/4 (the rotated values' error is uniform,
// divided by the weight after the inverse); V units code as transform 1's,
// bit for bit; the weights travel in the header (a truncated one is
// refused), one byte each, exactly as AcChannelWeight gives them.
TEST_P(AcCodecKernels, WeightedKChannelsTakeTheirShareOfTheError) {
  EXPECT_EQ(AcChannelWeight(128), 1.f);
  EXPECT_EQ(AcChannelWeight(144), 2.f);
  EXPECT_EQ(AcChannelWeight(96), 0.25f);
  EXPECT_EQ(AcChannelWeight(0), std::ldexp(1.f, -8));
  for (int c = 0; c < 256; ++c) {
    EXPECT_EQ(AcChannelWeightCode(AcChannelWeight(uint8_t(c))), c);
    if (c > 0) EXPECT_GT(AcChannelWeight(uint8_t(c)), AcChannelWeight(uint8_t(c - 1)));
  }
  EXPECT_NEAR(AcChannelWeight(AcChannelWeightCode(3.f)), 3.f, 3.f * 0.022f);
  const AcShape s{2, 2, 32};
  const auto kv = MakeKv(s, 40, 11);
  AcPolicy weighted = RotatedPolicy();
  for (int k = 0; k < s.num_layers * s.num_kv_heads; ++k) {
    for (int c = 0; c < s.head_dim; ++c) weighted.k_channel_weights.push_back(c < 16 ? 4.f : 0.25f);
  }
  std::vector<std::vector<uint8_t>> w_objects, r_objects;
  AcGroupEncoder(s, weighted).Encode(kv.data(), 40, &w_objects);
  AcGroupEncoder(s, RotatedPolicy()).Encode(kv.data(), 40, &r_objects);
  EXPECT_EQ(w_objects[0][0], kTransformedFormatVersion);
  EXPECT_EQ(w_objects[0][1], kTransformWeightedHadamard);
  EXPECT_EQ(w_objects[0][10], AcChannelWeightCode(4.f));  // unit 0's channel 0
  const auto w = DecodeAll(s, w_objects), r = DecodeAll(s, r_objects);
  const int n = s.token_floats(), d = s.head_dim;
  for (int u = 0; u < s.num_units(); ++u) {
    const bool is_k = (u / s.num_kv_heads) % 2 == 0;
    double err_hi = 0, err_lo = 0;
    for (int t = 0; t < 40; ++t) {
      for (int c = 0; c < d; ++c) {
        const size_t i = size_t(t) * n + u * d + c;
        if (!is_k) ASSERT_EQ(w[i], r[i]) << "V unit " << u;
        (c < 16 ? err_hi : err_lo) += (w[i] - kv[i]) * (w[i] - kv[i]);
      }
    }
    if (is_k) EXPECT_LT(err_hi, err_lo / 16) << "K unit " << u;
  }
  std::vector<uint16_t> half(w.size());
  const std::vector<absl::Span<const uint8_t>> spans(w_objects.begin(), w_objects.end());
  ASSERT_TRUE(AcGroupDecoder(s).DecodeGroupHalf(spans, half.data()).ok());
  for (size_t i = 0; i < w.size(); ++i) ASSERT_EQ(half[i], FloatToHalf(w[i])) << i;
  const std::vector<uint8_t> cut(w_objects[0].begin(), w_objects[0].begin() + 10 + 100);
  std::vector<float> out(n);
  EXPECT_EQ(AcGroupDecoder(s).Decode(0, cut, out.data()).code(), absl::StatusCode::kDataLoss);
}

// Heads that cannot rotate are coded as they are; a header's transform is
// read only in version 2, where an unknown one is refused.
TEST(AcCodec, TransformsInTheHeader) {
  const AcShape odd{1, 1, 48};
  const auto kv = MakeKv(odd, 4, 9);
  AcPolicy unrotated = RotatedPolicy();
  unrotated.rotate = false;
  std::vector<std::vector<uint8_t>> a, b;
  AcGroupEncoder(odd, RotatedPolicy()).Encode(kv.data(), 4, &a);
  AcGroupEncoder(odd, unrotated).Encode(kv.data(), 4, &b);
  EXPECT_EQ(a, b);
  const auto want = DecodeAll(odd, a);
  auto v1 = a;
  v1[0][1] = 7;  // version 1's reserved byte: ignored
  EXPECT_EQ(DecodeAll(odd, v1), want);
  auto v2 = a;
  v2[0][0] = kTransformedFormatVersion;  // transform 0: as version 1
  EXPECT_EQ(DecodeAll(odd, v2), want);
  v2[0][1] = 3;
  std::vector<float> out(want.size());
  const std::vector<absl::Span<const uint8_t>> spans(v2.begin(), v2.end());
  const absl::Status s = AcGroupDecoder(odd).DecodeGroup(spans, out.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  v2[0][1] = kTransformHadamard;  // heads of 48 do not rotate
  const std::vector<absl::Span<const uint8_t>> spans2(v2.begin(), v2.end());
  EXPECT_EQ(AcGroupDecoder(odd).DecodeGroup(spans2, out.data()).code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace kvcast::kvcache::ac
