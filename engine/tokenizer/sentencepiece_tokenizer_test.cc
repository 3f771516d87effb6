#include "engine/tokenizer/sentencepiece_tokenizer.h"

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/model/internal/gguf_writer.h"
#include "engine/tokenizer/internal/sentencepiece_shim.h"
#include "engine/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvcast {
namespace {

const std::vector<std::string>& Samples() {
  static const auto* samples = new std::vector<std::string>{
      "Hello world", "The café's naïve résumé", "日本語のテキスト", "Привет, мир!",
      "numbers 12345 and 3.14", "emoji 😀 rare ☃", "  multiple   spaces  "};
  return *samples;
}

// Trains a model of `type` ("bpe" or "unigram") named `name` (default: the
// type), with `extra_flags` for the trainer.
std::string TrainModel(const std::string& type, const std::string& extra_flags = "",
                       const std::string& name = "") {
  const std::string dir = std::getenv("TEST_TMPDIR");
  const std::string corpus = dir + "/corpus.txt";
  if (!std::ifstream(corpus).good()) {
    std::ofstream out(corpus);
    for (int i = 0; i < 300; ++i) {
      out << "line " << i << ": the quick brown fox jumps over the lazy dog; "
          << "café naïve résumé Привет мир 日本語 テキスト " << (i * 7919) % 1000 << "\n";
    }
  }
  const std::string prefix = absl::StrCat(dir, "/sp_", name.empty() ? type : name);
  auto error = tokenizer_internal::TrainSentencePiece(absl::StrCat(
      "--input=", corpus, " --model_prefix=", prefix, " --model_type=", type,
      " --vocab_size=600 --byte_fallback=true --character_coverage=0.9995"
      " --hard_vocab_limit=false"
      " --minloglevel=2 --num_threads=1 ", extra_flags));
  EXPECT_FALSE(error.has_value()) << error->message;
  return prefix + ".model";
}

class SentencePieceTokenizerTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SentencePieceTokenizerTest, MatchesProcessorAndRoundTrips) {
  const std::string path = TrainModel(GetParam());
  auto t = SentencePieceTokenizer::FromFile(path);
  ASSERT_TRUE(t.ok()) << t.status();
  tokenizer_internal::SentencePieceShim processor;
  ASSERT_FALSE(processor.Load(path).has_value());
  EXPECT_EQ((*t)->vocab_size(), processor.PieceSize());
  EXPECT_EQ((*t)->bos_id(), processor.bos_id());
  EXPECT_EQ((*t)->eos_id(), processor.eos_id());
  for (const std::string& text : Samples()) {
    auto ids = (*t)->Encode(text, /*add_bos=*/false);
    ASSERT_TRUE(ids.ok()) << ids.status();
    std::vector<int> want;
    ASSERT_FALSE(processor.Encode(text, &want).has_value());
    EXPECT_EQ(*ids, std::vector<int32_t>(want.begin(), want.end())) << text;
    std::string want_text;
    ASSERT_FALSE(processor.Decode(want, &want_text).has_value());
    EXPECT_EQ((*t)->Decode(*ids), want_text);
  }
  // Normalization aside (multiple spaces collapse), plain text round-trips.
  auto ids = (*t)->Encode("Hello café 😀", /*add_bos=*/true);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->front(), processor.bos_id());
  EXPECT_EQ((*t)->Decode(*ids), "Hello café 😀");
}

TEST_P(SentencePieceTokenizerTest, ControlPiecesInTextAndStreaming) {
  auto t = SentencePieceTokenizer::FromFile(TrainModel(GetParam()));
  ASSERT_TRUE(t.ok()) << t.status();
  auto ids = (*t)->Encode("hi</s>", false);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->back(), *(*t)->eos_id());
  EXPECT_EQ((*t)->TokenId("</s>"), (*t)->eos_id());
  EXPECT_FALSE((*t)->TokenId("no such piece").has_value());

  // "😀☃" are byte-fallback pieces: the decoder must hold bytes back.
  const std::string text = "Hello wörld 😀☃ 日本語 done";
  auto text_ids = (*t)->Encode(text, false);
  ASSERT_TRUE(text_ids.ok());
  StreamingDecoder stream(t->get());
  std::string streamed;
  for (int32_t id : *text_ids) {
    const std::string piece = stream.Push(id);
    EXPECT_THAT(piece, ::testing::Not(::testing::HasSubstr("\xEF\xBF\xBD")));
    streamed += piece;
  }
  streamed += stream.Flush();
  EXPECT_EQ(streamed, (*t)->Decode(*text_ids));
  EXPECT_EQ(streamed, text);
}

