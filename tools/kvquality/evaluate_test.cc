// The evaluation on the tiny model: exact tracks change nothing, coarser
// tracks more, all-kv more than product, sizes as the codecs say.
#include "tools/kvquality/evaluate.h"

#include <cmath>
#include <random>

#include "engine/kv/token_codec.h"
#include "tools/kvquality/track_codecs.h"
#include "engine/testing/tiny_model_fixture.h"
#include "gtest/gtest.h"

namespace kvcast::kvquality {
namespace {

class EvaluateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ckpt = Checkpoint::Open(TinyModelDir());
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    checkpoint_ = std::move(*ckpt);
    std::mt19937 rng(7);
    for (int w = 0; w < 3; ++w) {
      tokens_.emplace_back(kWindow);
      for (int32_t& t : tokens_.back()) t = int32_t(rng() % 512);
    }
    for (const auto& t : tokens_) windows_.push_back(t);
    options_.prefix_tokens = 128;
    options_.continuation_tokens = 32;
    options_.resamples = 200;
  }
  absl::StatusOr<std::vector<TrackResult>> Evaluate() {
    return EvaluateTracks(*checkpoint_, backend_.get(), windows_, options_);
  }
  static const TrackResult& Find(const std::vector<TrackResult>& rs, const std::string& track,
                                 Mode mode) {
    for (const TrackResult& r : rs) {
      if (r.track == track && r.mode == mode) return r;
    }
    ADD_FAILURE() << "no " << track;
    return rs[0];
  }

  static constexpr int kWindow = 160;
  std::unique_ptr<Checkpoint> checkpoint_;
  std::unique_ptr<Backend> backend_ = NewCpuBackend();
  std::vector<std::vector<int32_t>> tokens_;
  std::vector<absl::Span<const int32_t>> windows_;
  EvalOptions options_;
};

TEST_F(EvaluateTest, CoarserTracksCostMoreAndAllKvMoreThanProduct) {
  options_.tracks = {"fp16", "int8", "int4", "ac"};
  int progress = 0;
  options_.progress = [&](int done, int total) {
    EXPECT_EQ(total, 3);
    EXPECT_EQ(done, ++progress);
  };
  const auto rs = Evaluate();
  ASSERT_TRUE(rs.ok()) << rs.status();
  ASSERT_EQ(rs->size(), 8u);
  EXPECT_EQ(progress, 3);
  for (Mode m : {Mode::kProduct, Mode::kAllKv}) {
    // The pages keep fp16 values, so the fp16 track is exact.
    const TrackQuality& fp16 = Find(*rs, "fp16", m).quality;
    EXPECT_EQ(fp16.positions, 3 * 31);
    EXPECT_EQ(fp16.ppl_change, 0.0);
    EXPECT_EQ(fp16.mean_kl, 0.0);
    EXPECT_EQ(fp16.top1, 1.0);
    const TrackQuality& int8 = Find(*rs, "int8", m).quality;
    const TrackQuality& int4 = Find(*rs, "int4", m).quality;
    EXPECT_GT(int8.mean_kl, 0.0) << ModeName(m);
    EXPECT_GT(int4.mean_kl, 2 * int8.mean_kl) << ModeName(m);
    EXPECT_GT(Find(*rs, "ac", m).quality.mean_kl, 0.0) << ModeName(m);
    EXPECT_NEAR(int8.ppl_exact, fp16.ppl_exact, 1e-9);  // one exact run per window
  }
  EXPECT_GT(Find(*rs, "int4", Mode::kAllKv).quality.mean_kl,
            Find(*rs, "int4", Mode::kProduct).quality.mean_kl);
  // Sizes: the row codecs' token bytes; ac's its objects'.
  const KvLayout layout{2, 2, 16, 16};
  const double values = 2.0 * layout.num_layers * layout.token_floats();
  for (const char* t : {"fp16", "int8", "int4"}) {
    const KvFormat f = t == std::string("fp16")   ? KvFormat::kFp16
                       : t == std::string("int8") ? KvFormat::kInt8
                                                  : KvFormat::kInt4;
    for (Mode m : {Mode::kProduct, Mode::kAllKv}) {
      EXPECT_DOUBLE_EQ(Find(*rs, t, m).bits_per_value,
                       8.0 * TokenCodec(layout, f).token_bytes() / values)
          << t;
    }
  }
  const double ac_bits = Find(*rs, "ac", Mode::kProduct).bits_per_value;
  EXPECT_GT(ac_bits, 2.0);
  EXPECT_LT(ac_bits, 16.0);
}

