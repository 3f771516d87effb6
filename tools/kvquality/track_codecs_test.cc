#include "tools/kvquality/track_codecs.h"

#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace kvcast::kvquality {
namespace {

// All-KV mode codes each layer's rows as a group of its own (first_layer):
// the values must be those the whole token's group gives that layer, at
// its tuned levels and with its K channel weights (an ac group codes every
// unit on its own).
TEST(FloatGroupCoderTest, ALayerCodedApartGetsItsOwnLevelsAndWeights) {
  const int layers = 3, heads = 2, dim = 32, tokens = 20, row = heads * dim;
  kvcache::ac::AcPolicy policy = kvcache::ac::AcLow();
  policy.k_layer_scale = {0.5f, 1.f, 2.f};
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(0.25f, 4.f), x(-3.f, 3.f);
  for (int i = 0; i < layers * row; ++i) policy.k_channel_weights.push_back(u(rng));
  const kvcache::KvCompression track(&policy);
  std::vector<float> whole(size_t(tokens) * layers * 2 * row);
  for (float& v : whole) v = x(rng);
  std::vector<float> coded = whole;
  FloatGroupCoder all(layers, heads, dim);
  ASSERT_TRUE(all.Code(track, coded.data(), tokens).ok());
  for (int l = 0; l < layers; ++l) {
    std::vector<float> rows(size_t(tokens) * 2 * row);  // layer l's K row, then V row, per token
    for (int t = 0; t < tokens; ++t) {
      std::memcpy(&rows[size_t(t) * 2 * row], &whole[(size_t(t) * layers + l) * 2 * row],
                  sizeof(float) * 2 * row);
    }
    FloatGroupCoder one(1, heads, dim);
    ASSERT_TRUE(one.Code(track, rows.data(), tokens, l).ok());
    for (int t = 0; t < tokens; ++t) {
      ASSERT_EQ(0, std::memcmp(&rows[size_t(t) * 2 * row], &coded[(size_t(t) * layers + l) * 2 * row],
                               sizeof(float) * 2 * row))
          << "layer " << l << " token " << t;
    }
  }
}

}  // namespace
}  // namespace kvcast::kvquality
