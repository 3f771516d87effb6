// A grammar written as text (vLLM's guided_grammar): the EBNF of llama.cpp's
// GBNF and xgrammar, compiled to the byte grammar constrained decoding runs.
//
//   root   ::= answer ("," ws answer)*       # `root` is where output starts
//   answer ::= "yes" | "no" | [0-9]+ | name
//   name   ::= [A-Za-z_] [A-Za-z0-9_-]{0,15}
//   ws     ::= [ \t\n]*
//
// Rules `name ::= alternatives`, a name of letters, digits, `-` and `_`; a
// rule ends where the next `name ::=` starts (newlines are spaces). An
// alternative is a sequence of items, each followed by an optional `*`,
// `+`, `?`, `{m}`, `{m,}` or `{m,n}` (counts up to 1000): a "string" or
// 'string', a character class [...] or [^...] (ranges, any Unicode), a rule
// name, `.` (any character), or a group (...). Escapes in strings and
// classes: \n \r \t \\ \" \' \[ \] \- \^ \xHH \uHHHH \UHHHHHHHH. `#`
// starts a comment to the end of the line. Characters are matched as their
// UTF-8 bytes; a negated class or `.` admits every valid UTF-8 character
// outside it.
//
// Refused with InvalidArgument naming the place (line and column) or the
// rule: syntax errors, an undefined or twice-defined rule, no `root`, and
// left recursion (a rule reaching itself before any character: the matcher
// expands rules top-down; write `list ::= item ("," item)*`, not `list ::=
// list "," item | item`).
#ifndef KVCAST_ENGINE_GRAMMAR_EBNF_H_
#define KVCAST_ENGINE_GRAMMAR_EBNF_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "engine/grammar/grammar.h"

namespace kvcast::grammar {

absl::StatusOr<Grammar> EbnfGrammar(std::string_view text);

}  // namespace kvcast::grammar

#endif  // KVCAST_ENGINE_GRAMMAR_EBNF_H_
