#include "transport/kvcache/xl/xl_codec.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "common/dtype.h"
#include "gtest/gtest.h"
#include "transport/kvcache/xl/kv_basis.h"
#include "transport/kvcache/xl/testing/low_rank_kv.h"

namespace kvcast::kvcache::xl {
namespace {

constexpr AcShape kShape{4, 2, 16};  // rows of 32 values; groups of 2 layers: 64 dims
constexpr int kGroup = 2;
constexpr int kRank = testing::kLowRank;  // directions per block that carry the data
using testing::LowRankKv;

// Token vectors of rank kRank per block (testing/low_rank_kv.h, every
// block at scale 1: coefficient i of spread LowRankKv::Sigma(i) = 8 / 2^i);
// the directions and means from structure_seed, the tokens from seed.
LowRankKv MakeKv(int count, uint32_t seed, uint32_t structure_seed = 100) {
  return testing::MakeLowRankKv(kShape, kGroup, count, seed, structure_seed);
}

std::shared_ptr<const KvBasis> FitBasis(const LowRankKv& kv, int count) {
  KvBasisFitter fitter(kShape, kGroup);
  for (int t = 0; t < count; t += 100) {  // in batches, as a caller adds windows
    fitter.Add(kv.tokens.data() + size_t(t) * kShape.token_floats(), std::min(100, count - t));
  }
  absl::StatusOr<KvBasis> b = fitter.Fit();
  EXPECT_TRUE(b.ok()) << b.status();
  return std::make_shared<const KvBasis>(*std::move(b));
}

std::vector<absl::Span<const uint8_t>> Spans(const std::vector<std::vector<uint8_t>>& objects) {
  return {objects.begin(), objects.end()};
}

TEST(KvBasisTest, FitFindsTheDataDirectionsAndVariances) {
  const LowRankKv kv = MakeKv(4000, 1);
  const auto basis = FitBasis(kv, 4000);
  ASSERT_EQ(basis->num_groups(), 2);
  const int dim = basis->block(0, 0).dim;
  ASSERT_EQ(dim, 64);
  for (int b = 0; b < 4; ++b) {
    const KvBasis::Block& blk = basis->block(b / 2, b % 2);
    EXPECT_EQ(blk.first_layer, (b / 2) * kGroup);
    for (int i = 0; i < kRank; ++i) {
      // The sample variance of 4,000 draws: within 10% of sigma^2.
      EXPECT_NEAR(blk.variance[i], LowRankKv::Sigma(i) * LowRankKv::Sigma(i),
                  0.1 * LowRankKv::Sigma(i) * LowRankKv::Sigma(i))
          << "block " << b << " component " << i;
      // Component i is direction i (up to sign and fp16 rounding).
      double dot = 0;
      for (int c = 0; c < dim; ++c) {
        dot += blk.axes[size_t(i) * dim + c] * kv.blocks[b].dirs[size_t(i) * dim + c];
      }
      EXPECT_GT(std::abs(dot), 0.99) << "block " << b << " component " << i;
    }
    EXPECT_LT(blk.variance[kRank], 1e-4);
    for (int i = 1; i < dim; ++i) EXPECT_LE(blk.variance[i], blk.variance[i - 1]);
  }
}

TEST(KvBasisTest, SerializeParsesBackAndRefusesDamage) {
  const LowRankKv kv = MakeKv(300, 2);
  const auto basis = FitBasis(kv, 300);
  const std::string bytes = basis->Serialize();
  absl::StatusOr<KvBasis> back = KvBasis::Parse(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->id(), basis->id());
  EXPECT_EQ(back->Serialize(), bytes);
  EXPECT_FALSE(KvBasis::Parse(bytes.substr(0, bytes.size() - 1)).ok());
  EXPECT_FALSE(KvBasis::Parse(bytes + "x").ok());
  std::string magic = bytes;
  magic[0] = 'X';
  EXPECT_FALSE(KvBasis::Parse(magic).ok());
  std::string unordered = bytes;  // block 0's variance 1 above variance 0
  const float big = 1e9f;
  std::memcpy(&unordered[16 + 64 * 4 + 4], &big, 4);
  EXPECT_EQ(KvBasis::Parse(unordered).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(KvBasisFitter(kShape, kGroup).Fit().status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(KvBasisFitter(kShape, 5).Fit().status().code(), absl::StatusCode::kInvalidArgument);
}

// The error of a decoded token is that of its kept coefficients' rounding:
// at most sqrt(kept) s / 2 in each block, plus the fp16 axes' rounding.
TEST(XlCodecTest, RoundTripErrorIsTheSteps) {
  const LowRankKv calib = MakeKv(3000, 3), eval = MakeKv(128, 4);
  const auto basis = FitBasis(calib, 3000);
  for (float step : {0.05f, 0.5f}) {
    const float v_step = 2 * step;  // V coarser: each kind at its own step
    const XlPoint point{"xl@test", step, v_step};
    const XlPlan plan = PlanOf(*basis, step, v_step);
    for (size_t b = 0; b < plan.kept.size(); ++b) {
      // Components i with sigma_i^2 >= s^2 / 12 (the rest carry no data).
      const float s = b % 2 == 0 ? step : v_step;
      int expect = 0;
      while (expect < kRank &&
             LowRankKv::Sigma(expect) * LowRankKv::Sigma(expect) * 0.9 >= s * s / 12) {
        ++expect;
      }
      EXPECT_EQ(plan.kept[b], expect) << "step " << s;
    }
    XlGroupEncoder enc(basis, point);
    std::vector<std::vector<uint8_t>> objects;
    enc.Encode(eval.tokens.data(), 128, &objects);
    ASSERT_EQ(objects.size(), 128u);
    XlGroupDecoder dec(basis);
    std::vector<float> out(eval.tokens.size());
    ASSERT_TRUE(dec.DecodeGroup(Spans(objects), out.data()).ok());
    const int row = kShape.num_kv_heads * kShape.head_dim;
    for (int kind = 0; kind < 2; ++kind) {
      const float s = kind == 0 ? step : v_step;
      double worst = 0;
      for (int t = 0; t < 128; ++t) {
        for (int l = 0; l < kShape.num_layers; ++l) {
          double err = 0;
          const size_t at = size_t(t) * kShape.token_floats() + (2 * l + kind) * row;
          for (int c = 0; c < row; ++c) err += std::pow(out[at + c] - eval.tokens[at + c], 2);
          worst = std::max(worst, std::sqrt(err));
        }
      }
      // Dropped components (sigma below the step) are lost whole: up to 4 sigma.
      double dropped = 0;
      for (int i = plan.kept[kind]; i < kRank; ++i) dropped += std::pow(4 * LowRankKv::Sigma(i), 2);
      EXPECT_LT(worst, std::sqrt(kRank) * s / 2 + std::sqrt(dropped) + 0.02)
          << "kind " << kind << " step " << s;
      EXPECT_GT(worst, s / 8) << "kind " << kind << " step " << s;  // coded, not copied
    }
  }
}

TEST(XlCodecTest, CoarserStepsFewerBytesAndTheSinkExact) {
  const LowRankKv calib = MakeKv(3000, 5), eval = MakeKv(64, 6);
  const auto basis = FitBasis(calib, 3000);
  size_t last = SIZE_MAX;
  for (float step : {0.01f, 0.1f, 1.f}) {
    XlGroupEncoder enc(basis, {"xl@test", step, step});
    std::vector<std::vector<uint8_t>> objects;
    enc.Encode(eval.tokens.data(), 64, &objects, /*starts_sequence=*/true);
    size_t bytes = 0;
    for (const auto& o : objects) bytes += o.size();
    EXPECT_LT(bytes, last) << "step " << step;
    last = bytes;
    std::vector<float> out(eval.tokens.size());
    ASSERT_TRUE(XlGroupDecoder(basis).DecodeGroup(Spans(objects), out.data()).ok());
    for (int i = 0; i < kShape.token_floats(); ++i) {
      ASSERT_EQ(out[i], HalfToFloat(FloatToHalf(eval.tokens[i]))) << i;
    }
  }
}

TEST(XlCodecTest, RefusesDamagedOrForeignGroups) {
  const LowRankKv calib = MakeKv(2000, 7), eval = MakeKv(16, 8), other = MakeKv(2000, 9, 101);
  const auto basis = FitBasis(calib, 2000);
  XlGroupEncoder enc(basis, {"xl@test", 0.05f, 0.05f});
  std::vector<std::vector<uint8_t>> objects;
  enc.Encode(eval.tokens.data(), 16, &objects);
  std::vector<float> out(eval.tokens.size(), -7.f);
  XlGroupDecoder dec(basis);

  auto code = [&](std::vector<std::vector<uint8_t>> objs) {
    return dec.DecodeGroup(Spans(objs), out.data()).code();
  };
  auto truncated = objects;
  truncated[5].pop_back();
  EXPECT_EQ(code(truncated), absl::StatusCode::kDataLoss);
  auto padded = objects;
  padded[3].push_back(0);
  EXPECT_EQ(code(padded), absl::StatusCode::kDataLoss);
  auto flipped = objects;
  flipped[7][1] ^= 0x10;  // lane 0's state
  EXPECT_NE(code(flipped), absl::StatusCode::kOk);
  auto fewer = objects;
  fewer.pop_back();
  EXPECT_EQ(code(fewer), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float v) { return v == -7.f; }))
      << "written on an error";
  // Another basis (another calibration): refused by its id.
  const auto foreign = FitBasis(other, 2000);
  EXPECT_EQ(XlGroupDecoder(foreign).DecodeGroup(Spans(objects), out.data()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(dec.DecodeGroup(Spans(objects), out.data()).ok());
}

// Relative points scale with the basis' RMS per kind; the named tracks are
// relative, and their steps are what the header carries.
TEST(XlCodecTest, RelativePointsAreInUnitsOfTheBasisRms) {
  const LowRankKv calib = MakeKv(2000, 10);
  const auto basis = FitBasis(calib, 2000);
  double sum[2] = {0, 0}, dims[2] = {0, 0};
  for (int g = 0; g < basis->num_groups(); ++g) {
    for (int kind = 0; kind < 2; ++kind) {
      for (float v : basis->block(g, kind).variance) sum[kind] += v;
      dims[kind] += basis->block(g, kind).dim;
    }
  }
  const auto [k, v] = StepsOf(*basis, {"xl@rel", 0.5f, 0.25f, /*relative=*/true});
  EXPECT_NEAR(k, 0.5 * std::sqrt(sum[0] / dims[0]), 1e-5);
  EXPECT_NEAR(v, 0.25 * std::sqrt(sum[1] / dims[1]), 1e-5);
  EXPECT_EQ(StepsOf(*basis, {"xl@abs", 0.5f, 0.25f}), std::make_pair(0.5f, 0.25f));
  EXPECT_EQ(XlPointOf("xl"), &XlHigh());
  EXPECT_EQ(XlPointOf("xl-lo"), &XlLow());
  EXPECT_EQ(XlPointOf("ac"), nullptr);
  XlGroupEncoder enc(basis, XlHigh());
  std::vector<std::vector<uint8_t>> objects;
  enc.Encode(calib.tokens.data(), 4, &objects);
  float header_k;
  std::memcpy(&header_k, objects[0].data() + 20, 4);
  EXPECT_EQ(header_k, StepsOf(*basis, XlHigh()).first);
  EXPECT_EQ(enc.k_step(), header_k);
}

}  // namespace
}  // namespace kvcast::kvcache::xl