// The SentencePiece-style GGUF tokenizer (spm_gguf_tokenizer.h: llama.cpp's
// algorithm) against libsentencepiece itself: a BPE model trained without
// normalization (as Llama's was), its pieces, scores and types written into
// a GGUF, the same ids on varied text and the text back from Decode.
TEST(SpmGgufTokenizerTest, MatchesSentencePieceBpe) {
  const std::string dir = std::getenv("TEST_TMPDIR");
  const std::string model = TrainModel(
      "bpe", "--normalization_rule_name=identity --remove_extra_whitespaces=false", "identity");
  tokenizer_internal::SentencePieceShim sp;
  ASSERT_FALSE(sp.Load(model).has_value());
  model_internal::GgufWriter w;
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  for (int i = 0; i < sp.PieceSize(); ++i) {
    tokens.push_back(sp.IdToPiece(i));
    scores.push_back(sp.GetScore(i));
    types.push_back(sp.IsUnknown(i) ? 2 : sp.IsControl(i) ? 3 : sp.IsByte(i) ? 6
                    : sp.IsUnused(i) ? 5 : 1);
  }
  w.AddString("general.architecture", "llama");
  w.AddString("tokenizer.ggml.model", "llama");
  w.AddStringArray("tokenizer.ggml.tokens", tokens);
  w.AddFloat32Array("tokenizer.ggml.scores", scores);
  w.AddInt32Array("tokenizer.ggml.token_type", types);
  w.AddUint32("tokenizer.ggml.bos_token_id", sp.bos_id());
  w.AddUint32("tokenizer.ggml.eos_token_id", sp.eos_id());
  const std::string gguf = dir + "/spm.gguf";
  {
    std::ofstream out(gguf, std::ios::binary);
    out << w.Build();
  }
  auto t = LoadTokenizer(gguf);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->bos_id(), sp.bos_id());
  std::vector<std::string> texts = Samples();
  for (const char* extra : {"the quick brown fox", "lazy dogs jump", "line 42: fox", "x", "",
                            "tabs\tand\nnewlines", "Zürich 東京 ünïcödé 🙂🙂", "a  b   c"}) {
    texts.push_back(extra);
  }
  // Seeded letter soup: where merge order matters (mis-ordered merges give
  // other pieces here).
  uint32_t seed = 12345;
  for (int n = 0; n < 300; ++n) {
    std::string text;
    const int len = 3 + n % 40;
    for (int i = 0; i < len; ++i) {
      seed = seed * 1103515245u + 12345u;
      text += "thequickbrownfxjmpsvlazydg "[(seed >> 16) % 27];
    }
    texts.push_back(text);
  }
  for (const std::string& text : texts) {
    std::vector<int> want;
    ASSERT_FALSE(sp.Encode(text, &want).has_value());
    auto got = (*t)->Encode(text, /*add_bos=*/false);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(*got, std::vector<int32_t>(want.begin(), want.end())) << text;
    EXPECT_EQ((*t)->Decode(*got), text);
  }
}

INSTANTIATE_TEST_SUITE_P(ModelTypes, SentencePieceTokenizerTest,
                         ::testing::Values("bpe", "unigram"));

TEST(SentencePieceTokenizerLoadTest, BadFilesAreErrors) {
  EXPECT_FALSE(SentencePieceTokenizer::FromFile("/nonexistent/tokenizer.model").ok());
  const std::string garbage = std::string(std::getenv("TEST_TMPDIR")) + "/garbage.model";
  std::ofstream(garbage) << "not a protobuf \xFF\xFE";
  auto t = SentencePieceTokenizer::FromFile(garbage);
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()), ::testing::HasSubstr(garbage));
}

}  // namespace
}  // namespace kvcast
