// JSON Schema's `pattern` (an ECMA-262 regular expression) as grammar rules
// over the JSON text of a string's contents, for json_schema.h.
//
// The language is the strings the pattern matches anywhere (JSON Schema's
// semantics: a pattern not anchored with ^ or $ may have any text before or
// after), each character written as a JSON string writes it: `"` and `\` and
// control characters escaped (\", \\, \n, \t, \r, \b, \f, \u00XX), others
// as their UTF-8 bytes.
//
// Supported: literal characters (UTF-8), `.`, escapes \d \D \w \W \s \S
// \t \n \r \f \v \0 \xHH \uHHHH and escaped punctuation, classes [...] and
// [^...] with ranges (ranges within ASCII; single non-ASCII characters in a
// class that is not negated), groups (...) (?:...) (?<name>...),
// alternation, quantifiers * + ? {n} {n,} {n,m} (lazy forms alike: the
// language is the same; counts up to 1000), ^ at the start and $ at the
// end. Anything else (backreferences, lookaround, \b, \p{...}, anchors
// inside) is refused: InvalidArgument naming it. Where ECMA-262 is wider
// the grammar is narrower (\s, \S and negated classes holding \s give
// ASCII characters only), except that `.` admits U+2028 and U+2029, which
// ECMA-262's `.` does not.
#ifndef KVCAST_ENGINE_GRAMMAR_REGEX_H_
#define KVCAST_ENGINE_GRAMMAR_REGEX_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "engine/grammar/grammar.h"

namespace kvcast::grammar {

// A rule of `b` matching the JSON-escaped contents (no quotes) of the
// strings `pattern` matches.
absl::StatusOr<RuleId> JsonStringPattern(GrammarBuilder& b, std::string_view pattern);

// The text `regex` matches whole (vLLM's guided_regex: anchored at both
// ends whether or not it says so), as raw UTF-8, nothing escaped.
absl::StatusOr<Grammar> RegexGrammar(std::string_view regex);

}  // namespace kvcast::grammar

#endif  // KVCAST_ENGINE_GRAMMAR_REGEX_H_
