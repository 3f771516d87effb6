// The mask's shortcuts against the brute-force definition on a real
// vocabulary (SmolLM2's 49,152 tokens: code tokens with quotes and
// backslashes, multi-byte UTF-8 ones, long runs of spaces): at every byte of
// documents walked under a grammar, FillMask allows exactly the tokens whose
// bytes Advance accepts. Needs KVCAST_SMOLLM2 (./kvcast.sh test fetches the
// model); SKIPPED without.
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "engine/grammar/json_schema.h"
#include "engine/grammar/matcher.h"
#include "engine/grammar/token_trie.h"
#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace kvcast::grammar {
namespace {

class RealVocabularyTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* path = std::getenv("KVCAST_SMOLLM2");
    if (path == nullptr || *path == '\0') return;
    auto tokenizer = LoadTokenizer(path);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    trie_ = new TokenTrie(TokenTrie::FromTokenizer(**tokenizer));
  }
  void SetUp() override {
    if (trie_ == nullptr) GTEST_SKIP() << "KVCAST_SMOLLM2 not set (./kvcast.sh test sets it)";
  }

  // Walks `doc` byte by byte from a fresh automaton, twice (the second walk
  // finds the kept masks), comparing every token at every byte.
  static void ExpectMaskEqualsAdvancing(const Grammar& grammar, const std::string& doc) {
    const TokenTrie& trie = *trie_;
    auto automaton = std::make_shared<Automaton>(std::make_shared<const Grammar>(grammar));
    std::vector<uint32_t> mask(size_t(trie.vocab_size() + 31) / 32);
    long allowed = 0;
    for (int pass = 0; pass < 2; ++pass) {
      Matcher m(automaton);
      for (size_t i = 0; i <= doc.size(); ++i) {
        m.FillMask(trie, absl::MakeSpan(mask));
        for (int32_t t = 0; t < trie.vocab_size(); ++t) {
          const std::optional<std::string>& bytes = trie.bytes_of(t);
          Matcher probe = m;
          const bool expected = bytes && !bytes->empty() && probe.Advance(*bytes);
          const bool got = (mask[size_t(t) >> 5] >> (t & 31)) & 1;
          ASSERT_EQ(got, expected) << "token " << t << " '" << bytes.value_or("<special>") << "' after '"
                                   << doc.substr(0, i) << "' (pass " << pass << ")";
          allowed += got;
        }
        if (i < doc.size()) ASSERT_TRUE(m.Advance(doc.substr(i, 1))) << doc.substr(0, i + 1);
      }
      EXPECT_TRUE(m.CanEnd());
    }
    EXPECT_GT(allowed, 1000 * long(doc.size()));  // the masks are not all but empty
  }

  static TokenTrie* trie_;
};
TokenTrie* RealVocabularyTest::trie_ = nullptr;

TEST_F(RealVocabularyTest, AnyJsonObject) {
  absl::StatusOr<Grammar> g = JsonObjectGrammar();
  ASSERT_TRUE(g.ok());
  ExpectMaskEqualsAdvancing(
      *g, "{\"na\\\"me\": \"Ana  L\\u00f3pez\", \"n\": [-1.5e3, true, null, {}], \"caf\xc3\xa9\": \"\xe2\x82\xac\"}");
}

TEST_F(RealVocabularyTest, SchemaOfBoundedStringsEnumsAndLists) {
  absl::StatusOr<Grammar> g = JsonSchemaGrammar(nlohmann::ordered_json::parse(R"({
      "type": "object",
      "properties": {
        "first": {"type": "string", "minLength": 1, "maxLength": 6},
        "color": {"enum": ["red", "green"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 3}, "maxItems": 2},
        "age": {"type": "integer", "minimum": 0, "maximum": 120}},
      "required": ["first", "color", "tags", "age"]})"));
  ASSERT_TRUE(g.ok()) << g.status();
  ExpectMaskEqualsAdvancing(*g, R"({"first": "Ro sa", "color": "green", "tags": ["a\"b", "x"], "age": 42})");
}

}  // namespace
}  // namespace kvcast::grammar
