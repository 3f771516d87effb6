#include "engine/chat/internal/interpreter.h"

#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/chat/internal/builtins.h"
#include "engine/chat/internal/numbers.h"

namespace kvcast {
namespace jinja_internal {

const Value* Scope::Lookup(const std::string& name) const {
  for (const Scope* s = this; s != nullptr; s = s->parent) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return &it->second;
  }
  return nullptr;
}

absl::Status UndefinedError(const Interpreter& in, const Value& undefined) {
  return in.Error(undefined.str().empty() ? "value is undefined" : undefined.str());
}

absl::StatusOr<bool> Contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case ValueKind::kUndefined: return false;
    case ValueKind::kString:
      if (!item.is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat("'in <string>' requires string as left operand, not ", item.TypeName()));
      }
      return container.str().find(item.str()) != std::string::npos;
    case ValueKind::kList:
      for (const Value& v : container.items()) {
        if (v.Equals(item)) return true;
      }
      return false;
    case ValueKind::kDict:
      if (!container.is_namespace()) return container.dict().Find(item) != nullptr;
      break;
    default: break;
  }
  return absl::InvalidArgumentError(absl::StrCat("argument of type '", container.TypeName(), "' is not iterable"));
}

absl::Status Interpreter::Error(const std::string& message) const {
  return absl::InvalidArgumentError(absl::StrCat("line ", line_, ": ", message));
}

absl::Status Interpreter::AtLine(const absl::Status& status) const {
  return absl::Status(status.code(), absl::StrCat("line ", line_, ": ", status.message()));
}

