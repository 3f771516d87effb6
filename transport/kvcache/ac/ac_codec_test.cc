#include "transport/kvcache/ac/ac_codec.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "gtest/gtest.h"
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

// Every value within half a step of its unit's step (amax / levels).
void ExpectWithinHalfStep(const AcShape& s, const AcPolicy& p, const std::vector<float>& in,
                          const std::vector<float>& out, int tokens) {
  const int n = s.token_floats(), d = s.head_dim;
  for (int u = 0; u < s.num_units(); ++u) {
    float amax = 0;
    for (int t = 0; t < tokens; ++t) {
      for (int c = 0; c < d; ++c) amax = std::max(amax, std::fabs(in[size_t(t) * n + u * d + c]));
    }
    const int layer = u / (2 * s.num_kv_heads);
    const bool is_v = (u / s.num_kv_heads) % 2 == 1;
    const float step = amax / p.LevelsOf(layer, is_v);
    for (int t = 0; t < tokens; ++t) {
      for (int c = 0; c < d; ++c) {
        const size_t i = size_t(t) * n + u * d + c;
        ASSERT_LE(std::fabs(in[i] - out[i]), step * 0.5001f) << "unit " << u << " token " << t;
      }
    }
  }
}

TEST(AcCodec, RoundTripsWithinHalfAStepAtEveryOperatingPoint) {
  const AcPolicy layered{"test", 15, 7, 2, 4.f};  // finer first layers
  for (const AcPolicy* p : {&AcNearLossless(), &AcLow(), &layered}) {
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

TEST(AcCodec, CompressesAndTheLowPointIsSmaller) {
  const auto kv = MakeKv(kShape, 128, 3);
  size_t bytes[2] = {0, 0};
  int k = 0;
  for (const AcPolicy* p : {&AcNearLossless(), &AcLow()}) {
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

// Parameter: force the scalar kernels.
class AcCodecKernels : public testing::TestWithParam<bool> {
 protected:
  void SetUp() override { internal::ForceScalarKernels(GetParam()); }
  void TearDown() override { internal::ForceScalarKernels(false); }
};
INSTANTIATE_TEST_SUITE_P(ScalarAndBest, AcCodecKernels, testing::Bool());

// The AVX-512 kernels (where the CPU has them) give the scalar kernels'
// bytes and floats exactly, also for escapes and both operating points.
TEST(AcCodec, SimdKernelsEqualScalar) {
  if (!internal::SimdKernelsAvailable()) GTEST_SKIP() << "no AVX-512 (F, BW, VBMI2) here";
  for (const AcPolicy* p : {&AcNearLossless(), &AcLow()}) {
    for (int tokens : {1, 50, 128}) {
      const auto kv = MakeKv(kShape, tokens, 40 + tokens);
      std::vector<std::vector<uint8_t>> simd, scalar;
      AcGroupEncoder(kShape, *p).Encode(kv.data(), tokens, &simd);
      internal::ForceScalarKernels(true);
      AcGroupEncoder(kShape, *p).Encode(kv.data(), tokens, &scalar);
      const auto scalar_out = DecodeAll(kShape, simd);
      internal::ForceScalarKernels(false);
      ASSERT_EQ(simd, scalar);
      const auto simd_out = DecodeAll(kShape, simd);
      ASSERT_EQ(0, std::memcmp(simd_out.data(), scalar_out.data(), simd_out.size() * 4));
    }
  }
}

TEST_P(AcCodecKernels, EscapesCarryLargeResiduals) {
  // One channel ramps smoothly (delta mode) and then jumps across the whole
  // range: a residual of about -2 * levels needs the escape.
  AcShape s{1, 1, 16};
  std::vector<float> kv(64 * 32, 0.f);
  for (int t = 0; t < 64; ++t) {
    for (int i = 0; i < 32; ++i) kv[t * 32 + i] = 0.01f * (i + 1) * (t < 63 ? t : -63);
  }
  AcGroupEncoder enc(s, AcNearLossless());
  std::vector<std::vector<uint8_t>> objects;
  enc.Encode(kv.data(), 64, &objects);
  ExpectWithinHalfStep(s, AcNearLossless(), kv, DecodeAll(s, objects), 64);
}

TEST(AcCodec, NonFiniteUnitsDecodeToNanAndZerosToZeros) {
  auto kv = MakeKv(kShape, 4, 9);
  const int d = kShape.head_dim, n = kShape.token_floats();
  kv[2 * n + 3 * d + 5] = std::numeric_limits<float>::infinity();  // unit 3, token 2
  for (int t = 0; t < 4; ++t) std::fill_n(kv.begin() + t * n + 4 * d, d, 0.f);  // unit 4
  AcGroupEncoder enc(kShape, AcNearLossless());
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
  AcGroupEncoder enc(kShape, AcNearLossless());
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

}  // namespace
}  // namespace kvcast::kvcache::ac
