#include "engine/model/ggml_types.h"

#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace kvcast {
namespace {

std::string FromHex(const std::string& hex) {
  std::string out(hex.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i) out[i] = char(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return out;
}

// Every readable block type against PyPI's gguf package
// (tests/data/gguf_dequant_vectors.json, tools/golden/gguf_dequant_vectors.py),
// bit for bit.
TEST(GgmlTypesTest, DequantizeEqualsGgufPackageBitForBit) {
  std::ifstream in("tests/data/gguf_dequant_vectors.json");
  ASSERT_TRUE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json vectors = nlohmann::json::parse(text.str());
  int checked = 0;
  for (const auto& entry : vectors["types"]) {
    const std::string name = entry["type"];
    SCOPED_TRACE(name);
    std::optional<GgmlTypeInfo> info = GgmlTypeInfoOf(entry["id"].get<uint32_t>());
    ASSERT_TRUE(info.has_value());
    EXPECT_EQ(info->name, name);
    const int64_t count = entry["count"];
    const std::string bytes = FromHex(entry["bytes"]);
    ASSERT_EQ(bytes.size(), GgmlRowBytes(*info, count));
    std::vector<float> out(count);
    DequantizeGgml(info->type, bytes.data(), count, out.data());
    const auto& want = entry["float_bits"];
    ASSERT_EQ(want.size(), size_t(count));
    int mismatches = 0;
    for (int64_t i = 0; i < count; ++i) {
      uint32_t bits;
      std::memcpy(&bits, &out[i], 4);
      if (bits != want[i].get<uint32_t>() && ++mismatches <= 3) {
        ADD_FAILURE() << "value " << i << ": got " << out[i];
      }
    }
    EXPECT_EQ(mismatches, 0);
    ++checked;
  }
  // F16, BF16 and the nine block types (F32 is a copy).
  EXPECT_EQ(checked, 10);
}

TEST(GgmlTypesTest, NamesAndLayouts) {
  EXPECT_EQ(GgmlTypeName(10), "Q2_K");
  EXPECT_EQ(GgmlTypeName(23), "IQ4_XS");
  EXPECT_EQ(GgmlTypeName(1000), "type 1000");
  EXPECT_FALSE(GgmlTypeInfoOf(10).has_value());  // Q2_K: not readable.
  std::optional<GgmlTypeInfo> q6 = GgmlTypeInfoOf(14);
  ASSERT_TRUE(q6.has_value());
  EXPECT_EQ(q6->block_elems, 256);
  EXPECT_EQ(GgmlRowBytes(*q6, 512), 420u);
}

TEST(GgmlTypesTest, Q8_0ByHand) {
  // d = 0.5 (half 0x3800), q = 0, 1, -1, 127, -128, then zeros.
  unsigned char block[34] = {0x00, 0x38, 0, 1, 0xFF, 127, 0x80};
  std::vector<float> out(32);
  DequantizeGgml(GgmlType::kQ8_0, block, 32, out.data());
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 0.5f);
  EXPECT_EQ(out[2], -0.5f);
  EXPECT_EQ(out[3], 63.5f);
  EXPECT_EQ(out[4], -64.0f);
}

}  // namespace
}  // namespace kvcast