TEST_F(EvaluateTest, RotatedTracksRotateBackAndCostTheirFormatsBytes) {
  options_.tracks = {"int8", "int4", "int4+rot", "int4-rot", "fp16+rot", "ac@15/8", "ac@15/8+rot"};
  const auto rs = Evaluate();
  ASSERT_TRUE(rs.ok()) << rs.status();
  for (Mode m : {Mode::kProduct, Mode::kAllKv}) {
    const TrackResult& rot = Find(*rs, "int4+rot", m);
    const TrackResult& plain = Find(*rs, "int4", m);
    EXPECT_EQ(rot.bits_per_value, plain.bits_per_value);
    EXPECT_GT(rot.quality.mean_kl, 0.0);
    EXPECT_NE(rot.quality.mean_kl, plain.quality.mean_kl) << ModeName(m);
    // The harness's rotation is the wire track's.
    const TrackResult& wire = Find(*rs, "int4-rot", m);
    EXPECT_EQ(wire.bits_per_value, rot.bits_per_value);
    EXPECT_EQ(wire.quality.mean_kl, rot.quality.mean_kl) << ModeName(m);
    // fp16 of rotated values, rotated back: fp16 rounding's error only.
    const double fp16_rot = Find(*rs, "fp16+rot", m).quality.mean_kl;
    EXPECT_GT(fp16_rot, 0.0) << ModeName(m);
    EXPECT_LT(fp16_rot, Find(*rs, "int8", m).quality.mean_kl / 10) << ModeName(m);
    // ac codes the rotated values: other bytes, other error.
    const TrackResult& ac = Find(*rs, "ac@15/8", m);
    const TrackResult& ac_rot = Find(*rs, "ac@15/8+rot", m);
    EXPECT_GT(ac_rot.quality.mean_kl, 0.0);
    EXPECT_NE(ac_rot.quality.mean_kl, ac.quality.mean_kl);
  }
  EXPECT_NE(Find(*rs, "ac@15/8+rot", Mode::kProduct).bits_per_value,
            Find(*rs, "ac@15/8", Mode::kProduct).bits_per_value);
}

TEST_F(EvaluateTest, AnExploredAcPointAtTheTracksLevelsIsThatTrack) {
  options_.tracks = {"ac-lo", "ac@6/2+rot+sink6", "ac@2/1+rot+sink6"};
  const auto rs = Evaluate();
  ASSERT_TRUE(rs.ok()) << rs.status();
  for (Mode m : {Mode::kProduct, Mode::kAllKv}) {
    const TrackResult& lo = Find(*rs, "ac-lo", m);
    const TrackResult& same = Find(*rs, "ac@6/2+rot+sink6", m);
    EXPECT_EQ(same.bits_per_value, lo.bits_per_value);
    EXPECT_EQ(same.quality.mean_kl, lo.quality.mean_kl);
    const TrackResult& coarse = Find(*rs, "ac@2/1+rot+sink6", m);
    EXPECT_LT(coarse.bits_per_value, lo.bits_per_value);
    EXPECT_GT(coarse.quality.mean_kl, lo.quality.mean_kl);
  }
  for (const char* bad : {"ac@0/3", "ac@7", "ac@x/4"}) {
    options_.tracks = {bad};
    const auto r = Evaluate();
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find(bad), std::string::npos) << r.status();
  }
}

