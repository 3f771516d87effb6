#include "tools/kvquality/corpus.h"

#include <cstdlib>
#include <fstream>
#include <numeric>

#include "gtest/gtest.h"

namespace kvcast::kvquality {
namespace {

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(ReadCorpus, JoinsFilesWithANewline) {
  const auto text = ReadCorpus({WriteFile("a", "one\ntwo"), WriteFile("b", "three")});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "one\ntwo\nthree");
}

// UTF-8 as it is; anything else (lee.cor's pound sign is the Latin-1 byte
// 0xa3) read as Latin-1, per file.
TEST(ReadCorpus, TextThatIsNotUtf8IsReadAsLatin1) {
  const auto text = ReadCorpus({WriteFile("utf8", "\xc2\xa3" "3 \xe2\x82\xac"),
                                WriteFile("latin1", "\xa3" "3,000"),
                                WriteFile("overlong", "\xc0\xaf"),
                                WriteFile("cut", "ab\xe2\x82")});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "\xc2\xa3" "3 \xe2\x82\xac\n\xc2\xa3" "3,000\n\xc3\x80\xc2\xaf\nab\xc3\xa2\xc2\x82");
}

TEST(ReadCorpus, NamesTheFileItCannotUse) {
  EXPECT_EQ(ReadCorpus({}).status().code(), absl::StatusCode::kInvalidArgument);
  const auto missing = ReadCorpus({"/nonexistent/lee.cor"});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/lee.cor"), std::string::npos);
  const auto empty = ReadCorpus({WriteFile("empty", "")});
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Windows, SpreadEvenlyWithoutOverlap) {
  std::vector<int32_t> tokens(1000);
  std::iota(tokens.begin(), tokens.end(), 0);
  const auto w = Windows(tokens, 100, 4);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ(w->size(), 4u);
  EXPECT_EQ((*w)[0][0], 0);
  EXPECT_EQ((*w)[1][0], 300);
  EXPECT_EQ((*w)[2][0], 600);
  EXPECT_EQ((*w)[3][0], 900);  // the last ends at the end
  for (const auto& s : *w) EXPECT_EQ(s.size(), 100u);
  // Exactly enough tokens: back to back.
  const auto tight = Windows(absl::MakeConstSpan(tokens).subspan(0, 300), 100, 3);
  ASSERT_TRUE(tight.ok());
  EXPECT_EQ((*tight)[1][0], 100);
  EXPECT_EQ((*tight)[2][0], 200);
}

TEST(Windows, TooFewTokensSaysHowMany) {
  const std::vector<int32_t> tokens(299);
  const auto w = Windows(tokens, 100, 3);
  EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(w.status().message().find("299 tokens"), std::string::npos) << w.status();
  EXPECT_EQ(Windows(tokens, 0, 3).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Windows, HalfOverlappingStartEveryHalfWindow) {
  std::vector<int32_t> tokens(350);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t(i);
  const auto w = HalfOverlappingWindows(tokens, 100);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ(w->size(), 6u);  // starts 0, 50, ..., 250 (300 would end past 350)
  for (size_t i = 0; i < w->size(); ++i) {
    EXPECT_EQ((*w)[i].size(), 100u);
    EXPECT_EQ((*w)[i][0], int32_t(50 * i));
  }
  EXPECT_FALSE(HalfOverlappingWindows(absl::MakeConstSpan(tokens).subspan(0, 99), 100).ok());
  EXPECT_FALSE(HalfOverlappingWindows(tokens, 1).ok());
}

}  // namespace
}  // namespace kvcast::kvquality
