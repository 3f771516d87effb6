#include "engine/tokenizer/bpe_trainer.h"

#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace kvcast {
namespace {

std::string Corpus() {
  std::string corpus;
  for (int i = 0; i < 50; ++i) {
    corpus += "the quick brown fox jumps over the lazy dog 12345 café 日本語 😀\n";
  }
  return corpus;
}

TEST(BpeTrainerTest, DeterministicAndWellFormed) {
  auto a = TrainByteLevelBpeTokenizerJson(Corpus(), 300);
  auto b = TrainByteLevelBpeTokenizerJson(Corpus(), 300);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*a, *b);
  const nlohmann::json j = nlohmann::json::parse(*a, nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  const auto& vocab = j["model"]["vocab"];
  EXPECT_EQ(vocab.size(), 298u);
  EXPECT_EQ(j["model"]["merges"].size(), 298u - 256u);
  EXPECT_EQ(vocab["!"], 0);
  EXPECT_EQ(vocab["\xC4\x80"], 188);  // "Ā" is byte 0x00.
  EXPECT_EQ(j["added_tokens"][0]["content"], "<|begin_of_text|>");
  EXPECT_EQ(j["added_tokens"][0]["id"], 298);
  EXPECT_EQ(j["added_tokens"][1]["content"], "<|end_of_text|>");
  EXPECT_EQ(j["added_tokens"][1]["id"], 299);
  EXPECT_EQ(j["pre_tokenizer"]["pretokenizers"][0]["type"], "Split");
  EXPECT_EQ(j["decoder"]["type"], "ByteLevel");
}

TEST(BpeTrainerTest, StopsWhenPairsRunOut) {
  auto json = TrainByteLevelBpeTokenizerJson("ab", 1000);
  ASSERT_TRUE(json.ok());
  const nlohmann::json j = nlohmann::json::parse(*json, nullptr, false);
  EXPECT_EQ(j["model"]["vocab"].size(), 257u);
  EXPECT_EQ(j["added_tokens"][1]["id"], 258);
}

TEST(BpeTrainerTest, RejectsBadArguments) {
  EXPECT_EQ(TrainByteLevelBpeTokenizerJson("abc", 257).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TrainByteLevelBpeTokenizerJson("bad \xFF utf8", 300).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvcast
