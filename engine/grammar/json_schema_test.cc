#include "engine/grammar/json_schema.h"

#include <memory>
#include <random>
#include <set>
#include <string>

#include "engine/grammar/matcher.h"
#include "engine/grammar/regex.h"
#include "engine/grammar/token_trie.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace kvcast::grammar {
namespace {

using Json = nlohmann::ordered_json;

std::shared_ptr<const Grammar> FromSchema(const char* schema) {
  absl::StatusOr<Grammar> g = JsonSchemaGrammar(Json::parse(schema));
  EXPECT_TRUE(g.ok()) << g.status();
  if (!g.ok()) return nullptr;
  return std::make_shared<const Grammar>(std::move(*g));
}

bool Matches(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  Matcher m(g);
  return m.Advance(text) && m.CanEnd();
}

std::string Refusal(const char* schema) {
  absl::StatusOr<Grammar> g = JsonSchemaGrammar(Json::parse(schema));
  return g.ok() ? "accepted" : std::string(g.status().message());
}

TEST(JsonSchemaTest, AnyObject) {
  absl::StatusOr<Grammar> built = JsonObjectGrammar();
  ASSERT_TRUE(built.ok()) << built.status();
  auto g = std::make_shared<const Grammar>(std::move(*built));
  EXPECT_TRUE(Matches(g, R"({"a": [1, -2.5e3, "x\n\u00e9", true, null, {"b": {}}], "c" :0})"));
  EXPECT_TRUE(Matches(g, "{\n  \"name\": \"Ana\",\n  \"tags\": []\n}"));
  EXPECT_TRUE(Matches(g, "{\"k\": \"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"}"));
  EXPECT_FALSE(Matches(g, "[1]"));
  EXPECT_FALSE(Matches(g, R"({"a" 1})"));
  EXPECT_FALSE(Matches(g, R"({"a": 1,})"));
  EXPECT_FALSE(Matches(g, R"({"a": 01})"));
  EXPECT_FALSE(Matches(g, R"({"a": "\x"})"));
  EXPECT_FALSE(Matches(g, "{\"a\": \"\xc3\"}"));  // a cut UTF-8 character
  EXPECT_FALSE(Matches(g, "{\"a\": \"tab\there\"}"));  // a raw control byte
  EXPECT_FALSE(Matches(g, "{" + std::string(kMaxWhitespace + 1, ' ') + "}"));
  EXPECT_TRUE(Matches(g, "{" + std::string(kMaxWhitespace, ' ') + "}"));
}

TEST(JsonSchemaTest, PropertiesInOrderRequiredAndOptional) {
  auto g = FromSchema(R"({"type": "object", "properties": {
      "name": {"type": "string"}, "age": {"type": "integer"}, "email": {"type": "string"}},
      "required": ["name", "email"]})");
  EXPECT_TRUE(Matches(g, R"({"name": "Ana", "age": 31, "email": "a@b.c"})"));
  EXPECT_TRUE(Matches(g, R"({"name":"Ana","email":"a@b.c"})"));
  EXPECT_FALSE(Matches(g, R"({"name": "Ana", "age": 31})"));                  // email missing
  EXPECT_FALSE(Matches(g, R"({"name": "Ana", "email": "x", "extra": 1})"));   // not named
  EXPECT_FALSE(Matches(g, R"({"name": "Ana", "age": 3.5, "email": "x"})"));   // not an integer
  EXPECT_FALSE(Matches(g, R"({"email": "x", "name": "Ana"})"));               // order
  EXPECT_FALSE(Matches(g, R"({, "name": "Ana", "email": "x"})"));
}

TEST(JsonSchemaTest, AllOptionalProperties) {
  auto g = FromSchema(R"({"properties": {"a": {"type": "boolean"}, "b": {"type": "null"}}})");
  EXPECT_TRUE(Matches(g, "{}"));
  EXPECT_TRUE(Matches(g, R"({"b": null})"));
  EXPECT_TRUE(Matches(g, R"({"a": false, "b": null})"));
  EXPECT_FALSE(Matches(g, R"({"a": false,})"));
  EXPECT_FALSE(Matches(g, R"({,"b": null})"));
}

