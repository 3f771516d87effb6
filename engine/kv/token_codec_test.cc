// Token payloads: sizes per format, the layer-major K-then-V layout, and
// page round trips equal to the reference row codec.
#include "engine/kv/token_codec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernels/hadamard.h"

namespace kvcast {
namespace {

TEST(TokenCodec, BytesPerTokenOfALlama3_8BShape) {
  KvLayout llama{32, 8, 128, 16};
  EXPECT_EQ(TokenCodec(llama, KvFormat::kFp16).token_bytes(), 131072u);
  EXPECT_EQ(TokenCodec(llama, KvFormat::kBf16).token_bytes(), 131072u);
  // 8-bit: one fp16 scale per head; 4-bit: one per 32 values.
  EXPECT_EQ(TokenCodec(llama, KvFormat::kInt8).token_bytes(), 64u * (8 * 2 + 1024));
  EXPECT_EQ(TokenCodec(llama, KvFormat::kFp8E4M3).token_bytes(), 64u * (8 * 2 + 1024));
  EXPECT_EQ(TokenCodec(llama, KvFormat::kInt4).token_bytes(), 64u * (32 * 2 + 512));
  EXPECT_EQ(TokenCodec(llama, KvFormat::kFp4E2M1).token_bytes(), 64u * (32 * 2 + 512));
  EXPECT_EQ(ScaleBlock(KvFormat::kInt4, 16), 16);  // per head when 32 does not divide it
}

TEST(TokenCodec, SlotsFollowThePageTable) {
  const int32_t pages[] = {5, 2};
  EXPECT_EQ(SlotsOf(pages, 4, 3, 3), (std::vector<int32_t>{23, 8, 9}));
}

class TokenCodecPool : public ::testing::Test {
 protected:
  void SetUp() override {
    backend_ = NewCpuBackend();
    pool_ = *KvPagePool::Create(backend_.get(), layout_, 8);
  }
  float* Row(int layer, bool v, int slot) {
    float* cache = v ? pool_->v_cache(layer) : pool_->k_cache(layer);
    return cache + size_t(slot) * layout_.token_floats();
  }
  KvLayout layout_{3, 2, 32, 4};
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<KvPagePool> pool_;
};

TEST_F(TokenCodecPool, PayloadIsLayerMajorKThenV) {
  const std::vector<int32_t> slots = {13, 2, 30};
  for (int l = 0; l < 3; ++l) {
    for (int v = 0; v < 2; ++v) {
      for (size_t t = 0; t < slots.size(); ++t) {  // < 18: exact in fp16
        for (int i = 0; i < 64; ++i) Row(l, v, slots[t])[i] = l * 6 + v * 3 + t + i / 64.f;
      }
    }
  }
  TokenCodec codec(layout_, KvFormat::kFp16);
  ASSERT_EQ(codec.row_bytes(), 128u);
  std::vector<uint8_t> out(slots.size() * codec.token_bytes());
  ASSERT_TRUE(codec.Encode(backend_.get(), *pool_, slots, out.data()).ok());
  for (size_t t = 0; t < slots.size(); ++t) {
    for (int l = 0; l < 3; ++l) {
      for (int v = 0; v < 2; ++v) {
        const uint8_t* row = out.data() + t * codec.token_bytes() + (2 * l + v) * 128;
        for (int i = 0; i < 64; ++i) {
          uint16_t h = uint16_t(row[2 * i] | (row[2 * i + 1] << 8));  // little-endian
          EXPECT_EQ(HalfToFloat(h), Row(l, v, slots[t])[i]) << t << " " << l << " " << v;
        }
      }
    }
  }
}

TEST_F(TokenCodecPool, EveryFormatRoundTripsLikeTheReferenceRowCodec) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.f, 3.f);
  for (int l = 0; l < 3; ++l) {
    for (int s = 0; s < 32; ++s) {
      for (int i = 0; i < 64; ++i) {
        Row(l, false, s)[i] = dist(rng);
        Row(l, true, s)[i] = dist(rng);
      }
    }
  }
  const std::vector<int32_t> from = {1, 2, 3, 17, 18};
  const std::vector<int32_t> to = {20, 21, 22, 23, 31};
  for (KvFormat f : kAllKvFormats) {
    TokenCodec codec(layout_, f);
    std::vector<uint8_t> bytes(from.size() * codec.token_bytes());
    ASSERT_TRUE(codec.Encode(backend_.get(), *pool_, from, bytes.data()).ok());
    ASSERT_TRUE(codec.Decode(backend_.get(), bytes.data(), to, pool_.get()).ok());
    std::vector<uint8_t> enc(codec.row_bytes());
    std::vector<float> want(64);
    for (size_t t = 0; t < from.size(); ++t) {
      for (int l = 0; l < 3; ++l) {
        for (int v = 0; v < 2; ++v) {
          EncodeKvRow(f, Row(l, v, from[t]), 2, 32, codec.block(), enc.data());
          DecodeKvRow(f, enc.data(), 2, 32, codec.block(), want.data());
          for (int i = 0; i < 64; ++i) {
            ASSERT_EQ(Row(l, v, to[t])[i], want[i]) << int(f) << " " << t << " " << l;
          }
        }
      }
    }
  }
}

