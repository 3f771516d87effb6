// Jinja parser: tokens -> statement tree, following jinja2's grammar and
// operator precedence (parser.py): condexpr < or < and < not < comparisons
// (== != < <= > >= in, not in) < + - < ~ < * / // % < ** (left-associative,
// as jinja2's) < unary - + < postfix (. [] () | is).
// Errors: InvalidArgument "line N: ..." for syntax errors, unknown tags,
// unknown filters and tests (is_filter / is_test say what exists), unclosed
// blocks, break/continue outside a loop, and nesting deeper than 256 levels.
#ifndef KVCAST_ENGINE_CHAT_INTERNAL_PARSER_H_
#define KVCAST_ENGINE_CHAT_INTERNAL_PARSER_H_

#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/chat/internal/ast.h"
#include "engine/chat/internal/lexer.h"

namespace kvcast {
namespace jinja_internal {

struct ParserHooks {
  std::function<bool(absl::string_view)> is_filter;
  std::function<bool(absl::string_view)> is_test;
};

absl::StatusOr<StmtList> ParseTokens(const std::vector<Token>& tokens, const ParserHooks& hooks);

}  // namespace jinja_internal
}  // namespace kvcast

#endif  // KVCAST_ENGINE_CHAT_INTERNAL_PARSER_H_
