#include "engine/grammar/grammar.h"

#include <memory>
#include <random>
#include <string>

#include "engine/grammar/matcher.h"
#include "engine/grammar/token_trie.h"
#include "gtest/gtest.h"

namespace kvcast::grammar {
namespace {

using Seq = GrammarBuilder::Seq;

std::shared_ptr<const Grammar> Built(GrammarBuilder& b, RuleId root) {
  absl::StatusOr<Grammar> g = b.Build(root);
  EXPECT_TRUE(g.ok()) << g.status();
  return std::make_shared<const Grammar>(std::move(*g));
}

bool Matches(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  Matcher m(g);
  return m.Advance(text) && m.CanEnd();
}

TEST(GrammarTest, RepeatCountsItemsAndSeparators) {
  GrammarBuilder b;
  RuleId r = b.Repeat("as", b.Literal("a"), 2, 4, b.Literal(","));
  auto g = Built(b, r);
  EXPECT_FALSE(Matches(g, ""));
  EXPECT_FALSE(Matches(g, "a"));
  EXPECT_TRUE(Matches(g, "a,a"));
  EXPECT_TRUE(Matches(g, "a,a,a"));
  EXPECT_TRUE(Matches(g, "a,a,a,a"));
  EXPECT_FALSE(Matches(g, "a,a,a,a,a"));
  EXPECT_FALSE(Matches(g, "aa"));
  EXPECT_FALSE(Matches(g, "a,a,"));
}

TEST(GrammarTest, UnboundedRepeatAndOptional) {
  GrammarBuilder b;
  RuleId star = b.Repeat("xs", b.Literal("xy"), 0, -1);
  auto g = Built(b, star);
  EXPECT_TRUE(Matches(g, ""));
  EXPECT_TRUE(Matches(g, "xyxyxyxyxyxyxyxyxyxyxyxyxyxyxy"));
  EXPECT_FALSE(Matches(g, "xyx"));
  Matcher m(g);
  EXPECT_TRUE(m.Advance("xyx"));
  EXPECT_FALSE(m.CanEnd());
  EXPECT_FALSE(m.Advance("x"));  // refused, state kept
  EXPECT_TRUE(m.Advance("y"));
  EXPECT_TRUE(m.CanEnd());
}

TEST(GrammarTest, LeftRecursionAndUndefinedRulesAreRefused) {
  GrammarBuilder b;
  RuleId list = b.Declare("list");
  RuleId opt = b.Rule("opt", {b.Literal("-"), Seq{}});
  b.Define(list, {{GrammarBuilder::Ref(opt), GrammarBuilder::Ref(list), b.Bytes(ByteSet::Of('a'))},
                  b.Literal("a")});
  absl::StatusOr<Grammar> g = b.Build(list);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("'list' is left-recursive"), std::string::npos) << g.status();

  GrammarBuilder b2;
  RuleId missing = b2.Declare("missing");
  RuleId top = b2.Rule("top", {{GrammarBuilder::Ref(missing)}});
  g = b2.Build(top);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("'missing' is not defined"), std::string::npos);
}

TEST(GrammarTest, AmbiguityIsFollowedUntilBytesDecide) {
  // ab+c | ab+d: the stacks stay open until the last byte.
  GrammarBuilder b;
  RuleId bs = b.Repeat("bs", b.Literal("b"), 1, -1);
  Seq left = b.Literal("a");
  left.push_back(GrammarBuilder::Ref(bs));
  Seq right = left;
  Append(left, b.Literal("c"));
  Append(right, b.Literal("d"));
  auto g = Built(b, b.Rule("top", {left, right}));
  EXPECT_TRUE(Matches(g, "abbbc"));
  EXPECT_TRUE(Matches(g, "abd"));
  EXPECT_FALSE(Matches(g, "ac"));
  EXPECT_FALSE(Matches(g, "abbbe"));
}