TEST(JsonSchemaTest, EnumConstAnyOfAndTypeLists) {
  auto g = FromSchema(R"({"type": "object", "properties": {
      "unit": {"enum": ["cm", "in", 3, null]},
      "kind": {"const": "box"},
      "size": {"anyOf": [{"type": "number"}, {"type": "string", "maxLength": 2}]},
      "note": {"type": ["string", "null"]}},
      "required": ["unit", "kind", "size", "note"], "additionalProperties": false})");
  EXPECT_TRUE(Matches(g, R"({"unit": "cm", "kind": "box", "size": 1.5, "note": null})"));
  EXPECT_TRUE(Matches(g, R"({"unit": 3, "kind": "box", "size": "xl", "note": "hi"})"));
  EXPECT_TRUE(Matches(g, R"({"unit": null, "kind": "box", "size": -7, "note": ""})"));
  EXPECT_FALSE(Matches(g, R"({"unit": "mm", "kind": "box", "size": 1, "note": null})"));
  EXPECT_FALSE(Matches(g, R"({"unit": "cm", "kind": "bag", "size": 1, "note": null})"));
  EXPECT_FALSE(Matches(g, R"({"unit": "cm", "kind": "box", "size": "xxl", "note": null})"));
  EXPECT_FALSE(Matches(g, R"({"unit": "cm", "kind": "box", "size": 1, "note": 5})"));
}

TEST(JsonSchemaTest, ArraysCountItemsAndTuples) {
  auto g = FromSchema(R"({"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 3})");
  EXPECT_FALSE(Matches(g, "[]"));
  EXPECT_FALSE(Matches(g, "[1]"));
  EXPECT_TRUE(Matches(g, "[1, 2]"));
  EXPECT_TRUE(Matches(g, "[ 1 ,2 , 3 ]"));
  EXPECT_FALSE(Matches(g, "[1, 2, 3, 4]"));
  EXPECT_FALSE(Matches(g, "[1, \"2\"]"));

  auto tuple = FromSchema(R"({"prefixItems": [{"type": "string"}, {"type": "integer"}],
                             "items": {"type": "boolean"}, "minItems": 1})");
  EXPECT_FALSE(Matches(tuple, "[]"));
  EXPECT_TRUE(Matches(tuple, R"(["a"])"));
  EXPECT_TRUE(Matches(tuple, R"(["a", 1])"));
  EXPECT_TRUE(Matches(tuple, R"(["a", 1, true, false])"));
  EXPECT_FALSE(Matches(tuple, R"([1])"));
  EXPECT_FALSE(Matches(tuple, R"(["a", 1, 2])"));

  auto closed = FromSchema(R"({"prefixItems": [{"type": "null"}], "items": false})");
  EXPECT_TRUE(Matches(closed, "[]"));
  EXPECT_TRUE(Matches(closed, "[null]"));
  EXPECT_FALSE(Matches(closed, "[null, null]"));
}