absl::Status Interpreter::CheckStringSize(size_t bytes) const {
  if (bytes > limits_.max_output_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("line ", line_, ": string longer than ", limits_.max_output_bytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status Interpreter::CheckListSize(size_t items) const {
  if (items > limits_.max_list_items) {
    return absl::ResourceExhaustedError(
        absl::StrCat("line ", line_, ": list longer than ", limits_.max_list_items, " items"));
  }
  return absl::OkStatus();
}

absl::Status Interpreter::Run(const StmtList& body, Scope* globals) {
  Scope root(globals);
  root_ = &root;
  scope_ = &root;
  return Exec(body);
}

absl::Status Interpreter::Emit(const std::string& text) {
  if (out_->size() + text.size() > limits_.max_output_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("line ", line_, ": output longer than ", limits_.max_output_bytes, " bytes"));
  }
  out_->append(text);
  return absl::OkStatus();
}

absl::StatusOr<std::string> Interpreter::Capture(const StmtList& body) {
  std::string buffer;
  std::string* saved = out_;
  out_ = &buffer;
  absl::Status s = Exec(body);
  out_ = saved;
  if (!s.ok()) return s;
  return buffer;
}

absl::Status Interpreter::Exec(const StmtList& body) {
  for (const auto& stmt : body) {
    RETURN_IF_ERROR(ExecOne(*stmt));
    if (flow_ != Flow::kNormal) break;
  }
  return absl::OkStatus();
}

absl::Status Interpreter::Assign(const Target& target, const Value& value) {
  switch (target.kind) {
    case Target::Kind::kName:
      scope_->vars[target.name] = value;
      return absl::OkStatus();
    case Target::Kind::kTuple: {
      ASSIGN_OR_RETURN(std::vector<Value> items, value.Iterate());
      if (items.size() != target.items.size()) {
        return Error(items.size() > target.items.size()
                         ? absl::StrCat("too many values to unpack (expected ", target.items.size(), ")")
                         : absl::StrCat("not enough values to unpack (expected ", target.items.size(),
                                        ", got ", items.size(), ")"));
      }
      for (size_t i = 0; i < items.size(); ++i) RETURN_IF_ERROR(Assign(target.items[i], items[i]));
      return absl::OkStatus();
    }
    case Target::Kind::kNamespaceAttr: {
      const Value* ns = scope_->Lookup(target.name);
      if (ns == nullptr || !ns->is_namespace()) {
        return Error("cannot assign attribute on non-namespace object");
      }
      ns->dict().Set(Value::String(target.attr), value);
      return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

absl::Status Interpreter::ExecOne(const Stmt& s) {
  line_ = s.line;
  switch (s.kind) {
    case StmtKind::kData: return Emit(s.text);
    case StmtKind::kPrint: {
      ASSIGN_OR_RETURN(Value v, Eval(*s.expr));
      return Emit(v.ToString());
    }
    case StmtKind::kIf:
      for (const auto& [cond, body] : s.branches) {
        if (cond != nullptr) {
          ASSIGN_OR_RETURN(Value c, Eval(*cond));
          if (!c.Truthy()) continue;
        }
        return Exec(body);
      }
      return absl::OkStatus();
    case StmtKind::kFor: return ExecFor(s);
    case StmtKind::kSet: {
      ASSIGN_OR_RETURN(Value v, Eval(*s.expr));
      line_ = s.line;
      return Assign(s.target, v);
    }
    case StmtKind::kSetBlock: {
      ASSIGN_OR_RETURN(std::string text, Capture(s.body));
      Value v = Value::String(std::move(text));
      if (s.expr != nullptr) {
        const Value* saved = block_value_;
        block_value_ = &v;
        auto r = Eval(*s.expr);
        block_value_ = saved;
        if (!r.ok()) return r.status();
        v = *std::move(r);
      }
      line_ = s.line;
      return Assign(s.target, v);
    }
    case StmtKind::kMacro:
      scope_->vars[s.name] = DefineMacro(s.name, &s.params, &s.body, scope_);
      return absl::OkStatus();
    case StmtKind::kCallBlock: return ExecCallBlock(s);
    case StmtKind::kFilterBlock: {
      ASSIGN_OR_RETURN(std::string text, Capture(s.body));
      Value v = Value::String(std::move(text));
      const Value* saved = block_value_;
      block_value_ = &v;
      auto r = Eval(*s.expr);
      block_value_ = saved;
      if (!r.ok()) return r.status();
      return Emit(r->ToString());
    }
    case StmtKind::kWith: {
      std::vector<Value> values;
      for (const auto& e : s.with_values) {
        ASSIGN_OR_RETURN(Value v, Eval(*e));
        values.push_back(std::move(v));
      }
      Scope inner(scope_);
      scope_ = &inner;
      absl::Status st;
      for (size_t i = 0; i < values.size() && st.ok(); ++i) st = Assign(s.with_targets[i], values[i]);
      if (st.ok()) st = Exec(s.body);
      scope_ = inner.parent;
      return st;
    }
    case StmtKind::kBreak: flow_ = Flow::kBreak; return absl::OkStatus();
    case StmtKind::kContinue: flow_ = Flow::kContinue; return absl::OkStatus();
    case StmtKind::kGeneration: return Exec(s.body);
  }
  return absl::OkStatus();
}

absl::Status Interpreter::ExecFor(const Stmt& s) {
  ASSIGN_OR_RETURN(Value iterable, Eval(*s.expr));
  line_ = s.line;
  if (iterable.is_none() || iterable.is_number() || iterable.is_callable() || iterable.is_namespace()) {
    return Error(absl::StrCat("'", iterable.TypeName(), "' object is not iterable"));
  }
  ASSIGN_OR_RETURN(std::vector<Value> items, iterable.Iterate());
  Scope loop_scope(scope_);
  scope_ = &loop_scope;
  absl::Status status;
  if (s.condition != nullptr) {
    std::vector<Value> kept;
    for (const Value& item : items) {
      status = Assign(s.target, item);
      if (!status.ok()) break;
      auto c = Eval(*s.condition);
      if (!c.ok()) {
        status = c.status();
        break;
      }
      if (c->Truthy()) kept.push_back(item);
    }
    items = std::move(kept);
  }
  const int64_t n = static_cast<int64_t>(items.size());
  // loop.changed(*values): true when its arguments differ from its last
  // call's in this loop (the first call: true).
  auto last_changed = std::make_shared<std::optional<std::vector<Value>>>();
  for (int64_t i = 0; i < n && status.ok(); ++i) {
    if (++iterations_ > limits_.max_loop_iterations) {
      status = absl::ResourceExhaustedError(
          absl::StrCat("line ", s.line, ": more than ", limits_.max_loop_iterations, " loop iterations"));
      break;
    }
    status = Assign(s.target, items[i]);
    if (!status.ok()) break;
    auto loop = std::make_shared<ValueDict>();
    loop->entries.reserve(14);
    auto put = [&](const char* key, Value v) { loop->entries.emplace_back(Value::String(key), std::move(v)); };
    put("index", Value::Int(i + 1));
    put("index0", Value::Int(i));
    put("revindex", Value::Int(n - i));
    put("revindex0", Value::Int(n - i - 1));
    put("first", Value::Bool(i == 0));
    put("last", Value::Bool(i == n - 1));
    put("length", Value::Int(n));
    put("depth", Value::Int(1));
    put("depth0", Value::Int(0));
    put("previtem", i > 0 ? items[i - 1] : Value::Undefined("'loop.previtem' is undefined"));
    put("nextitem", i + 1 < n ? items[i + 1] : Value::Undefined("'loop.nextitem' is undefined"));
    put("cycle", Value::Function("loop.cycle", [i](Interpreter& in, CallArgs& a) -> absl::StatusOr<Value> {
          if (a.args.empty()) return in.Error("no items for cycling given");
          return a.args[static_cast<size_t>(i) % a.args.size()];
        }));
    put("changed", Value::Function("loop.changed", [last_changed](Interpreter&, CallArgs& a) -> absl::StatusOr<Value> {
          const std::vector<Value>& now = a.args;
          bool same = last_changed->has_value() && (*last_changed)->size() == now.size();
          for (size_t k = 0; same && k < now.size(); ++k) same = (**last_changed)[k].Equals(now[k]);
          if (!same) *last_changed = now;
          return Value::Bool(!same);
        }));
    loop_scope.vars["loop"] = Value::Dict(std::move(loop));
    status = Exec(s.body);
    if (flow_ == Flow::kBreak) {
      flow_ = Flow::kNormal;
      break;
    }
    flow_ = Flow::kNormal;
  }
  if (status.ok() && n == 0 && !s.else_body.empty()) {
    loop_scope.vars.erase("loop");
    status = Exec(s.else_body);
  }
  scope_ = loop_scope.parent;
  return status;
}

Value Interpreter::DefineMacro(const std::string& name, const MacroParams* params, const StmtList* body,
                               Scope* closure) {
  std::shared_ptr<bool> alive = closure->alive;
  return Value::Function(name, [name, params, body, closure, alive](Interpreter& in,
                                                                    CallArgs& args) -> absl::StatusOr<Value> {
    if (!*alive) return in.Error(absl::StrCat("macro '", name, "' called after its scope ended"));
    return in.CallMacro(name, *params, *body, closure, args);
  });
}

absl::StatusOr<Value> Interpreter::CallMacro(const std::string& name, const MacroParams& params,
                                             const StmtList& body, Scope* closure, CallArgs& args) {
  if (call_depth_ >= limits_.max_call_depth) {
    return absl::ResourceExhaustedError(
        absl::StrCat("line ", line_, ": macro calls nested deeper than ", limits_.max_call_depth));
  }
  Scope frame(closure);
  const size_t n = params.names.size();
  const size_t first_default = n - params.defaults.size();
  std::vector<bool> given(n, false);
  std::vector<Value> varargs;
  for (size_t i = 0; i < args.args.size(); ++i) {
    if (i < n) {
      frame.vars[params.names[i]] = args.args[i];
      given[i] = true;
    } else {
      varargs.push_back(args.args[i]);
    }
  }
  auto kwargs = std::make_shared<ValueDict>();
  for (auto& [key, value] : args.kwargs) {
    if (key == "caller") {
      frame.vars["caller"] = value;
      continue;
    }
    bool matched = false;
    for (size_t i = 0; i < n; ++i) {
      if (params.names[i] == key) {
        if (given[i]) return Error(absl::StrCat("macro '", name, "' got multiple values for argument '", key, "'"));
        frame.vars[key] = value;
        given[i] = matched = true;
      }
    }
    if (!matched) kwargs->Set(Value::String(key), value);
  }
  frame.vars["varargs"] = Value::List(std::move(varargs), /*is_tuple=*/true);
  frame.vars["kwargs"] = Value::Dict(std::move(kwargs));
  Scope* saved_scope = scope_;
  Flow saved_flow = flow_;
  int saved_line = line_;
  scope_ = &frame;
  ++call_depth_;
  absl::Status status;
  for (size_t i = 0; i < n && status.ok(); ++i) {
    if (given[i]) continue;
    if (i >= first_default) {
      auto d = Eval(*params.defaults[i - first_default]);
      if (!d.ok()) {
        status = d.status();
        break;
      }
      frame.vars[params.names[i]] = *std::move(d);
    } else {
      frame.vars[params.names[i]] = Value::Undefined(absl::StrCat("parameter '", params.names[i], "' was not provided"));
    }
  }
  absl::StatusOr<std::string> text = status.ok() ? Capture(body) : absl::StatusOr<std::string>(status);
  --call_depth_;
  scope_ = saved_scope;
  flow_ = saved_flow;
  line_ = saved_line;
  if (!text.ok()) return text.status();
  return Value::String(*std::move(text));
}

absl::Status Interpreter::ExecCallBlock(const Stmt& s) {
  const Expr& call = *s.expr;
  ASSIGN_OR_RETURN(Value callee, Eval(*call.args[0]));
  CallArgs args;
  for (size_t i = 1; i < call.args.size(); ++i) {
    ASSIGN_OR_RETURN(Value v, Eval(*call.args[i]));
    args.args.push_back(std::move(v));
  }
  for (const auto& [key, e] : call.kwargs) {
    ASSIGN_OR_RETURN(Value v, Eval(*e));
    args.kwargs.emplace_back(key, std::move(v));
  }
  args.kwargs.emplace_back("caller", DefineMacro("caller", &s.params, &s.body, scope_));
  line_ = s.line;
  ASSIGN_OR_RETURN(Value result, CallValue(callee, args));
  return Emit(result.ToString());
}

absl::StatusOr<Value> Interpreter::CallValue(const Value& callee, CallArgs& args) {
  if (callee.is_undefined()) return UndefinedError(*this, callee);
  if (!callee.is_callable()) return Error(absl::StrCat("'", callee.TypeName(), "' object is not callable"));
  return callee.callable().fn(*this, args);
}

absl::StatusOr<Value> Interpreter::ApplyFilter(const std::string& name, const Value& input, CallArgs& args) {
  if (!IsFilter(name)) return Error(absl::StrCat("no filter named '", name, "'"));
  return CallFilter(*this, name, input, args);
}

absl::StatusOr<bool> Interpreter::ApplyTest(const std::string& name, const Value& input, CallArgs& args) {
  if (!IsTest(name)) return Error(absl::StrCat("no test named '", name, "'"));
  return CallTest(*this, name, input, args);
}

absl::StatusOr<Value> Interpreter::Lookup(const Expr& e) {
  const Value* v = scope_->Lookup(e.name);
  if (v != nullptr) return *v;
  return Value::Undefined(absl::StrCat("'", e.name, "' is undefined"));
}

// Python's str % args for the conversions %s %r %d %i and %%.
absl::StatusOr<Value> Interpreter::FormatPercent(const std::string& format, const Value& args) {
  std::vector<Value> values;
  if (args.is_list() && args.is_tuple()) {
    values = args.items();
  } else {
    values.push_back(args);
  }
  std::string out;
  size_t next = 0;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out.push_back(format[i]);
      continue;
    }
    if (i + 1 >= format.size()) return Error("incomplete format");
    char c = format[++i];
    if (c == '%') {
      out.push_back('%');
      continue;
    }
    if (next >= values.size()) return Error("not enough arguments for format string");
    const Value& v = values[next++];
    if (c == 's') {
      out += v.ToString();
    } else if (c == 'r') {
      out += v.Repr();
    } else if (c == 'd' || c == 'i') {
      if (!v.is_number()) return Error(absl::StrCat("%", std::string(1, c), " format: a real number is required, not ", v.TypeName()));
      absl::StatusOr<Value> i = TruncateToInt(v);
      if (!i.ok()) return AtLine(i.status());
      out += i->Repr();
    } else {
      return Error(absl::StrCat("unsupported format character '", std::string(1, c), "'"));
    }
    RETURN_IF_ERROR(CheckStringSize(out.size()));
  }
  if (next < values.size() && !(values.size() == 1 && values[0].is_dict())) {
    return Error("not all arguments converted during string formatting");
  }
  return Value::String(std::move(out));
}

absl::StatusOr<Value> Interpreter::EvalBinary(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string s = a.ToString();
    std::string t = b.ToString();
    RETURN_IF_ERROR(CheckStringSize(s.size() + t.size()));
    return Value::String(s + t);
  }
  if (a.is_undefined()) return UndefinedError(*this, a);
  if (b.is_undefined()) return UndefinedError(*this, b);
  auto type_error = [&]() {
    return Error(absl::StrCat("unsupported operand type(s) for ", op, ": '", a.TypeName(), "' and '", b.TypeName(),
                              "'"));
  };
  if (a.is_number() && b.is_number()) {
    absl::StatusOr<Value> r = Arithmetic(op, a, b);
    if (!r.ok()) return AtLine(r.status());
    return r;
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      RETURN_IF_ERROR(CheckStringSize(a.str().size() + b.str().size()));
      return Value::String(a.str() + b.str());
    }
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      RETURN_IF_ERROR(CheckListSize(a.items().size() + b.items().size()));
      std::vector<Value> items = a.items();
      items.insert(items.end(), b.items().begin(), b.items().end());
      return Value::List(std::move(items), a.is_tuple());
    }
    if (a.is_string()) {
      return Error(absl::StrCat("can only concatenate str (not \"", b.TypeName(), "\") to str"));
    }
    if (a.is_list() && !a.is_tuple()) {
      return Error(absl::StrCat("can only concatenate list (not \"", b.TypeName(), "\") to list"));
    }
    return type_error();
  }
  if (op == "*") {
    const Value* seq = a.is_integral() ? &b : &a;
    const Value* count = a.is_integral() ? &a : &b;
    if (!count->is_integral() || !(seq->is_string() || seq->is_list())) return type_error();
    if (count->is_big_int()) return Error("cannot fit 'int' into an index-sized integer");
    int64_t times = std::max<int64_t>(0, count->int_value());
    if (seq->is_string()) {
      if (times > 0 && seq->str().size() > limits_.max_output_bytes / static_cast<uint64_t>(times)) {
        return CheckStringSize(limits_.max_output_bytes + 1);
      }
      std::string s;
      for (int64_t i = 0; i < times; ++i) s += seq->str();
      return Value::String(std::move(s));
    }
    if (times > 0 && seq->items().size() > limits_.max_list_items / static_cast<uint64_t>(times)) {
      return CheckListSize(limits_.max_list_items + 1);
    }
    std::vector<Value> items;
    for (int64_t i = 0; i < times; ++i) items.insert(items.end(), seq->items().begin(), seq->items().end());
    return Value::List(std::move(items), seq->is_tuple());
  }
  if (op == "%" && a.is_string()) return FormatPercent(a.str(), b);
  return type_error();
}

