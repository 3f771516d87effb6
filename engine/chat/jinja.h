// JinjaTemplate: a Jinja2-compatible template renderer for Hugging Face chat
// templates. A template is parsed once and rendered many times; the output
// is byte-identical to Python jinja2 configured as transformers configures
// it (ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
// extensions=[loopcontrols]), the tojson filter replaced by
// json.dumps(x, ensure_ascii=False, indent=, separators=, sort_keys=), and
// the globals raise_exception and strftime_now).
//
// Supported: {{ }}, {% %}, {# #}, whitespace control (-, +, trim_blocks,
// lstrip_blocks), {% raw %}; statements if/elif/else, for/else (loop.index,
// index0, revindex, revindex0, first, last, length, previtem, nextitem,
// cycle, changed; "for x in xs if cond"), break/continue, set (also ns.attr = ...,
// and {% set x %}...{% endset %}), macro (default arguments, varargs,
// kwargs), call blocks, filter blocks, with, generation (rendered as is);
// Python expressions with jinja2's precedence, slices, inline if, tests and
// filters listed in internal/builtins.cc and internal/filters.cc, and the
// str/dict/list methods templates use. Values print as Python's str() does
// (True, None, 1.0, ['a', 1]); dicts keep insertion order; ints are exact
// at any size up to 4,096 bits, as Python's (2 ** 100, 10 ** 30 // 7), and
// meet floats as Python's do. Undefined values behave as jinja2's default
// Undefined: they print as "", iterate as empty and are false, while
// attribute access on them, calling them or using them in arithmetic or
// ordering is an error. Not supported: extends, include, import, block,
// recursive loops, *args/**kwargs in calls, the % operator
// (the format filter does %-formatting: %s %r %d %i %f %e %g %x %o, flags,
// width, precision), and the rarely used filters (groupby, batch, slice,
// truncate, wordwrap, urlize, ...): a template that uses them fails to parse.
// Case mapping (upper, lower, title, capitalize) covers ASCII, Latin-1,
// Latin Extended-A, Greek and Cyrillic; other scripts pass unchanged.
//
// Errors: Parse returns InvalidArgument "line N: ..." for a malformed
// template (unclosed tags or blocks, unknown tags, filters or tests, syntax
// errors). Render returns InvalidArgument for errors while rendering: a
// message given to raise_exception(message) as is, anything else as
// "line N: ..." (type errors, undefined values used in operations, bad
// arguments); ResourceExhausted when the output or any string exceeds
// max_output_bytes, a list exceeds max_list_items, the loop iterations
// exceed max_loop_iterations, macro calls nest deeper than max_call_depth
// or an int grows beyond 4,096 bits (Python has no such bound; an integer
// literal that long fails to parse). Nothing throws and every render ends.
//
// Thread safety: a JinjaTemplate is immutable after Parse; Render may be
// called concurrently from many threads.
#ifndef KVCAST_ENGINE_CHAT_JINJA_H_
#define KVCAST_ENGINE_CHAT_JINJA_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace kvcast {

namespace jinja_internal {
struct Stmt;
}  // namespace jinja_internal

struct JinjaOptions {
  // As jinja2's Environment options; Hugging Face sets both.
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  // Render limits.
  size_t max_output_bytes = 16 << 20;
  size_t max_list_items = 1 << 20;
  int64_t max_loop_iterations = 1'000'000;
  int max_call_depth = 100;
};

// A function callable from templates, e.g. a fixed strftime_now for tests.
// `args` is a JSON array of the positional arguments, `kwargs` an object of
// the keyword arguments (undefined values arrive as null, ints beyond int64
// as the nearest double). An error status ends the render with that status.
using JinjaFunction = std::function<absl::StatusOr<nlohmann::ordered_json>(
    const nlohmann::ordered_json& args, const nlohmann::ordered_json& kwargs)>;

class JinjaTemplate {
 public:
  // Parses `text`. InvalidArgument "line N: ..." when it is malformed.
  static absl::StatusOr<std::unique_ptr<JinjaTemplate>> Parse(absl::string_view text,
                                                              const JinjaOptions& options = {});

  ~JinjaTemplate();
  JinjaTemplate(const JinjaTemplate&) = delete;
  JinjaTemplate& operator=(const JinjaTemplate&) = delete;

  // Renders with the members of `context` (a JSON object; anything else is
  // InvalidArgument) as variables, over the globals range, namespace, dict,
  // cycler, joiner, raise_exception and strftime_now (local time);
  // `functions` are added as globals and replace any of the same name. JSON
  // objects keep their order (an nlohmann::json object arrives sorted by
  // key: parse requests with nlohmann::ordered_json to keep the client's
  // order, as Python would).
  absl::StatusOr<std::string> Render(const nlohmann::ordered_json& context,
                                     const std::map<std::string, JinjaFunction>& functions = {}) const;

 private:
  JinjaTemplate() = default;

  JinjaOptions options_;
  std::unique_ptr<std::vector<std::unique_ptr<jinja_internal::Stmt>>> body_;
};

}  // namespace kvcast

#endif  // KVCAST_ENGINE_CHAT_JINJA_H_
