#include "engine/tokenizer/tokenizer.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/tokenizer/bpe_trainer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvcast {
namespace {

using ::testing::HasSubstr;

std::string MakeDir(const std::string& name) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  std::filesystem::create_directories(dir);
  return dir;
}

void WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream(path, std::ios::binary) << contents;
}

std::string TrainedJson(int vocab_size) {
  std::string corpus;
  for (int i = 0; i < 20; ++i) corpus += "hello world, héllo wörld 日本 😀 " + std::to_string(i);
  auto json = TrainByteLevelBpeTokenizerJson(corpus, vocab_size);
  EXPECT_TRUE(json.ok()) << json.status();
  return *json;
}

TEST(LoadTokenizerTest, ReadsTokenizerJsonAndConfig) {
  const std::string dir = MakeDir("with_config");
  WriteFile(dir + "/tokenizer.json", TrainedJson(300));
  WriteFile(dir + "/tokenizer_config.json",
            R"({"bos_token": {"content": "<|begin_of_text|>", "lstrip": false},
                "eos_token": "<|end_of_text|>", "model_max_length": 8192})");
  auto t = LoadTokenizer(dir);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->bos_id(), (*t)->TokenId("<|begin_of_text|>"));
  EXPECT_EQ((*t)->eos_id(), (*t)->TokenId("<|end_of_text|>"));
  EXPECT_TRUE((*t)->bos_id().has_value());
  auto ids = (*t)->Encode("hello", /*add_bos=*/true);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->front(), *(*t)->bos_id());
}

TEST(LoadTokenizerTest, NoConfigMeansNoBosEos) {
  const std::string dir = MakeDir("no_config");
  WriteFile(dir + "/tokenizer.json", TrainedJson(300));
  auto t = LoadTokenizer(dir + "/");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE((*t)->bos_id().has_value());
  EXPECT_FALSE((*t)->eos_id().has_value());
}

TEST(LoadTokenizerTest, Errors) {
  const std::string empty = MakeDir("empty");
  auto missing = LoadTokenizer(empty);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr(empty));

  const std::string bad = MakeDir("bad_json");
  WriteFile(bad + "/tokenizer.json", R"({"model": {"type": "WordPiece"}})");
  auto wordpiece = LoadTokenizer(bad);
  EXPECT_EQ(wordpiece.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(wordpiece.status().message()), HasSubstr("tokenizer.json"));

  const std::string bad_config = MakeDir("bad_config");
  WriteFile(bad_config + "/tokenizer.json", TrainedJson(300));
  WriteFile(bad_config + "/tokenizer_config.json", R"({"bos_token": 7})");
  EXPECT_EQ(LoadTokenizer(bad_config).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(StreamingDecoderTest, MatchesDecodeWithCharactersSplitAcrossTokens) {
  const std::string dir = MakeDir("stream");
  WriteFile(dir + "/tokenizer.json", TrainedJson(260));  // Almost only byte tokens.
  auto t = LoadTokenizer(dir);
  ASSERT_TRUE(t.ok()) << t.status();
  const std::string text = "héllo 日本語 😀👍🏽 wörld<|end_of_text|>tail ☃";
  auto ids = (*t)->Encode(text, false);
  ASSERT_TRUE(ids.ok());
  ASSERT_GT(ids->size(), text.size() / 2);
  for (bool skip_special : {false, true}) {
    StreamingDecoder stream(t->get(), skip_special);
    std::string streamed;
    for (int32_t id : *ids) {
      const std::string piece = stream.Push(id);
      EXPECT_THAT(piece, ::testing::Not(HasSubstr("\xEF\xBF\xBD")));
      streamed += piece;
    }
    streamed += stream.Flush();
    EXPECT_EQ(streamed, (*t)->Decode(*ids, skip_special));
  }
}

TEST(StreamingDecoderTest, FlushReleasesIncompleteBytes) {
  const std::string dir = MakeDir("flush");
  WriteFile(dir + "/tokenizer.json", TrainedJson(260));
  auto t = LoadTokenizer(dir);
  ASSERT_TRUE(t.ok());
  auto ids = (*t)->Encode("a😀", false);
  ASSERT_TRUE(ids.ok());
  StreamingDecoder stream(t->get());
  std::string streamed;
  for (size_t i = 0; i + 1 < ids->size(); ++i) streamed += stream.Push((*ids)[i]);
  EXPECT_EQ(streamed, "a");
  EXPECT_EQ(stream.Flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(stream.Push((*ids)[0]), "a");  // Flush reset the decoder.
}

}  // namespace
}  // namespace kvcast