TEST(JsonSchemaTest, StringLengthsCountCharactersNotBytes) {
  auto g = FromSchema(R"({"type": "string", "minLength": 2, "maxLength": 3})");
  EXPECT_FALSE(Matches(g, R"("a")"));
  EXPECT_TRUE(Matches(g, R"("ab")"));
  EXPECT_TRUE(Matches(g, "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\""));  // 3 characters, 9 bytes
  EXPECT_TRUE(Matches(g, R"("\n\"")"));
  EXPECT_FALSE(Matches(g, R"("abcd")"));
}

TEST(JsonSchemaTest, FormatsGiveOnlyValidValues) {
  auto date = FromSchema(R"({"type": "string", "format": "date"})");
  EXPECT_TRUE(Matches(date, R"("2026-11-28")"));
  EXPECT_FALSE(Matches(date, R"("2026-13-01")"));
  EXPECT_FALSE(Matches(date, R"("2026-02-30")"));
  auto stamp = FromSchema(R"({"type": "string", "format": "date-time"})");
  EXPECT_TRUE(Matches(stamp, R"("2026-11-28T04:00:38Z")"));
  EXPECT_TRUE(Matches(stamp, R"("2026-11-28T23:59:59.123+05:30")"));
  EXPECT_FALSE(Matches(stamp, R"("2026-11-28T24:00:00Z")"));
  EXPECT_FALSE(Matches(stamp, R"("2026-11-28 04:00:38Z")"));
  auto uuid = FromSchema(R"({"type": "string", "format": "uuid"})");
  EXPECT_TRUE(Matches(uuid, R"("123e4567-e89b-12d3-a456-426614174000")"));
  EXPECT_FALSE(Matches(uuid, R"("123e4567e89b12d3a456426614174000")"));
}

TEST(JsonSchemaTest, NumbersAreJsonNumbersOfBoundedLength) {
  auto n = FromSchema(R"({"type": "number"})");
  for (const char* ok : {"0", "-0", "12.5", "1e9", "-3.25E-2", "1234567890123456", "1e99"}) {
    EXPECT_TRUE(Matches(n, ok)) << ok;
  }
  for (const char* bad : {"01", "+1", ".5", "1.", "1e", "12345678901234567", "1e100", "NaN"}) {
    EXPECT_FALSE(Matches(n, bad)) << bad;
  }
  auto i = FromSchema(R"({"type": "integer"})");
  EXPECT_TRUE(Matches(i, "-42"));
  EXPECT_FALSE(Matches(i, "4.2"));
  EXPECT_FALSE(Matches(i, "4e2"));
}

// Every integer in [-1200, 1200] (and some far ones) matches exactly when
// it is within the bounds, for bounds of every kind and sign.
TEST(JsonSchemaTest, IntegerBoundsAreExact) {
  struct Case {
    const char* bounds;
    long lo, hi;  // inclusive; +-1e18: none
  } cases[] = {
      {R"("minimum": 0)", 0, long(1e18)},
      {R"("minimum": 18, "maximum": 120)", 18, 120},
      {R"("exclusiveMinimum": 0, "exclusiveMaximum": 1000)", 1, 999},
      {R"("minimum": -40, "maximum": 85)", -40, 85},
      {R"("maximum": -7)", long(-1e18), -7},
      {R"("minimum": -1000, "exclusiveMaximum": -99)", -1000, -100},
      {R"("minimum": 2.5, "maximum": 9.99)", 3, 9},
      {R"("minimum": 5, "exclusiveMinimum": 5)", 6, long(1e18)},
      {R"("minimum": 0, "maximum": 0)", 0, 0},
  };
  for (const Case& c : cases) {
    auto g = FromSchema((std::string(R"({"type": "integer", )") + c.bounds + "}").c_str());
    ASSERT_NE(g, nullptr) << c.bounds;
    for (long v = -1200; v <= 1200; ++v) {
      ASSERT_EQ(Matches(g, std::to_string(v)), v >= c.lo && v <= c.hi) << c.bounds << ": " << v;
    }
    for (long v : {-123456789L, 123456789L, 9999999999999999L}) {
      EXPECT_EQ(Matches(g, std::to_string(v)), v >= c.lo && v <= c.hi) << c.bounds << ": " << v;
    }
    EXPECT_FALSE(Matches(g, "-0")) << c.bounds;
    EXPECT_FALSE(Matches(g, "007")) << c.bounds;
  }
}

TEST(JsonSchemaTest, NumberBoundsAdmitOnlyValuesWithin) {
  auto unit = FromSchema(R"({"type": "number", "minimum": 0, "maximum": 1})");
  for (const char* ok : {"0", "0.5", "0.999", "1", "0.0"}) EXPECT_TRUE(Matches(unit, ok)) << ok;
  for (const char* bad : {"-0.5", "1.5", "2", "-1", "1e0", "1.5e-3"}) EXPECT_FALSE(Matches(unit, bad)) << bad;
  auto positive = FromSchema(R"({"type": "number", "exclusiveMinimum": 0})");
  for (const char* ok : {"0.001", "3", "12.25", "0.10"}) EXPECT_TRUE(Matches(positive, ok)) << ok;
  for (const char* bad : {"0", "0.0", "0.000", "-1", "-0.5"}) EXPECT_FALSE(Matches(positive, bad)) << bad;
  auto temp = FromSchema(R"({"type": "number", "minimum": -10, "exclusiveMaximum": 40})");
  for (const char* ok : {"-10", "-9.5", "-0.25", "0", "39.99"}) EXPECT_TRUE(Matches(temp, ok)) << ok;
  for (const char* bad : {"-10.5", "-11", "40", "40.0", "41"}) EXPECT_FALSE(Matches(temp, bad)) << bad;
}

// Patterns: the strings they match (anywhere unless anchored), written as
// JSON writes them.
TEST(JsonSchemaTest, PatternsMatchTheJsonTextOfMatchingStrings) {
  struct Case {
    const char* pattern;
    std::vector<const char*> yes, no;  // JSON string literals
  } cases[] = {
      {R"(^\d{3}-\d{4}$)", {R"("555-1234")"}, {R"("55-1234")", R"("555-12345")", R"("abc-defg")"}},
      {R"(^[A-Z][a-z]+(?: [A-Z][a-z]+)*$)", {R"("Ana")", R"("Ana Lopez Garcia")"}, {R"("ana")", R"("Ana ")", R"("A")"}},
      {R"(^(cat|dog)s?$)", {R"("cat")", R"("dogs")"}, {R"("cow")", R"("catss")"}},
      {R"(^[^\s@]+@[^\s@]+\.[a-z]{2,}$)", {R"("rosa@garden.org")"}, {R"("rosa@garden")", R"("a b@c.de")"}},
      {R"(abc)", {R"("abc")", R"("xxabcyy")", R"("\n abc \"")"}, {R"("ab c")", R"("")"}},
      {R"(^a"b\\c$)", {R"("a\"b\\c")"}, {R"("a"b\\c")", R"("a\"bc")"}},
      {R"(^\w+\t\S?$)", {R"("x_1\t")", R"("x\t!")"}, {R"("x\t\t")", R"("x y\t")"}},
      {R"(^caf\u00e9|ni\u00f1o$)", {"\"caf\xc3\xa9\"", "\"ni\xc3\xb1o\""}, {R"("cafe")"}},
      {R"(^[\u00e9\u00e8a-c]{2}$)", {"\"\xc3\xa9" "a\"", R"("cb")"}, {R"("d")", "\"\xc3\xaa\xc3\xaa\""}},
      {R"(^.{2,3}$)", {R"("ab")", "\"\xe2\x82\xac\xe2\x82\xac\"", R"("a\"b")"}, {R"("a")", R"("abcd")", R"("a\nb")"}},
  };
  for (const Case& c : cases) {
    nlohmann::ordered_json schema = {{"type", "string"}, {"pattern", c.pattern}};
    absl::StatusOr<Grammar> built = JsonSchemaGrammar(schema);
    ASSERT_TRUE(built.ok()) << c.pattern << ": " << built.status();
    auto g = std::make_shared<const Grammar>(std::move(*built));
    for (const char* y : c.yes) EXPECT_TRUE(Matches(g, y)) << c.pattern << " should match " << y;
    for (const char* n : c.no) EXPECT_FALSE(Matches(g, n)) << c.pattern << " should not match " << n;
  }
  for (const char* bad : {R"((a)\1)", R"((?=a)b)", R"(\bword)", R"(\p{L})", R"(a^b)", R"([z-a])", R"(a{2000})", R"((ab)"}) {
    nlohmann::ordered_json schema = {{"type", "string"}, {"pattern", bad}};
    absl::StatusOr<Grammar> built = JsonSchemaGrammar(schema);
    EXPECT_FALSE(built.ok()) << bad;
    EXPECT_NE(built.status().message().find("JSON Schema at #/pattern: unsupported pattern"), std::string::npos)
        << built.status();
  }
}

// vLLM's guided_regex: the whole text, raw (nothing escaped).
TEST(JsonSchemaTest, GuidedRegexMatchesTheWholeRawText) {
  auto grammar_of = [](const char* regex) {
    absl::StatusOr<Grammar> g = RegexGrammar(regex);
    EXPECT_TRUE(g.ok()) << regex << ": " << g.status();
    return std::make_shared<const Grammar>(std::move(*g));
  };
  auto digits = grammar_of("[0-9]{3}");
  EXPECT_TRUE(Matches(digits, "123"));
  EXPECT_FALSE(Matches(digits, "1234"));
  EXPECT_FALSE(Matches(digits, "a123"));
  auto quoted = grammar_of(R"(^a"b\\c\n.$)");
  EXPECT_TRUE(Matches(quoted, "a\"b\\c\nx"));
  EXPECT_FALSE(Matches(quoted, R"(a\"b\\c\nx)"));  // JSON escapes are not what it matches
  auto answer = grammar_of(R"((yes|no), because [^\n]{1,20}\.)");
  EXPECT_TRUE(Matches(answer, "no, because \"it\" is late."));
  EXPECT_FALSE(Matches(answer, "maybe, because."));
  EXPECT_FALSE(RegexGrammar("(a").ok());
}

TEST(JsonSchemaTest, TextAroundTheJson) {
  absl::StatusOr<Grammar> built = JsonSchemaGrammar(
      Json::parse(R"({"type": "object", "properties": {"name": {"const": "f"}}, "required": ["name"]})"),
      "<tool_call>\n", "\n</tool_call>");
  ASSERT_TRUE(built.ok()) << built.status();
  auto g = std::make_shared<const Grammar>(std::move(*built));
  EXPECT_TRUE(Matches(g, "<tool_call>\n{\"name\": \"f\"}\n</tool_call>"));
  EXPECT_FALSE(Matches(g, "{\"name\": \"f\"}"));
  EXPECT_FALSE(Matches(g, "<tool_call>\n{\"name\": \"f\"}"));
}

TEST(JsonSchemaTest, RefsIncludingRecursion) {
  auto g = FromSchema(R"({"$defs": {"node": {"type": "object", "properties": {
      "v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
      "required": ["v", "kids"]}}, "$ref": "#/$defs/node"})");
  EXPECT_TRUE(Matches(g, R"({"v": 1, "kids": [{"v": 2, "kids": []}, {"v": 3, "kids": [{"v": 4, "kids": []}]}]})"));
  EXPECT_FALSE(Matches(g, R"({"v": 1, "kids": [{"v": 2}]})"));
  EXPECT_NE(Refusal(R"({"$ref": "#/$defs/none"})").find("names nothing"), std::string::npos);
}

TEST(JsonSchemaTest, RefusalsNameTheKeywordAndWhere) {
  EXPECT_EQ(Refusal(R"({"not": {"type": "string"}})"), "unsupported JSON Schema keyword 'not' at #");
  EXPECT_EQ(Refusal(R"({"type": "object", "properties": {"age": {"type": "integer", "multipleOf": 2}}})"),
            "unsupported JSON Schema keyword 'multipleOf' at #/properties/age");
  EXPECT_EQ(Refusal(R"({"type": "number", "maximum": 2.5})"),
            "unsupported JSON Schema keyword 'maximum (not a whole number, on a number)' at #");
  EXPECT_EQ(Refusal(R"({"type": "integer", "minimum": 3, "maximum": 2})"),
            "JSON Schema at #: the bounds leave no value");
  EXPECT_EQ(Refusal(R"({"type": "string", "format": "email"})"),
            "unsupported JSON Schema keyword 'format: email' at #");
  EXPECT_EQ(Refusal(R"({"type": "array", "items": {"type": "thing"}})"),
            "JSON Schema at #/items/type: unknown type 'thing'");
  EXPECT_EQ(Refusal(R"({"type": "object", "properties": {"a": {}}, "required": ["b"]})"),
            "JSON Schema at #/required: 'b' is required but not in properties");
  EXPECT_EQ(Refusal(R"({"allOf": [{"type": "string"}, {"maxLength": 3}]})"),
            "unsupported JSON Schema keyword 'allOf (of more than one schema)' at #");
  EXPECT_EQ(Refusal("false"), "JSON Schema at #: the schema false accepts nothing");
  EXPECT_EQ(Refusal(R"({"title": "anything", "description": "goes"})"), "accepted");
}

// Random walks over a byte vocabulary (every byte a token), choosing among
// the tokens the mask allows until the grammar completes: each document the
// grammar lets out parses as JSON and keeps the schema's shape.
TEST(JsonSchemaTest, EveryCompletedWalkIsJsonOfTheSchemasShape) {
  auto g = FromSchema(R"({"type": "object", "properties": {
      "id": {"type": "integer"}, "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3},
      "pos": {"prefixItems": [{"type": "number"}, {"type": "number"}], "items": false, "minItems": 2},
      "who": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 4}},
              "required": ["name"]}},
      "required": ["id", "pos", "who"]})");
  std::vector<std::optional<std::string>> vocab;
  for (int b = 0; b < 256; ++b) vocab.push_back(std::string(1, char(b)));
  TokenTrie trie(vocab);
  std::mt19937 rng(11);
  int completed = 0;
  for (int walk = 0; walk < 200; ++walk) {
    Matcher m(g);
    std::string text;
    for (int step = 0; step < 400 && !(m.CanEnd() && !m.CanContinue()); ++step) {
      if (m.CanEnd() && rng() % 4 == 0) break;
      std::vector<uint32_t> mask(8);
      m.FillMask(trie, absl::MakeSpan(mask));
      std::vector<int> allowed;
      for (int b = 0; b < 256; ++b) {
        // Favour structure over whitespace and long strings.
        if ((mask[size_t(b) >> 5] >> (b & 31)) & 1) allowed.push_back(b);
      }
      ASSERT_FALSE(allowed.empty()) << text;
      const int b = allowed[rng() % allowed.size()];
      ASSERT_TRUE(m.Advance(std::string(1, char(b))));
      text.push_back(char(b));
    }
    if (!m.CanEnd()) continue;
    ++completed;
    Json doc = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(doc.is_discarded()) << text;
    EXPECT_TRUE(doc["id"].is_number_integer()) << text;
    EXPECT_EQ(doc["pos"].size(), 2u) << text;
    EXPECT_TRUE(doc["who"]["name"].is_string()) << text;
    if (doc.contains("tags")) {
      EXPECT_LE(doc["tags"].size(), 3u) << text;
    }
  }
  EXPECT_GT(completed, 20);
}

