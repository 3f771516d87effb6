#include <string>
#include <vector>

#include "engine/tokenizer/internal/added_tokens.h"
#include "engine/tokenizer/internal/byte_level.h"
#include "engine/tokenizer/internal/nfc.h"
#include "engine/tokenizer/internal/split_regex.h"
#include "engine/tokenizer/internal/utf8.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvcast {
namespace tokenizer_internal {
namespace {

using ::testing::ElementsAre;

TEST(Utf8Test, LossyReplacesMaximalInvalidSubsequencesLikeRust) {
  EXPECT_EQ(Utf8Lossy("abc"), "abc");
  EXPECT_EQ(Utf8Lossy("\xE2\x82\xAC"), "\xE2\x82\xAC");
  EXPECT_EQ(Utf8Lossy("\xE2\x82"), "\xEF\xBF\xBD");                  // Truncated: one U+FFFD.
  EXPECT_EQ(Utf8Lossy("\xE2\x82x"), "\xEF\xBF\xBDx");
  EXPECT_EQ(Utf8Lossy("\xFF\xFE"), "\xEF\xBF\xBD\xEF\xBF\xBD");      // Two bad bytes.
  EXPECT_EQ(Utf8Lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // Surrogate.
  EXPECT_EQ(Utf8Lossy("\xF0\x9F\x98"), "\xEF\xBF\xBD");
  EXPECT_FALSE(IsValidUtf8("\xC0\xAF"));
  EXPECT_TRUE(IsValidUtf8("h\xC3\xA9llo \xF0\x9F\x98\x80"));
}

TEST(ByteLevelTest, AllBytesRoundTrip) {
  std::string bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(static_cast<char>(b));
  std::string back;
  ASSERT_TRUE(ByteLevelToBytes(BytesToByteLevel(bytes), &back));
  EXPECT_EQ(back, bytes);
  EXPECT_EQ(BytesToByteLevel(" "), "\xC4\xA0");  // "Ġ"
  EXPECT_EQ(Gpt2ByteOrder()[0], '!');
  EXPECT_EQ(Gpt2ByteOrder()[188], 0);
  EXPECT_FALSE(ByteLevelToBytes(" ", &back));  // A raw space is not in the alphabet.
}

TEST(NfcTest, ComposesAndReorders) {
  EXPECT_EQ(ToNfc("plain ascii"), "plain ascii");
  EXPECT_EQ(ToNfc("e\xCC\x81"), "\xC3\xA9");                      // e + acute -> é
  EXPECT_EQ(ToNfc("\xE1\x84\x80\xE1\x85\xA1"), "\xEA\xB0\x80");   // Jamo -> 가
  EXPECT_EQ(ToNfc("\xE2\x84\xAB"), "\xC3\x85");                   // Angstrom sign -> Å
  // o + dot below + circumflex and o + circumflex + dot below -> ộ.
  EXPECT_EQ(ToNfc("o\xCC\xA3\xCC\x82"), "\xE1\xBB\x99");
  EXPECT_EQ(ToNfc("o\xCC\x82\xCC\xA3"), "\xE1\xBB\x99");
  EXPECT_EQ(ToNfc("\xEF\xAC\x81"), "\xEF\xAC\x81");  // ﬁ is compatibility-only.
}

TEST(SplitRegexTest, Llama3PatternSplitsLikeHf) {
  auto regex = SplitRegex::Compile(kLlama3SplitPattern);
  ASSERT_TRUE(regex.ok()) << regex.status();
  std::vector<std::string_view> pieces;
  ASSERT_TRUE((*regex)->Split("I'LL pay 12345 dollars!!\n\n  ok", &pieces).ok());
  EXPECT_THAT(pieces, ElementsAre("I", "'LL", " pay", " ", "123", "45", " dollars", "!!\n\n",
                                  " ", " ok"));
}

TEST(SplitRegexTest, LongWhitespaceRunAndBadPattern) {
  auto regex = SplitRegex::Compile(kLlama3SplitPattern);
  ASSERT_TRUE(regex.ok());
  std::vector<std::string_view> pieces;
  const std::string text = std::string(200000, ' ') + "x" + std::string(100000, '\n');
  ASSERT_TRUE((*regex)->Split(text, &pieces).ok());
  std::string joined;
  for (auto p : pieces) joined += std::string(p);
  EXPECT_EQ(joined, text);
  EXPECT_EQ(SplitRegex::Compile("(unclosed").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(AddedTokenMatcherTest, LeftmostLongest) {
  AddedTokenMatcher m({{"<|a|>", 1}, {"<|a|><|b|>", 2}, {"<|b|>", 3}});
  auto s = m.Split("x<|a|><|b|>y<|b|>");
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s[0].text, "x");
  EXPECT_EQ(s[1].id, 2);
  EXPECT_EQ(s[2].text, "y");
  EXPECT_EQ(s[3].id, 3);
}

}  // namespace
}  // namespace tokenizer_internal
}  // namespace kvcast