TEST(GrammarTest, DeepNestingKeepsItsState) {
  // Balanced parentheses: a recursive rule, 200 deep, 50 times.
  GrammarBuilder b;
  RuleId p = b.Declare("p");
  Seq nested = b.Literal("(");
  nested.push_back(GrammarBuilder::Ref(p));
  Append(nested, b.Literal(")"));
  nested.push_back(GrammarBuilder::Ref(p));
  b.Define(p, {nested, Seq{}});
  auto g = Built(b, p);
  Matcher m(g);
  for (int round = 0; round < 50; ++round) {
    ASSERT_TRUE(m.Advance(std::string(200, '(')));
    EXPECT_FALSE(m.CanEnd());
    ASSERT_TRUE(m.Advance(std::string(200, ')')));
    EXPECT_TRUE(m.CanEnd());
  }
  EXPECT_FALSE(m.Advance(")"));
  EXPECT_LT(m.automaton().num_states(), 1000);  // the states repeat: interned once
}

TEST(TokenTrieTest, PreorderWithSubtreesAndSharedBytes) {
  TokenTrie trie({std::string("ab"), std::string("a"), std::nullopt, std::string("b"),
                  std::string("abc"), std::string("ab")});
  EXPECT_EQ(trie.vocab_size(), 6);
  // root, a, ab, abc, b
  ASSERT_EQ(trie.num_nodes(), 5);
  EXPECT_EQ(trie.byte(1), 'a');
  EXPECT_EQ(trie.subtree_end(1), 4);
  EXPECT_EQ(trie.depth(3), 3);
  EXPECT_EQ(std::vector<int32_t>(trie.tokens(2).begin(), trie.tokens(2).end()),
            (std::vector<int32_t>{0, 5}));
  EXPECT_EQ(trie.max_depth(), 3);
}

// FillMask must allow exactly the tokens whose bytes Advance accepts (or
// that complete the sentence), from every state along random walks.
TEST(MatcherTest, MaskEqualsAdvancingEachToken) {
  GrammarBuilder b;
  RuleId value = b.Declare("value");
  RuleId items = b.Repeat("items", {GrammarBuilder::Ref(value)}, 0, 3, b.Literal(","));
  Seq list = b.Literal("[");
  list.push_back(GrammarBuilder::Ref(items));
  Append(list, b.Literal("]"));
  RuleId digits = b.Repeat("digits", {b.Bytes(ByteSet::Range('0', '9'))}, 1, 3);
  b.Define(value, {list, {GrammarBuilder::Ref(digits)}, b.Literal("true")});
  auto g = Built(b, value);

  std::vector<std::optional<std::string>> vocab = {std::nullopt};  // 0: a special token
  for (const char* t : {"[", "]", ",", "1", "12", "123", "1234", "[1", "1]", "],", "[[", "]]",
                        "true", "tr", "ue", "t", "r", "u", "e", "x", ",[", "[]", "0,", "9]", "]]]", "[[[1"}) {
    vocab.push_back(std::string(t));
  }
  TokenTrie trie(vocab);
  std::mt19937 rng(7);
  int allowed_total = 0;
  for (int walk = 0; walk < 30; ++walk) {
    Matcher m(g);
    for (int step = 0; step < 12; ++step) {
      std::vector<uint32_t> mask((vocab.size() + 31) / 32);
      m.FillMask(trie, absl::MakeSpan(mask));
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t < int32_t(vocab.size()); ++t) {
        bool expected = false;
        if (vocab[size_t(t)]) {
          Matcher probe = m;
          expected = probe.Advance(*vocab[size_t(t)]);
        }
        const bool got = (mask[size_t(t) >> 5] >> (t & 31)) & 1;
        ASSERT_EQ(got, expected) << "token '" << vocab[size_t(t)].value_or("<special>") << "' walk "
                                 << walk << " step " << step;
        if (got) allowed.push_back(t);
      }
      allowed_total += int(allowed.size());
      if (allowed.empty()) {
        EXPECT_TRUE(m.CanEnd());
        break;
      }
      ASSERT_TRUE(m.Advance(*vocab[size_t(allowed[rng() % allowed.size()])]));
    }
  }
  EXPECT_GT(allowed_total, 100);
}

}  // namespace
}  // namespace kvcast::grammar