// The mask's shortcuts (a subtree of plain bytes allowed whole where a
// state takes any run of them, or a run as long as the subtree is tall;
// kept masks) must give exactly the tokens Advance accepts: checked at
// every step of walking documents, with a vocabulary of every substring of
// up to 5 bytes of them (multi-byte tokens crossing quotes, escapes, keys
// and values), for any JSON object and for a schema of bounded strings.
void ExpectMaskEqualsAdvancing(const std::shared_ptr<const Grammar>& g,
                               const std::vector<std::string>& docs) {
  std::set<std::string> pieces;
  for (const std::string& d : docs) {
    for (size_t i = 0; i < d.size(); ++i) {
      for (size_t len = 1; len <= 5 && i + len <= d.size(); ++len) pieces.insert(d.substr(i, len));
    }
  }
  std::vector<std::optional<std::string>> vocab(pieces.begin(), pieces.end());
  vocab.push_back(std::nullopt);  // a special token
  TokenTrie trie(vocab);
  auto automaton = std::make_shared<Automaton>(g);
  int checked = 0;
  for (int pass = 0; pass < 2; ++pass) {  // the second finds kept masks
    for (const std::string& d : docs) {
      Matcher m(automaton);
      for (size_t i = 0; i <= d.size(); ++i) {
        std::vector<uint32_t> mask((vocab.size() + 31) / 32);
        m.FillMask(trie, absl::MakeSpan(mask));
        for (size_t t = 0; t < vocab.size(); ++t) {
          Matcher probe = m;
          const bool expected = vocab[t] && probe.Advance(*vocab[t]);
          ASSERT_EQ(bool((mask[t >> 5] >> (t & 31)) & 1), expected)
              << "token '" << vocab[t].value_or("<special>") << "' after '" << d.substr(0, i) << "'";
          checked += expected;
        }
        if (i < d.size()) {
          ASSERT_TRUE(m.Advance(d.substr(i, 1))) << d.substr(0, i + 1);
        }
      }
      EXPECT_TRUE(m.CanEnd()) << d;
    }
  }
  EXPECT_GT(checked, 2000);
}

TEST(JsonSchemaTest, MaskEqualsAdvancingEachTokenOnJson) {
  absl::StatusOr<Grammar> any = JsonObjectGrammar();
  ASSERT_TRUE(any.ok());
  ExpectMaskEqualsAdvancing(
      std::make_shared<const Grammar>(std::move(*any)),
      {R"({"name": "Ana \"Lo\" Pez", "tags": ["a b", "c\\d"], "n": -12.5e3, "ok": true})",
       "{\"caf\xc3\xa9\": \"na\xc3\xafve \xe2\x82\xac\", \"x\": [null, {}, []]}"});
  ExpectMaskEqualsAdvancing(
      FromSchema(R"({"type": "object", "properties": {
          "name": {"type": "string", "maxLength": 7},
          "tags": {"type": "array", "items": {"type": "string", "minLength": 2, "maxLength": 4}}},
          "required": ["name", "tags"]})"),
      {R"({"name": "Ana Lop", "tags": ["ab", "abcd", "x y"]})", R"({"name": "", "tags": []})",
       R"({"name":"a\"b","tags":["zz"]})"});
}

}  // namespace
}  // namespace kvcast::grammar
