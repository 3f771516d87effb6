#include "transport/kvcache/ac/ac_tuning.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "transport/kvcache/ac/testing/synthetic_kv.h"

namespace kvcast::kvcache::ac {
namespace {

TEST(AcTuning, LevelsFollowTheSquareRootOfSensitivityAtTheSameMeanBits) {
  // K: 4x and 1/4 of the middle layer; V all alike.
  auto t = FitAcTuning({4.0, 1.0, 0.25}, {2.0, 2.0, 2.0});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_NEAR(t->k[0], 2.0f, 1e-6);
  EXPECT_NEAR(t->k[1], 1.0f, 1e-6);
  EXPECT_NEAR(t->k[2], 0.5f, 1e-6);
  for (float v : t->v) EXPECT_NEAR(v, 1.0f, 1e-6);
}

TEST(AcTuning, ScalesAreClampedAndZeroCountsAsTheLeast) {
  auto t = FitAcTuning({1e6, 1.0, 1e-6, 0.0}, {0, 0, 0, 0});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FLOAT_EQ(t->k[0], 8.f);
  EXPECT_FLOAT_EQ(t->k[2], 0.125f);
  EXPECT_FLOAT_EQ(t->k[3], t->k[2]);
  for (float v : t->v) EXPECT_FLOAT_EQ(v, 1.f);  // no sensitivity: all alike
}

TEST(AcTuning, BadSensitivitiesAreRefused) {
  EXPECT_FALSE(FitAcTuning({}, {}).ok());
  EXPECT_FALSE(FitAcTuning({1, 2}, {1}).ok());
  EXPECT_FALSE(FitAcTuning({1, -1}, {1, 1}).ok());
  EXPECT_FALSE(FitAcTuning({1, NAN}, {1, 1}).ok());
}

TEST(AcTuning, FormatParsesBack) {
  const AcLayerTuning t{{1.5f, 0.25f, 8.f}, {1.f, 2.f, 0.125f}};
  const std::string text = FormatAcTuning(t, "SmolLM2\nprobes K 15 / V 8");
  EXPECT_EQ(text.rfind("# SmolLM2\n# probes K 15 / V 8\n0 1.5000 1.0000\n", 0), 0u) << text;
  auto back = ParseAcTuning(text);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->k, t.k);
  EXPECT_EQ(back->v, t.v);
}

TEST(AcTuning, MalformedFilesAreRefusedNamingTheLine) {
  for (const char* text : {"", "# only a comment\n", "1 1 1\n", "0 1\n", "0 1 0\n", "0 1 x\n",
                           "0 1 1\n0 1 1\n", "0 1 inf\n"}) {
    const auto t = ParseAcTuning(text);
    EXPECT_FALSE(t.ok()) << '"' << text << '"';
  }
  const auto t = ParseAcTuning("# c\n0 1 1\n2 1 1\n");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("line 3"), std::string::npos) << t.status();
  EXPECT_EQ(ReadAcTuning("/nonexistent/tuning").status().code(), absl::StatusCode::kNotFound);
}

// A tuned layer's K units get its scale's levels: more bytes where the
// scale is above 1, fewer below (units code apart); the decoder reads
// every tuning.
// K channel weights: (query energy / key energy)^(1/4) over each unit's
// geometric mean, clamped to [1/16, 16], zero as the unit's least; in the
// file after the layers, a line per (layer, head) in order.
TEST(AcTuning, ChannelWeightsBalanceQueryAndKeyEnergy) {
  // 2 layers x 1 head x 4 channels: query energies 1, 16, 256, 4096 over
  // keys all alike, then a unit with a zero query energy, an outlier beyond
  // the clamp, and key energies that cancel the queries'.
  auto w = FitKChannelWeights({1, 16, 256, 4096, 0, 1, 1e12, 4}, {2, 2, 2, 2, 1, 1, 1, 4}, 2, 1, 4);
  ASSERT_TRUE(w.ok()) << w.status();
  const float g = 2 * std::sqrt(2.f);  // ratios 1, 2, 4, 8 (times 2^(-1/4)): geometric mean 2 sqrt 2
  EXPECT_NEAR((*w)[0], 1 / g, 1e-5);
  EXPECT_NEAR((*w)[1], 2 / g, 1e-5);
  EXPECT_NEAR((*w)[3], 8 / g, 1e-5);
  EXPECT_EQ((*w)[4], (*w)[5]);  // 0 counts as the least positive query energy
  EXPECT_EQ((*w)[5], (*w)[7]);  // 4 / 4 = 1 / 1
  EXPECT_EQ((*w)[6], 16.f);     // clamped
  EXPECT_EQ(FitKChannelWeights({1, 2, 3}, {1, 2, 3}, 2, 1, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FitKChannelWeights({1, 2, 3, 4}, {1, -2, 3, 4}, 1, 1, 4).status().code(),
            absl::StatusCode::kInvalidArgument);

  AcLayerTuning t;
  t.k = {1.5f, 0.75f};
  t.v = {1.f, 1.f};
  t.kv_heads = 2;
  t.head_dim = 2;
  t.k_channel = {0.5f, 2.f, 1.f, 1.f, 0.25f, 4.f, 3.f, 0.333f};
  const std::string text = FormatAcTuning(t, "test");
  auto back = ParseAcTuning(text);
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << text;
  EXPECT_EQ(back->kv_heads, 2);
  EXPECT_EQ(back->head_dim, 2);
  EXPECT_EQ(back->k_channel, t.k_channel);
  EXPECT_EQ(WithChannelWeights(AcHigh(), *back).k_channel_weights, t.k_channel);
  EXPECT_TRUE(ParseAcTuning("0 1 1\n").value().k_channel.empty());
  for (const char* bad : {"0 1 1\n1 1 1\nk 0 0 1 1\nk 1 0 1 1\nk 0 1 1 1\nk 1 1 1 1\n",  // out of order
                          "0 1 1\nk 0 0 1 1\nk 0 1 1\n",                                      // another width
                          "0 1 1\nk 0 0 1 0\n",                                                // a weight of 0
                          "0 1 1\nk 0 0 1 1\n1 1 1\n"}) {                                     // a layer after
    EXPECT_EQ(ParseAcTuning(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(AcTuning, TunedPolicyMovesBytesBetweenLayers) {
  const AcShape s{2, 1, 32};
  const auto kv = SyntheticKv(s, 64, 7, false);
  auto bytes = [&](const AcPolicy& p) {
    std::vector<std::vector<uint8_t>> objects;
    AcGroupEncoder(s, p).Encode(kv.data(), 64, &objects);
    std::vector<float> out(kv.size());
    const std::vector<absl::Span<const uint8_t>> spans(objects.begin(), objects.end());
    EXPECT_TRUE(AcGroupDecoder(s).DecodeGroup(spans, out.data()).ok());
    size_t n = 0;
    for (const auto& o : objects) n += o.size();
    return n;
  };
  const AcPolicy base{"ac", 31, 16};
  const size_t plain = bytes(base);
  EXPECT_EQ(bytes(Tuned(base, {{1.f, 1.f}, {1.f, 1.f}})), plain);
  EXPECT_GT(bytes(Tuned(base, {{4.f, 1.f}, {1.f, 1.f}})), plain);
  EXPECT_LT(bytes(Tuned(base, {{1.f, 0.25f}, {1.f, 1.f}})), plain);
  // V's scales are recorded, not applied.
  EXPECT_EQ(bytes(Tuned(base, {{1.f, 1.f}, {4.f, 0.25f}})), plain);
}

}  // namespace
}  // namespace kvcast::kvcache::ac
