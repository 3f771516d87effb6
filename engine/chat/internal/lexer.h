// Jinja lexer: template text -> a flat token stream of data (text to copy
// out) and the tokens of each {{ }} / {% %} tag, with comments dropped and
// {% raw %} bodies turned into data. Whitespace control is applied here,
// as jinja2's lexer does: "-" on either side of a tag strips whitespace,
// trim_blocks drops the first newline after a block or comment tag,
// lstrip_blocks strips spaces and tabs before a block or comment tag that
// starts a line ("+" on the tag's left disables it), newlines are
// normalized to "\n" and one trailing newline of the template is dropped.
// Errors: InvalidArgument "line N: ..." for unclosed tags, comments and raw
// blocks, unexpected characters, unbalanced brackets and integer literals
// beyond numbers.h's kMaxIntBits.
#ifndef KVCAST_ENGINE_CHAT_INTERNAL_LEXER_H_
#define KVCAST_ENGINE_CHAT_INTERNAL_LEXER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvcast {
namespace jinja_internal {

enum class TokenKind {
  kData, kVariableBegin, kVariableEnd, kBlockBegin, kBlockEnd,
  kName, kString, kInt, kFloat, kOperator, kEof,
};

struct Token {
  TokenKind kind = TokenKind::kEof;
  // Data, name, operator, the decoded string literal, a number's text; the
  // decimal digits of an integer beyond int64.
  std::string text;
  int64_t int_value = 0;  // An integer within int64.
  bool big_int = false;   // An integer beyond int64 (then int_value is 0).
  double float_value = 0;
  int line = 1;
};

struct LexerOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

absl::StatusOr<std::vector<Token>> Tokenize(absl::string_view source, const LexerOptions& options);

}  // namespace jinja_internal
}  // namespace kvcast

#endif  // KVCAST_ENGINE_CHAT_INTERNAL_LEXER_H_