absl::StatusOr<bool> Interpreter::Compare(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return a.Equals(b);
  if (op == "!=") return !a.Equals(b);
  if (op == "in" || op == "not in") {
    auto r = Contains(b, a);
    if (!r.ok()) return Error(std::string(r.status().message()));
    return op == "in" ? *r : !*r;
  }
  if (a.is_undefined()) return UndefinedError(*this, a);
  if (b.is_undefined()) return UndefinedError(*this, b);
  absl::StatusOr<bool> r = op == "<" || op == ">=" ? a.Less(b) : b.Less(a);
  if (!r.ok()) {
    std::string message(r.status().message());
    size_t p = message.find("'<'");
    if (p != std::string::npos) message.replace(p, 3, "'" + op + "'");
    return Error(message);
  }
  if (op == "<" || op == ">") return *r;
  // a <= b is not (b < a); a >= b is not (a < b).
  return !*r;
}

absl::StatusOr<Value> Interpreter::EvalSlice(const Value& obj, const Expr& e) {
  int64_t bound[3] = {0, 0, 1};
  bool given[3] = {false, false, false};
  for (int k = 0; k < 3; ++k) {
    if (e.args[k + 1] == nullptr) continue;
    ASSIGN_OR_RETURN(Value v, Eval(*e.args[k + 1]));
    if (v.is_none()) continue;
    if (!v.is_integral()) return Error("slice indices must be integers or None");
    bound[k] = v.int_value();
    given[k] = true;
  }
  if (obj.is_undefined()) return UndefinedError(*this, obj);
  if (!obj.is_string() && !obj.is_list()) return Value::Undefined(absl::StrCat("'", obj.TypeName(), "' object is not subscriptable"));
  int64_t step = given[2] ? bound[2] : 1;
  if (step == 0) return Error("slice step cannot be zero");
  std::vector<size_t> offsets;
  int64_t len;
  if (obj.is_string()) {
    offsets = CodePointOffsets(obj.str());
    len = static_cast<int64_t>(offsets.size()) - 1;
  } else {
    len = static_cast<int64_t>(obj.items().size());
  }
  auto clamp = [&](int64_t v, bool has, int64_t def, int64_t lo, int64_t hi) {
    if (!has) return def;
    if (v < 0) v += len;
    return std::max(lo, std::min(hi, v));
  };
  int64_t start, stop;
  if (step > 0) {
    start = clamp(bound[0], given[0], 0, 0, len);
    stop = clamp(bound[1], given[1], len, 0, len);
  } else {
    start = clamp(bound[0], given[0], len - 1, -1, len - 1);
    stop = clamp(bound[1], given[1], -1, -1, len - 1);
  }
  std::vector<int64_t> picks;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) picks.push_back(i);
  if (obj.is_string()) {
    std::string s;
    for (int64_t i : picks) s.append(obj.str(), offsets[i], offsets[i + 1] - offsets[i]);
    return Value::String(std::move(s));
  }
  std::vector<Value> items;
  items.reserve(picks.size());
  for (int64_t i : picks) items.push_back(obj.items()[i]);
  return Value::List(std::move(items), obj.is_tuple());
}