// A probe codes one layer's K or V at its levels and the rest as good as
// exact: less KL than the whole point, more than a probe of a layer the
// model has not; a tuning of ones is the point itself.
TEST_F(EvaluateTest, ProbesCodeOneLayerAndATuningOfOnesChangesNothing) {
  options_.modes = {Mode::kProduct};
  options_.tracks = {"ac@7/4", "ac@7/4#L0K", "ac@7/4#L1V", "ac@7/4#L9K", "ac@7/4+tuned",
                     "ac@7/4+sink4"};
  options_.ac_tuning = kvcache::ac::AcLayerTuning{{1.f, 1.f}, {1.f, 1.f}};
  const auto rs = Evaluate();
  ASSERT_TRUE(rs.ok()) << rs.status();
  const TrackQuality& all = Find(*rs, "ac@7/4", Mode::kProduct).quality;
  const TrackQuality& none = Find(*rs, "ac@7/4#L9K", Mode::kProduct).quality;
  for (const char* probe : {"ac@7/4#L0K", "ac@7/4#L1V"}) {
    const TrackResult& r = Find(*rs, probe, Mode::kProduct);
    EXPECT_LT(r.quality.mean_kl, all.mean_kl) << probe;
    EXPECT_GT(r.quality.mean_kl, 10 * none.mean_kl) << probe;
    EXPECT_GT(r.bits_per_value, Find(*rs, "ac@7/4", Mode::kProduct).bits_per_value) << probe;
  }
  const TrackResult& tuned = Find(*rs, "ac@7/4+tuned", Mode::kProduct);
  EXPECT_EQ(tuned.bits_per_value, Find(*rs, "ac@7/4", Mode::kProduct).bits_per_value);
  EXPECT_EQ(tuned.quality.mean_kl, all.mean_kl);
  // The sink's finer steps cost bytes (token 0 of the first group only).
  EXPECT_GT(Find(*rs, "ac@7/4+sink4", Mode::kProduct).bits_per_value,
            Find(*rs, "ac@7/4", Mode::kProduct).bits_per_value);
  const kvcache::ac::AcLayerTuning ones{{1.f}, {1.f}};
  for (const char* bad : {"int8+tuned", "ac#L1X", "ac#Lx", "ac#L-1K", "fp16#L0K", "int8+sink2",
                          "ac+sink0", "ac+sink16", "ac+sinkx"}) {
    const auto r = ParseTrack(bad, &ones);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  const auto untuned = ParseTrack("ac+tuned", nullptr);
  EXPECT_NE(untuned.status().message().find("--ac_tuning"), std::string::npos) << untuned.status();
  const auto probe = ParseTrack("ac-lo#L3V", nullptr);
  ASSERT_TRUE(probe.ok()) << probe.status();
  EXPECT_EQ(probe->compression.ac->LevelsOf(3, true), kvcache::ac::AcLow().v_levels);
  EXPECT_EQ(probe->compression.ac->LevelsOf(3, false), kProbeExactLevels);
  EXPECT_EQ(probe->compression.ac->LevelsOf(2, true), kProbeExactLevels);
  const auto both = ParseTrack("ac-lo+sink3+tuned+rot", &ones);
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_TRUE(both->compression.ac->rotate);  // the ac group header's transform
  EXPECT_EQ(both->compression.ac->sink_shift, 3);
  EXPECT_EQ(both->compression.ac->k_layer_scale, ones.k);
  EXPECT_EQ(ProbeTracks("ac", 2), (std::vector<std::string>{"ac#L0K", "ac#L0V", "ac#L1K", "ac#L1V"}));
}

TEST_F(EvaluateTest, OptionsOutOfRangeAreNamed) {
  options_.tracks = {"int8", "int3"};
  auto rs = Evaluate();
  EXPECT_EQ(rs.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(rs.status().message().find("int3"), std::string::npos) << rs.status();
  options_.tracks = {"int8"};
  options_.prefix_tokens = 100;  // not a multiple of the 128-token group
  options_.continuation_tokens = 60;
  rs = Evaluate();
  EXPECT_EQ(rs.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(rs.status().message().find("prefix 100"), std::string::npos) << rs.status();
  options_.prefix_tokens = 128;
  options_.continuation_tokens = 16;  // windows hold 160 tokens, not 144
  rs = Evaluate();
  EXPECT_EQ(rs.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(rs.status().message().find("160"), std::string::npos) << rs.status();
}

// The xl tracks over a basis fitted on the windows: finer steps, more bytes
// and less loss; refused without a basis and in all-kv mode.
TEST_F(EvaluateTest, TheXlTracksCodeOverAFittedBasis) {
  options_.tracks = {"xl@0.02/0.02"};
  options_.modes = {Mode::kProduct};
  EXPECT_EQ(Evaluate().status().code(), absl::StatusCode::kInvalidArgument);  // no basis
  auto basis = FitKvBasis(*checkpoint_, backend_.get(), windows_, options_, /*group_layers=*/2);
  ASSERT_TRUE(basis.ok()) << basis.status();
  ASSERT_EQ(basis->num_groups(), 1);
  options_.kv_basis = std::make_shared<const kvcache::xl::KvBasis>(*std::move(basis));
  options_.tracks = {"int8", "xl@0.02/0.02", "xl@0.5/0.5", "xl-lo"};
  const auto rs = Evaluate();
  ASSERT_TRUE(rs.ok()) << rs.status();
  const TrackResult& fine = Find(*rs, "xl@0.02/0.02", Mode::kProduct);
  const TrackResult& coarse = Find(*rs, "xl@0.5/0.5", Mode::kProduct);
  const TrackResult& int8 = Find(*rs, "int8", Mode::kProduct);
  EXPECT_GT(fine.bits_per_value, coarse.bits_per_value);
  EXPECT_LT(coarse.bits_per_value, 8);
  EXPECT_GT(coarse.quality.mean_kl, 4 * fine.quality.mean_kl);
  EXPECT_GT(fine.quality.mean_kl, 0.0);
  EXPECT_LT(fine.quality.mean_kl, 4 * int8.quality.mean_kl);
  // A named track is its relative point over the basis.
  EXPECT_GT(Find(*rs, "xl-lo", Mode::kProduct).quality.mean_kl, fine.quality.mean_kl);
  EXPECT_FALSE(ParseTrack("xl+rot").ok());
  options_.modes = {Mode::kProduct, Mode::kAllKv};
  const auto all_kv = Evaluate();
  EXPECT_EQ(all_kv.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(all_kv.status().message().find("all-kv-token"), std::string::npos)
      << all_kv.status();
}

// All-kv-token: exact for fp16 (each token's KV put back as it was); for a
// lossy track the continuation's KV is coded too (the loss moves from
// product mode's: on SmolLM2 it grows 3-9x; the tiny model's random
// weights do not order them) but each token reads its own exact KV (less
// loss than all-kv).
TEST_F(EvaluateTest, AllKvTokenCodesEachTokenAfterItsStep) {
  auto basis = FitKvBasis(*checkpoint_, backend_.get(), windows_, options_, /*group_layers=*/2);
  ASSERT_TRUE(basis.ok()) << basis.status();
  options_.kv_basis = std::make_shared<const kvcache::xl::KvBasis>(*std::move(basis));
  options_.tracks = {"fp16", "int4", "xl@0.2/0.2"};
  options_.modes = {Mode::kProduct, Mode::kAllKvToken};
  const auto rs = Evaluate();
  ASSERT_TRUE(rs.ok()) << rs.status();
  const TrackQuality& fp16 = Find(*rs, "fp16", Mode::kAllKvToken).quality;
  EXPECT_LT(fp16.mean_kl, 1e-6);
  EXPECT_EQ(fp16.positions, 3 * 31);
  for (const char* t : {"int4", "xl@0.2/0.2"}) {
    const double token_kl = Find(*rs, t, Mode::kAllKvToken).quality.mean_kl;
    const double product_kl = Find(*rs, t, Mode::kProduct).quality.mean_kl;
    EXPECT_GT(std::abs(token_kl - product_kl), 0.01 * product_kl) << t;
    EXPECT_EQ(Find(*rs, t, Mode::kAllKvToken).bits_per_value,
              Find(*rs, t, Mode::kProduct).bits_per_value) << t;
  }
  options_.modes = {Mode::kAllKv};
  options_.tracks = {"int4"};
  const auto all_kv = Evaluate();
  ASSERT_TRUE(all_kv.ok()) << all_kv.status();
  EXPECT_GT(Find(*all_kv, "int4", Mode::kAllKv).quality.mean_kl,
            Find(*rs, "int4", Mode::kAllKvToken).quality.mean_kl);
  EXPECT_EQ(ModeOfName("all-kv-token").value(), Mode::kAllKvToken);
}

// A window of one token repeated: every layer's K before RoPE is the same
// at every position, so the fitted basis finds no K variance, which it
// does only if RoPE came off at each position's angles.
TEST_F(EvaluateTest, TheBasisSeesKBeforeRope) {
  for (auto& t : tokens_) std::fill(t.begin(), t.end(), 42);
  auto basis = FitKvBasis(*checkpoint_, backend_.get(), windows_, options_, /*group_layers=*/1);
  ASSERT_TRUE(basis.ok()) << basis.status();
  for (int l = 0; l < basis->num_groups(); ++l) {
    const kvcache::xl::KvBasis::Block& k = basis->block(l, 0);
    double energy = 0;
    for (float m : k.mean) energy += double(m) * m / k.dim;
    EXPECT_GT(energy, 1e-3) << "layer " << l;
    EXPECT_LT(k.variance[0], 1e-4 * energy) << "layer " << l;
  }
}

}  // namespace
}  // namespace kvcast::kvquality
