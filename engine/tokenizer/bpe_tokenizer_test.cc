#include "engine/tokenizer/bpe_tokenizer.h"

#include <string>
#include <vector>

#include "engine/tokenizer/bpe_trainer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace kvcast {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string TrainingCorpus() {
  std::string corpus;
  for (int i = 0; i < 40; ++i) {
    corpus += "The café's naïve résumé: 12,345 tokens; don't you'll I'm 日本語テキスト "
              "Привет мир 😀👍🏽\n\tindented    spaces\r\n";
  }
  return corpus;
}

std::unique_ptr<BpeTokenizer> Trained(int vocab_size) {
  auto json = TrainByteLevelBpeTokenizerJson(TrainingCorpus(), vocab_size);
  EXPECT_TRUE(json.ok()) << json.status();
  auto t = BpeTokenizer::FromJson(*json, {"<|begin_of_text|>", "<|end_of_text|>"});
  EXPECT_TRUE(t.ok()) << t.status();
  return *std::move(t);
}

TEST(BpeTokenizerTest, RoundTripsVariedText) {
  auto t = Trained(400);
  for (const std::string text :
       {"", "hello", "The café's naïve résumé", "Zürich Ελληνικά 中文 한국어 العربية",
        "emoji 😀👍🏽👨‍👩‍👧 🇫🇷", "   spaces\t\ttabs\n\n\nnewlines\r\n", "1234567890 3.14",
        "I'LL DON'T you've it's", "\xC2\xA0\xE3\x80\x80 unicode spaces", "e\xCC\x81 combining"}) {
    auto ids = t->Encode(text, /*add_bos=*/false);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(t->Decode(*ids), text);
  }
}

TEST(BpeTokenizerTest, SpecialTokensInTextAndBos) {
  auto t = Trained(300);
  ASSERT_EQ(t->bos_id(), 298);
  ASSERT_EQ(t->eos_id(), 299);
  EXPECT_EQ(t->vocab_size(), 300);
  auto ids = t->Encode("hi<|end_of_text|><|begin_of_text|>", /*add_bos=*/true);
  ASSERT_TRUE(ids.ok());
  ASSERT_GE(ids->size(), 4u);
  EXPECT_EQ(ids->front(), 298);
  EXPECT_EQ((*ids)[ids->size() - 2], 299);
  EXPECT_EQ(ids->back(), 298);
  EXPECT_EQ(t->Decode(*ids), "<|begin_of_text|>hi<|end_of_text|><|begin_of_text|>");
  EXPECT_EQ(t->Decode(*ids, /*skip_special=*/true), "hi");
  EXPECT_EQ(t->TokenId("<|end_of_text|>"), 299);
  EXPECT_EQ(t->TokenId("!"), 0);
  EXPECT_FALSE(t->TokenId("not a token").has_value());
}

TEST(BpeTokenizerTest, RejectsInvalidUtf8Input) {
  auto t = Trained(300);
  EXPECT_EQ(t->Encode("bad \xFF", false).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(BpeTokenizerTest, PartialCharacterDecodesToReplacement) {
  auto t = Trained(260);  // Few merges: "€" stays three byte tokens.
  auto ids = t->Encode("\xE2\x82\xAC", false);
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids->size(), 3u);
  EXPECT_EQ(t->Decode({(*ids)[0], (*ids)[1]}), "\xEF\xBF\xBD");
  EXPECT_EQ(t->Decode(*ids), "\xE2\x82\xAC");
  // TokenBytes: each token's own byte, not U+FFFD; special tokens add none.
  EXPECT_EQ(t->TokenBytes((*ids)[0]), "\xE2");
  EXPECT_EQ(t->TokenBytes((*ids)[2]), "\xAC");
  EXPECT_EQ(t->TokenBytes(*t->eos_id()), std::nullopt);
  EXPECT_EQ(t->TokenBytes(-1), std::nullopt);
  EXPECT_EQ(t->TokenBytes(t->vocab_size()), std::nullopt);
}

// A Llama-2-like vocabulary without byte-level mapping, with byte fallback.
std::string ByteFallbackJson() {
  return R"({"model": {"type": "BPE", "byte_fallback": true, "unk_token": "<unk>",
    "vocab": {"<unk>": 0, "a": 1, "b": 2, "ab": 3, "<0xE2>": 4, "<0x82>": 5, "<0xAC>": 6},
    "merges": [["a", "b"]]},
    "decoder": {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Fuse"}]}})";
}

TEST(BpeTokenizerTest, ByteFallbackEncodesAndDecodesRawBytes) {
  auto t = BpeTokenizer::FromJson(ByteFallbackJson());
  ASSERT_TRUE(t.ok()) << t.status();
  auto ids = (*t)->Encode("ab\xE2\x82\xAC" "a\xC3\xA9", false);
  ASSERT_TRUE(ids.ok());
  EXPECT_THAT(*ids, ElementsAre(3, 4, 5, 6, 1, 0));  // "é" has no byte tokens: <unk>.
  EXPECT_EQ((*t)->Decode({3, 4, 5, 6}), "ab\xE2\x82\xAC");
  EXPECT_EQ((*t)->Decode({4, 5}), "\xEF\xBF\xBD");
  EXPECT_EQ((*t)->TokenBytes(4), "\xE2");
  EXPECT_EQ((*t)->TokenBytes(3), "ab");
}

TEST(BpeTokenizerTest, MergeFormsAreEquivalentAndNfcApplies) {
  const std::string base = R"({"model": {"type": "BPE", "vocab": {"e": 0, "\u00e9": 1,
      "\u0301": 2, "x": 3, "ex": 4}, "merges": MERGES}, "normalizer": {"type": "NFC"}})";
  std::string pairs = base, strings = base;
  pairs.replace(pairs.find("MERGES"), 6, R"([["e", "x"]])");
  strings.replace(strings.find("MERGES"), 6, R"(["e x"])");
  auto a = BpeTokenizer::FromJson(pairs);
  auto b = BpeTokenizer::FromJson(strings);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_THAT(*(*a)->Encode("exe\xCC\x81", false), ElementsAre(4, 1));
  EXPECT_EQ(*(*a)->Encode("exe\xCC\x81", false), *(*b)->Encode("exe\xCC\x81", false));
}