absl::StatusOr<Value> Interpreter::Eval(const Expr& e) {
  if (e.line > 0) line_ = e.line;
  switch (e.kind) {
    case ExprKind::kLiteral: return e.literal;
    case ExprKind::kName: return Lookup(e);
    case ExprKind::kBlockValue: return block_value_ != nullptr ? *block_value_ : Value();
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::vector<Value> items;
      items.reserve(e.args.size());
      for (const auto& a : e.args) {
        ASSIGN_OR_RETURN(Value v, Eval(*a));
        items.push_back(std::move(v));
      }
      return Value::List(std::move(items), e.kind == ExprKind::kTuple);
    }
    case ExprKind::kDict: {
      auto d = std::make_shared<ValueDict>();
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        ASSIGN_OR_RETURN(Value k, Eval(*e.args[i]));
        ASSIGN_OR_RETURN(Value v, Eval(*e.args[i + 1]));
        if (k.is_list() && !k.is_tuple()) return Error("unhashable type: 'list'");
        if (k.is_dict()) return Error("unhashable type: 'dict'");
        d->Set(std::move(k), std::move(v));
      }
      return Value::Dict(std::move(d));
    }
    case ExprKind::kGetAttr: {
      ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0]));
      if (obj.is_undefined()) return UndefinedError(*this, obj);
      return GetAttr(obj, e.name);
    }
    case ExprKind::kGetItem: {
      ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0]));
      ASSIGN_OR_RETURN(Value key, Eval(*e.args[1]));
      if (obj.is_undefined()) return UndefinedError(*this, obj);
      return GetItem(obj, key);
    }
    case ExprKind::kSlice: {
      ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0]));
      return EvalSlice(obj, e);
    }
    case ExprKind::kCall:
    case ExprKind::kFilter:
    case ExprKind::kTest: {
      Value callee;
      if (e.kind == ExprKind::kCall) {
        ASSIGN_OR_RETURN(callee, Eval(*e.args[0]));
      }
      CallArgs args;
      args.args.reserve(e.args.size());
      Value input;
      for (size_t i = (e.kind == ExprKind::kCall ? 1 : 0); i < e.args.size(); ++i) {
        ASSIGN_OR_RETURN(Value v, Eval(*e.args[i]));
        if (e.kind != ExprKind::kCall && i == 0) {
          input = std::move(v);
        } else {
          args.args.push_back(std::move(v));
        }
      }
      for (const auto& [key, ke] : e.kwargs) {
        ASSIGN_OR_RETURN(Value v, Eval(*ke));
        args.kwargs.emplace_back(key, std::move(v));
      }
      line_ = e.line;
      if (e.kind == ExprKind::kCall) return CallValue(callee, args);
      if (e.kind == ExprKind::kFilter) return CallFilter(*this, e.name, input, args);
      ASSIGN_OR_RETURN(bool r, CallTest(*this, e.name, input, args));
      return Value::Bool(r != e.negated);
    }
    case ExprKind::kNot: {
      ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
      return Value::Bool(!v.Truthy());
    }
    case ExprKind::kNeg:
    case ExprKind::kPos: {
      ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
      if (v.is_undefined()) return UndefinedError(*this, v);
      if (!v.is_number()) {
        return Error(absl::StrCat("bad operand type for unary ", e.kind == ExprKind::kNeg ? "-" : "+", ": '",
                                  v.TypeName(), "'"));
      }
      if (e.kind == ExprKind::kPos) return v.is_bool() ? Value::Int(v.int_value()) : v;
      absl::StatusOr<Value> r = Negate(v);
      if (!r.ok()) return AtLine(r.status());
      return r;
    }
    case ExprKind::kBinary: {
      ASSIGN_OR_RETURN(Value a, Eval(*e.args[0]));
      ASSIGN_OR_RETURN(Value b, Eval(*e.args[1]));
      line_ = e.line;
      return EvalBinary(e.name, a, b);
    }
    case ExprKind::kAnd:
    case ExprKind::kOr: {
      ASSIGN_OR_RETURN(Value a, Eval(*e.args[0]));
      if (a.Truthy() == (e.kind == ExprKind::kOr)) return a;
      return Eval(*e.args[1]);
    }
    case ExprKind::kCompare: {
      ASSIGN_OR_RETURN(Value left, Eval(*e.args[0]));
      for (size_t i = 0; i < e.ops.size(); ++i) {
        ASSIGN_OR_RETURN(Value right, Eval(*e.args[i + 1]));
        line_ = e.line;
        ASSIGN_OR_RETURN(bool ok, Compare(e.ops[i], left, right));
        if (!ok) return Value::Bool(false);
        left = std::move(right);
      }
      return Value::Bool(true);
    }
    case ExprKind::kCondExpr: {
      ASSIGN_OR_RETURN(Value c, Eval(*e.args[0]));
      if (c.Truthy()) return Eval(*e.args[1]);
      if (e.args[2] == nullptr) return Value::Undefined("the inline if-expression evaluated to false and no else section was defined");
      return Eval(*e.args[2]);
    }
  }
  return Error("unknown expression");
}

}  // namespace jinja_internal
}  // namespace kvcast
