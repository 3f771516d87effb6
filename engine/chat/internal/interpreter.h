// Interpreter: renders a parsed template (ast.h) into a string with
// jinja2's semantics as Hugging Face configures it (see ../jinja.h).
// One Interpreter serves one render on one thread; the tree it runs is
// borrowed and must outlive it.
//
// Errors end the render: InvalidArgument "line N: ..." for type errors,
// undefined values used in operations and raise_exception (whose message is
// kept as given, without a line prefix); ResourceExhausted when the output,
// a string or list, the loop iterations or the macro call depth exceed the
// limits, or an int grows beyond numbers.h's kMaxIntBits.
#ifndef KVCAST_ENGINE_CHAT_INTERNAL_INTERPRETER_H_
#define KVCAST_ENGINE_CHAT_INTERNAL_INTERPRETER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/chat/internal/ast.h"
#include "engine/chat/internal/value.h"

namespace kvcast {
namespace jinja_internal {

struct Limits {
  size_t max_output_bytes = 16 << 20;  // Also the largest string built.
  size_t max_list_items = 1 << 20;
  int64_t max_loop_iterations = 1'000'000;
  int max_call_depth = 100;
};

// A variable scope: the template's top level, a for loop, a macro call, a
// with block. `alive` turns false when the scope ends, so a closure that
// outlives its scope fails cleanly instead of reading freed memory.
struct Scope {
  explicit Scope(Scope* parent_scope) : parent(parent_scope) {}
  ~Scope() { *alive = false; }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

  const Value* Lookup(const std::string& name) const;

  absl::flat_hash_map<std::string, Value> vars;
  Scope* parent;
  std::shared_ptr<bool> alive = std::make_shared<bool>(true);
};

class Interpreter {
 public:
  Interpreter(const Limits& limits, std::string* out) : limits_(limits), out_(out) {}

  // Runs `body` with `globals` as the outermost scope.
  absl::Status Run(const StmtList& body, Scope* globals);

  absl::StatusOr<Value> Eval(const Expr& e);
  absl::StatusOr<Value> CallValue(const Value& callee, CallArgs& args);
  // For builtins: applies a filter or test by name (map, select, ...).
  absl::StatusOr<Value> ApplyFilter(const std::string& name, const Value& input, CallArgs& args);
  absl::StatusOr<bool> ApplyTest(const std::string& name, const Value& input, CallArgs& args);

  // ResourceExhausted when a string of `bytes` would exceed the limits.
  absl::Status CheckStringSize(size_t bytes) const;
  absl::Status CheckListSize(size_t items) const;
  const Limits& limits() const { return limits_; }
  // An error naming the current template line.
  absl::Status Error(const std::string& message) const;
  // `status` naming the current template line, its code kept.
  absl::Status AtLine(const absl::Status& status) const;

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  absl::Status Exec(const StmtList& body);
  absl::Status ExecOne(const Stmt& s);
  absl::Status ExecFor(const Stmt& s);
  absl::Status ExecCallBlock(const Stmt& s);
  absl::StatusOr<std::string> Capture(const StmtList& body);
  absl::Status Emit(const std::string& text);
  absl::Status Assign(const Target& target, const Value& value);
  Value DefineMacro(const std::string& name, const MacroParams* params, const StmtList* body, Scope* closure);
  absl::StatusOr<Value> CallMacro(const std::string& name, const MacroParams& params, const StmtList& body,
                                  Scope* closure, CallArgs& args);
  absl::StatusOr<Value> EvalBinary(const std::string& op, const Value& a, const Value& b);
  absl::StatusOr<Value> FormatPercent(const std::string& format, const Value& args);
  absl::StatusOr<bool> Compare(const std::string& op, const Value& a, const Value& b);
  absl::StatusOr<Value> EvalSlice(const Value& obj, const Expr& e);
  absl::StatusOr<Value> Lookup(const Expr& e);

  Limits limits_;
  std::string* out_;
  Scope* scope_ = nullptr;
  Scope* root_ = nullptr;
  Flow flow_ = Flow::kNormal;
  int line_ = 0;
  int call_depth_ = 0;
  int64_t iterations_ = 0;
  const Value* block_value_ = nullptr;
};

// Whether `obj` contains `item` as Python's `in` does.
absl::StatusOr<bool> Contains(const Value& container, const Value& item);

// An undefined value's error: "'x' is undefined".
absl::Status UndefinedError(const Interpreter& in, const Value& undefined);

}  // namespace jinja_internal
}  // namespace kvcast

#endif  // KVCAST_ENGINE_CHAT_INTERNAL_INTERPRETER_H_
