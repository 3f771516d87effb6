// vLLM's guided_grammar text (GBNF / xgrammar EBNF) compiled to the byte
// grammar: the strings it admits, its UTF-8 character classes checked
// against every code point, and each malformed grammar refused by name.
#include "engine/grammar/ebnf.h"

#include <memory>
#include <string>

#include "engine/grammar/matcher.h"
#include "gtest/gtest.h"

namespace kvcast::grammar {
namespace {

std::shared_ptr<Automaton> Compile(std::string_view text) {
  absl::StatusOr<Grammar> g = EbnfGrammar(text);
  EXPECT_TRUE(g.ok()) << g.status();
  if (!g.ok()) return nullptr;
  return std::make_shared<Automaton>(std::make_shared<const Grammar>(*std::move(g)));
}

bool Matches(const std::shared_ptr<Automaton>& a, std::string_view text) {
  Matcher m(a);
  return m.Advance(text) && m.CanEnd();
}

std::string Error(std::string_view text) {
  absl::StatusOr<Grammar> g = EbnfGrammar(text);
  EXPECT_FALSE(g.ok()) << text;
  return g.ok() ? "" : std::string(g.status().message());
}

TEST(EbnfTest, RulesAlternativesRepetitionsAndGroups) {
  auto g = Compile(R"(
    # a list of answers
    root   ::= answer ("," ws answer)*
    answer ::= "yes" | 'no' | [0-9]+ | name
    name   ::= [A-Za-z_] [A-Za-z0-9_-]{0,3}
    ws     ::= [ \t\n]*
  )");
  ASSERT_NE(g, nullptr);
  for (const char* ok : {"yes", "no", "42", "yes,no", "yes, \n\t7,x_1-", "abcd", "a1,b2"}) {
    EXPECT_TRUE(Matches(g, ok)) << ok;
  }
  for (const char* bad : {"", "maybe1", "yes,", "abcdef", "yes;no", ",yes", "1a"}) {
    EXPECT_FALSE(Matches(g, bad)) << bad;
  }
}

TEST(EbnfTest, CountsOptionalsAndEscapes) {
  auto g = Compile(R"(root ::= "\x41\u00e9\"" x{2} y{1,} z{0,2} "\\"? ("+" | "-")?
x ::= 'a'
y ::= "b"
z ::= [\]\-\^]
)");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Matches(g, "A\xc3\xa9\"aab"));
  EXPECT_TRUE(Matches(g, "A\xc3\xa9\"aabbb]-\\+"));
  EXPECT_TRUE(Matches(g, "A\xc3\xa9\"aab^-"));
  EXPECT_FALSE(Matches(g, "A\xc3\xa9\"ab"));      // x{2}
  EXPECT_FALSE(Matches(g, "A\xc3\xa9\"aa"));      // y{1,}
  EXPECT_FALSE(Matches(g, "A\xc3\xa9\"aab]]]"));  // z{0,2}
  EXPECT_FALSE(Matches(g, "A\xc3\xa9\"aab+-"));
}

// Each class admits exactly the UTF-8 encodings of its code points (and
// `.` and negated classes every valid character outside), nothing else:
// checked at every code point, and on malformed sequences.
TEST(EbnfTest, ClassesAreTheirCodePointsInUtf8) {
  struct Case {
    const char* grammar;
    bool (*in)(uint32_t);
  };
  const Case cases[] = {
      {R"(root ::= [a-c\u00e0-\u0101\u4e00-\u9fff\U0001F600-\U0001F64F])",
       [](uint32_t c) {
         return (c >= 'a' && c <= 'c') || (c >= 0xe0 && c <= 0x101) || (c >= 0x4e00 && c <= 0x9fff) ||
                (c >= 0x1f600 && c <= 0x1f64f);
       }},
      {R"(root ::= [^"\\\x00-\x1f])", [](uint32_t c) { return c != '"' && c != '\\' && c >= 0x20; }},
      {R"(root ::= [^\u0800-\uffff])", [](uint32_t c) { return c < 0x800 || c > 0xffff; }},
      {R"(root ::= .)", [](uint32_t) { return true; }},
      {R"(root ::= [\u07ff-\u0800\uffff-\U00010000\U0010ffff])",
       [](uint32_t c) { return c == 0x7ff || c == 0x800 || c == 0xffff || c == 0x10000 || c == 0x10ffff; }},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.grammar);
    auto g = Compile(k.grammar);
    ASSERT_NE(g, nullptr);
    int wrong = 0;
    for (uint32_t c = 0; c <= 0x10ffff; ++c) {
      if (c >= 0xd800 && c <= 0xdfff) continue;
      std::string s;
      AppendUtf8(c, &s);
      if (Matches(g, s) != k.in(c) && ++wrong < 5) ADD_FAILURE() << "U+" << std::hex << c;
    }
    EXPECT_EQ(wrong, 0);
    // Surrogates, overlong forms, stray continuation bytes, beyond U+10FFFF.
    for (const char* bad : {"\xed\xa0\x80", "\xc0\x80", "\xe0\x80\x80", "\x80", "\xf4\x90\x80\x80", "\xff"}) {
      EXPECT_FALSE(Matches(g, bad));
    }
  }
}

TEST(EbnfTest, MalformedGrammarsAreRefusedNamingTheCause) {
  EXPECT_NE(Error("root ::= item").find("rule 'item' is used but not defined"), std::string::npos);
  EXPECT_NE(Error("start ::= \"a\"").find("no rule 'root'"), std::string::npos);
  EXPECT_NE(Error("root ::= \"a\"\nroot ::= \"b\"").find("line 2, column 1: rule 'root' is defined twice"),
            std::string::npos);
  EXPECT_NE(Error("root ::= list\nlist ::= list \",\" \"a\" | \"a\"").find("left-recursive"),
            std::string::npos);
  EXPECT_NE(Error("root ::= \"a\\q\"").find("unknown escape '\\q'"), std::string::npos);
  EXPECT_NE(Error("root ::= \"abc").find("unterminated string"), std::string::npos);
  EXPECT_NE(Error("root ::= [abc").find("unterminated character class"), std::string::npos);
  EXPECT_NE(Error("root ::= \"a\"{3,2}").find("maximum is below the minimum"), std::string::npos);
  EXPECT_NE(Error("root ::= \"a\"{1001}").find("above 1000"), std::string::npos);
  EXPECT_NE(Error("root ::= (\"a\" | \"b\"").find("expected ')'"), std::string::npos);
  EXPECT_NE(Error("root = \"a\"").find("expected '::='"), std::string::npos);
  EXPECT_NE(Error("root ::= [z-a]").find("runs backwards"), std::string::npos);
  EXPECT_NE(Error("root ::= \"\\ud800\"").find("not a Unicode scalar value"), std::string::npos);
  EXPECT_NE(Error("root ::= [^\\x00-\\U0010ffff]").find("admits no character"), std::string::npos);
  EXPECT_NE(Error("root ::= \"a\" @").find("line 1, column 14: unexpected '@'"), std::string::npos);
}

}  // namespace
}  // namespace kvcast::grammar
