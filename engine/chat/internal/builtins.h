// The filters, tests, methods and globals of the Jinja interpreter: the
// subset of jinja2's builtins (filters.py, tests.py, defaults.py) and of
// Python's str/dict/list methods that chat templates use, plus HF's tojson,
// raise_exception and strftime_now. Pure functions of their arguments.
#ifndef KVCAST_ENGINE_CHAT_INTERNAL_BUILTINS_H_
#define KVCAST_ENGINE_CHAT_INTERNAL_BUILTINS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/chat/internal/interpreter.h"
#include "engine/chat/internal/value.h"

namespace kvcast {
namespace jinja_internal {

bool IsFilter(absl::string_view name);
bool IsTest(absl::string_view name);
absl::StatusOr<Value> CallFilter(Interpreter& in, const std::string& name, const Value& input, CallArgs& args);
absl::StatusOr<bool> CallTest(Interpreter& in, const std::string& name, const Value& input, CallArgs& args);

// obj.name as jinja2's sandbox resolves it: Python methods first (str.strip,
// dict.items, ...), then dict items; undefined when neither exists.
Value GetAttr(const Value& obj, const std::string& name);
// obj[key]: dict items, list and str indexes (negative from the end), then
// attributes for string keys; undefined when none exists.
Value GetItem(const Value& obj, const Value& key);

// range, namespace, dict, raise_exception, strftime_now (local time).
void AddGlobals(Scope* scope);

}  // namespace jinja_internal
}  // namespace kvcast

#endif  // KVCAST_ENGINE_CHAT_INTERNAL_BUILTINS_H_