void ExpectInvalid(const std::string& json, const std::string& field) {
  auto t = BpeTokenizer::FromJson(json);
  ASSERT_FALSE(t.ok()) << json;
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("tokenizer.json"));
  EXPECT_THAT(std::string(t.status().message()), HasSubstr(field));
}

TEST(BpeTokenizerTest, RejectsMalformedJson) {
  ExpectInvalid("", "not valid JSON");
  ExpectInvalid(R"({"model": {"type": "BPE", "vocab": {)", "not valid JSON");
  ExpectInvalid("[1, 2]", "root");
  ExpectInvalid("{}", "model");
  ExpectInvalid(R"({"model": {"type": "WordPiece", "vocab": {}}})", "model.type");
  ExpectInvalid(R"({"model": {"type": "Unigram", "vocab": []}})", "\"Unigram\"");
  ExpectInvalid(R"({"model": {"type": "BPE", "vocab": [], "merges": []}})", "model.vocab");
  ExpectInvalid(R"({"model": {"type": "BPE", "vocab": {"a": -1}, "merges": []}})",
                "model.vocab[\"a\"]");
  ExpectInvalid(R"({"model": {"type": "BPE", "vocab": {"a": 0}}})", "model.merges");
  ExpectInvalid(R"({"model": {"type": "BPE", "vocab": {"a": 0, "aa": 1},
                 "merges": ["a b"]}})", "model.merges[0]");
  ExpectInvalid(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1},
                 "merges": ["a b"]}})", "not in model.vocab");
  ExpectInvalid(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a a a"]}})",
                "model.merges[0]");
  ExpectInvalid(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [7]}})",
                "model.merges[0]");
  ExpectInvalid(R"({"model": {"type": "BPE", "vocab": {}, "merges": []},
                 "normalizer": {"type": "Lowercase"}})", "normalizer.type");
  ExpectInvalid(R"({"model": {"type": "BPE", "vocab": {}, "merges": []},
                 "pre_tokenizer": {"type": "Whitespace"}})", "pre_tokenizer.type");
  ExpectInvalid(R"({"model": {"type": "BPE", "vocab": {}, "merges": []},
                 "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "("},
                 "behavior": "Isolated", "invert": false}})", "pre_tokenizer.pattern");
  ExpectInvalid(R"({"model": {"type": "BPE", "vocab": {}, "merges": []},
                 "decoder": {"type": "WordPiece"}})", "decoder.type");
  ExpectInvalid(R"({"model": {"type": "BPE", "vocab": {}, "merges": []},
                 "added_tokens": [{"id": 0}]})", "added_tokens[0].content");
}

TEST(BpeTokenizerTest, UnknownBosNameIsAnError) {
  auto json = TrainByteLevelBpeTokenizerJson("abc", 300);
  ASSERT_TRUE(json.ok());
  auto t = BpeTokenizer::FromJson(*json, {"<s>", std::nullopt});
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("bos_token"));
}

}  // namespace
}  // namespace kvcast
