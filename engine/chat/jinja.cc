#include "engine/chat/jinja.h"

#include <utility>
#include <vector>

#include "common/status_macros.h"
#include "engine/chat/internal/ast.h"
#include "engine/chat/internal/builtins.h"
#include "engine/chat/internal/interpreter.h"
#include "engine/chat/internal/lexer.h"
#include "engine/chat/internal/parser.h"

namespace kvcast {

using jinja_internal::CallArgs;
using jinja_internal::Interpreter;
using jinja_internal::Value;

JinjaTemplate::~JinjaTemplate() = default;

absl::StatusOr<std::unique_ptr<JinjaTemplate>> JinjaTemplate::Parse(absl::string_view text,
                                                                    const JinjaOptions& options) {
  jinja_internal::LexerOptions lexer_options;
  lexer_options.trim_blocks = options.trim_blocks;
  lexer_options.lstrip_blocks = options.lstrip_blocks;
  ASSIGN_OR_RETURN(std::vector<jinja_internal::Token> tokens, jinja_internal::Tokenize(text, lexer_options));
  jinja_internal::ParserHooks hooks;
  hooks.is_filter = jinja_internal::IsFilter;
  hooks.is_test = jinja_internal::IsTest;
  ASSIGN_OR_RETURN(jinja_internal::StmtList body, jinja_internal::ParseTokens(tokens, hooks));
  std::unique_ptr<JinjaTemplate> t(new JinjaTemplate());
  t->options_ = options;
  t->body_ = std::make_unique<jinja_internal::StmtList>(std::move(body));
  return t;
}

absl::StatusOr<std::string> JinjaTemplate::Render(const nlohmann::ordered_json& context,
                                                  const std::map<std::string, JinjaFunction>& functions) const {
  if (!context.is_object() && !context.is_null()) {
    return absl::InvalidArgumentError("the template context must be a JSON object");
  }
  jinja_internal::Scope globals(nullptr);
  jinja_internal::AddGlobals(&globals);
  for (const auto& [name, fn] : functions) {
    JinjaFunction f = fn;
    globals.vars[name] = Value::Function(name, [f](Interpreter& in, CallArgs& a) -> absl::StatusOr<Value> {
      nlohmann::ordered_json args = nlohmann::ordered_json::array();
      nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
      for (const Value& v : a.args) args.push_back(v.ToJson());
      for (const auto& [k, v] : a.kwargs) kwargs[k] = v.ToJson();
      ASSIGN_OR_RETURN(nlohmann::ordered_json r, f(args, kwargs));
      return Value::FromJson(r);
    });
  }
  jinja_internal::Scope variables(&globals);
  if (context.is_object()) {
    for (auto it = context.begin(); it != context.end(); ++it) variables.vars[it.key()] = Value::FromJson(it.value());
  }
  jinja_internal::Limits limits;
  limits.max_output_bytes = options_.max_output_bytes;
  limits.max_list_items = options_.max_list_items;
  limits.max_loop_iterations = options_.max_loop_iterations;
  limits.max_call_depth = options_.max_call_depth;
  std::string out;
  Interpreter interpreter(limits, &out);
  RETURN_IF_ERROR(interpreter.Run(*body_, &variables));
  return out;
}

}  // namespace kvcast