// The rotated 4-bit tracks: each row is the reference row codec of the
// token's fp16 values rotated head by head; decoded, rotated back and
// rounded to fp16.
TEST_F(TokenCodecPool, RotatedRowsCodeTheRotatedFp16Values) {
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.f, 2.f);
  for (int l = 0; l < 3; ++l) {
    for (int s = 0; s < 32; ++s) {
      for (int i = 0; i < 64; ++i) {
        Row(l, false, s)[i] = dist(rng) * (i % 32 == 5 ? 20.f : 1.f);  // an outlier channel
        Row(l, true, s)[i] = dist(rng);
      }
    }
  }
  const std::vector<int32_t> from = {4, 9, 16}, to = {24, 25, 26};
  for (KvFormat f : {KvFormat::kInt4, KvFormat::kFp4E2M1}) {
    TokenCodec codec(layout_, f, /*rotated=*/true);
    ASSERT_TRUE(codec.Supported().ok());
    ASSERT_EQ(codec.token_bytes(), TokenCodec(layout_, f).token_bytes());
    std::vector<uint8_t> bytes(from.size() * codec.token_bytes());
    ASSERT_TRUE(codec.Encode(backend_.get(), *pool_, from, bytes.data()).ok());
    ASSERT_TRUE(codec.Decode(backend_.get(), bytes.data(), to, pool_.get()).ok());
    std::vector<uint8_t> enc(codec.row_bytes());
    std::vector<float> x(64);
    for (size_t t = 0; t < from.size(); ++t) {
      for (int l = 0; l < 3; ++l) {
        for (int v = 0; v < 2; ++v) {
          for (int i = 0; i < 64; ++i) x[i] = HalfToFloat(FloatToHalf(Row(l, v, from[t])[i]));
          RotateHeads(x.data(), 64, 32, false);
          EncodeKvRow(f, x.data(), 2, 32, codec.block(), enc.data());
          const uint8_t* row = bytes.data() + t * codec.token_bytes() + (2 * l + v) * enc.size();
          ASSERT_EQ(std::vector<uint8_t>(row, row + enc.size()), enc) << int(f) << " " << t;
          DecodeKvRow(f, enc.data(), 2, 32, codec.block(), x.data());
          RotateHeads(x.data(), 64, 32, true);
          for (int i = 0; i < 64; ++i) {
            ASSERT_EQ(Row(l, v, to[t])[i], HalfToFloat(FloatToHalf(x[i]))) << int(f) << " " << t;
          }
        }
      }
    }
  }
}

// What the rotation is for: one outlier channel sets the step of every
// channel of its block, unless the rotation spreads it over the head.
TEST_F(TokenCodecPool, RotationCutsTheErrorOfAHeadWithAnOutlierChannel) {
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.f, 1.f);
  const std::vector<int32_t> from = {0, 1, 2, 3, 4, 5, 6, 7}, to = {8, 9, 10, 11, 12, 13, 14, 15};
  for (int s : from) {
    for (int i = 0; i < 64; ++i) Row(1, false, s)[i] = dist(rng) * (i % 32 == 7 ? 8.f : 1.f);
  }
  for (KvFormat f : {KvFormat::kInt4, KvFormat::kFp4E2M1}) {
    double err[2] = {0, 0};
    for (bool rotated : {false, true}) {
      TokenCodec codec(layout_, f, rotated);
      std::vector<uint8_t> bytes(from.size() * codec.token_bytes());
      ASSERT_TRUE(codec.Encode(backend_.get(), *pool_, from, bytes.data()).ok());
      ASSERT_TRUE(codec.Decode(backend_.get(), bytes.data(), to, pool_.get()).ok());
      for (size_t t = 0; t < from.size(); ++t) {
        for (int i = 0; i < 64; ++i) {
          err[rotated] += std::pow(Row(1, false, to[t])[i] - Row(1, false, from[t])[i], 2);
        }
      }
    }
    // fp4's own exponent already keeps small values: it gains less.
    const double most = f == KvFormat::kInt4 ? 0.4 : 0.85;
    EXPECT_LT(err[1], most * err[0]) << int(f) << ": " << err[1] << " vs " << err[0];
  }
}

TEST(TokenCodec, RotatedTracksNeedPowerOfTwoHeads) {
  auto backend = NewCpuBackend();
  const KvLayout odd{1, 2, 48, 4};
  auto pool = *KvPagePool::Create(backend.get(), odd, 2);
  TokenCodec codec(odd, KvFormat::kInt4, /*rotated=*/true);
  EXPECT_EQ(codec.Supported().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(codec.Supported().message().find("have 48"), std::string::npos) << codec.Supported();
  std::vector<uint8_t> bytes(codec.token_bytes());
  const int32_t slot = 0;
  EXPECT_FALSE(codec.Encode(backend.get(), *pool, {&slot, 1}, bytes.data()).ok());
  EXPECT_FALSE(codec.Decode(backend.get(), bytes.data(), {&slot, 1}, pool.get()).ok());
  EXPECT_TRUE(TokenCodec(odd, KvFormat::kInt4).Supported().ok());
}

}  // namespace
}  // namespace kvcast
