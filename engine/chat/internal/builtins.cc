#include "engine/chat/internal/builtins.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <ctime>
#include <initializer_list>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "engine/chat/internal/numbers.h"
#include "engine/chat/internal/text.h"

namespace kvcast {
namespace jinja_internal {
namespace {

constexpr int64_t kMaxRange = 100000;  // jinja2.sandbox.MAX_RANGE

bool Has(const Value& v) { return !v.is_undefined(); }

// Binds positional and keyword arguments to parameter names, as a Python
// signature would; absent parameters are left undefined.
absl::StatusOr<std::vector<Value>> Bind(Interpreter& in, absl::string_view fn, const CallArgs& a,
                                        std::initializer_list<absl::string_view> names) {
  std::vector<absl::string_view> n(names);
  if (a.args.size() > n.size()) {
    return in.Error(absl::StrCat(fn, "() takes at most ", n.size(), " argument(s) (", a.args.size(), " given)"));
  }
  std::vector<Value> out(n.size());
  std::vector<bool> given(n.size(), false);
  for (size_t i = 0; i < a.args.size(); ++i) {
    out[i] = a.args[i];
    given[i] = true;
  }
  for (const auto& [key, value] : a.kwargs) {
    auto it = std::find(n.begin(), n.end(), key);
    if (it == n.end()) return in.Error(absl::StrCat(fn, "() got an unexpected keyword argument '", key, "'"));
    size_t i = static_cast<size_t>(it - n.begin());
    if (given[i]) return in.Error(absl::StrCat(fn, "() got multiple values for argument '", key, "'"));
    out[i] = value;
    given[i] = true;
  }
  return out;
}

absl::Status NeedString(Interpreter& in, absl::string_view fn, const Value& v) {
  if (v.is_undefined()) return UndefinedError(in, v);
  if (!v.is_string()) return in.Error(absl::StrCat(fn, ": expected a string, got ", v.TypeName()));
  return absl::OkStatus();
}

absl::Status NeedIntegral(Interpreter& in, absl::string_view fn, const Value& v) {
  if (v.is_undefined()) return UndefinedError(in, v);
  if (!v.is_integral()) return in.Error(absl::StrCat(fn, ": expected an integer, got ", v.TypeName()));
  return absl::OkStatus();
}

// An int argument that Python takes as a C ssize_t.
absl::StatusOr<int64_t> NeedInt(Interpreter& in, absl::string_view fn, const Value& v) {
  RETURN_IF_ERROR(NeedIntegral(in, fn, v));
  if (v.is_big_int()) return in.Error("Python int too large to convert to C ssize_t");
  return v.int_value();
}

std::string ObjectDescription(const Value& obj) {
  if (obj.is_none()) return "None";
  return absl::StrCat(obj.TypeName(), " object");
}

Value MissingAttr(const Value& obj, const std::string& name) {
  return Value::Undefined(absl::StrCat("'", ObjectDescription(obj), "' has no attribute '", name, "'"));
}

// ---- Methods ------------------------------------------------------------

using Method = absl::StatusOr<Value> (*)(Interpreter&, const Value& self, CallArgs&);

absl::StatusOr<Value> StrStrip(Interpreter& in, const Value& self, CallArgs& a, int which, absl::string_view fn) {
  ASSIGN_OR_RETURN(std::vector<Value> p, Bind(in, fn, a, {"chars"}));
  if (Has(p[0]) && !p[0].is_none()) {
    RETURN_IF_ERROR(NeedString(in, fn, p[0]));
    return Value::String(PyStrip(self.str(), &p[0].str(), which));
  }
  return Value::String(PyStrip(self.str(), nullptr, which));
}

absl::StatusOr<Value> StrAffix(Interpreter& in, const Value& self, CallArgs& a, bool prefix) {
  ASSIGN_OR_RETURN(std::vector<Value> p, Bind(in, prefix ? "startswith" : "endswith", a, {"affix"}));
  std::vector<Value> options;
  if (p[0].is_list() && p[0].is_tuple()) {
    options = p[0].items();
  } else {
    options.push_back(p[0]);
  }
  for (const Value& o : options) {
    RETURN_IF_ERROR(NeedString(in, prefix ? "startswith" : "endswith", o));
    const std::string& s = self.str();
    const std::string& x = o.str();
    if (x.size() <= s.size() &&
        (prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0)) {
      return Value::Bool(true);
    }
  }
  return Value::Bool(false);
}

absl::StatusOr<Value> CallStrMethod(Interpreter& in, const std::string& name, const Value& self, CallArgs& a) {
  const std::string& s = self.str();
  if (name == "strip") return StrStrip(in, self, a, 3, name);
  if (name == "lstrip") return StrStrip(in, self, a, 1, name);
  if (name == "rstrip") return StrStrip(in, self, a, 2, name);
  if (name == "startswith") return StrAffix(in, self, a, true);
  if (name == "endswith") return StrAffix(in, self, a, false);
  if (name == "upper") return Value::String(PyUpper(s));
  if (name == "lower") return Value::String(PyLower(s));
  if (name == "title") return Value::String(PyTitle(s));
  if (name == "capitalize") return Value::String(PyCapitalize(s));
  if (name == "split" || name == "rsplit") {
    ASSIGN_OR_RETURN(std::vector<Value> p, Bind(in, name, a, {"sep", "maxsplit"}));
    int64_t maxsplit = -1;
    if (Has(p[1])) {
      ASSIGN_OR_RETURN(maxsplit, NeedInt(in, name, p[1]));
    }
    auto split = name == "rsplit" ? PyRSplit : PySplit;
    std::vector<std::string> parts;
    if (Has(p[0]) && !p[0].is_none()) {
      RETURN_IF_ERROR(NeedString(in, name, p[0]));
      if (p[0].str().empty()) return in.Error("empty separator");
      parts = split(s, &p[0].str(), maxsplit);
    } else {
      parts = split(s, nullptr, maxsplit);
    }
    std::vector<Value> items;
    for (auto& part : parts) items.push_back(Value::String(std::move(part)));
    return Value::List(std::move(items));
  }
  if (name == "replace") {
    ASSIGN_OR_RETURN(std::vector<Value> p, Bind(in, name, a, {"old", "new", "count"}));
    RETURN_IF_ERROR(NeedString(in, name, p[0]));
    RETURN_IF_ERROR(NeedString(in, name, p[1]));
    int64_t count = -1;
    if (Has(p[2])) {
      ASSIGN_OR_RETURN(count, NeedInt(in, name, p[2]));
    }
    std::string r = PyReplace(s, p[0].str(), p[1].str(), count);
    RETURN_IF_ERROR(in.CheckStringSize(r.size()));
    return Value::String(std::move(r));
  }
  if (name == "find" || name == "count") {
    ASSIGN_OR_RETURN(std::vector<Value> p, Bind(in, name, a, {"sub"}));
    RETURN_IF_ERROR(NeedString(in, name, p[0]));
    const std::string& sub = p[0].str();
    if (name == "find") {
      size_t pos = s.find(sub);
      if (pos == std::string::npos) return Value::Int(-1);
      return Value::Int(static_cast<int64_t>(CodePointOffsets(s.substr(0, pos)).size()) - 1);
    }
    if (sub.empty()) return Value::Int(*Value::String(s).Length() + 1);
    int64_t n = 0;
    for (size_t pos = s.find(sub); pos != std::string::npos; pos = s.find(sub, pos + sub.size())) ++n;
    return Value::Int(n);
  }
  if (name == "rfind" || name == "index" || name == "rindex") {
    ASSIGN_OR_RETURN(std::vector<Value> p, Bind(in, name, a, {"sub"}));
    RETURN_IF_ERROR(NeedString(in, name, p[0]));
    const size_t pos = name == "index" ? s.find(p[0].str()) : s.rfind(p[0].str());
    if (pos == std::string::npos) {
      if (name == "rfind") return Value::Int(-1);
      return in.Error("substring not found");
    }
    return Value::Int(static_cast<int64_t>(CodePointOffsets(s.substr(0, pos)).size()) - 1);
  }
  if (name == "removeprefix" || name == "removesuffix") {
    ASSIGN_OR_RETURN(std::vector<Value> p, Bind(in, name, a, {"affix"}));
    RETURN_IF_ERROR(NeedString(in, name, p[0]));
    const std::string& x = p[0].str();
    if (x.size() > s.size()) return self;
    if (name == "removeprefix" && s.compare(0, x.size(), x) == 0) return Value::String(s.substr(x.size()));
    if (name == "removesuffix" && s.compare(s.size() - x.size(), x.size(), x) == 0) {
      return Value::String(s.substr(0, s.size() - x.size()));
    }
    return self;
  }
  if (name == "join") {
    ASSIGN_OR_RETURN(std::vector<Value> p, Bind(in, name, a, {"iterable"}));
    ASSIGN_OR_RETURN(std::vector<Value> items, p[0].Iterate());
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string()) return in.Error(absl::StrCat("sequence item ", i, ": expected str instance"));
      if (i > 0) out += s;
      out += items[i].str();
      RETURN_IF_ERROR(in.CheckStringSize(out.size()));
    }
    return Value::String(std::move(out));
  }
  if (name == "splitlines") {
    std::vector<Value> items;
    for (auto& line : PySplitLines(s)) items.push_back(Value::String(std::move(line)));
    return Value::List(std::move(items));
  }
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" || name == "islower" ||
      name == "isupper") {
    std::vector<uint32_t> cps = DecodeUtf8(s);
    if (name == "islower" || name == "isupper") {
      bool any_cased = false;
      for (uint32_t cp : cps) {
        if (!IsCased(cp)) continue;
        any_cased = true;
        if ((name == "islower") != (ToLowerCp(cp) == cp)) return Value::Bool(false);
      }
      return Value::Bool(any_cased);
    }
    if (cps.empty()) return Value::Bool(false);
    for (uint32_t cp : cps) {
      bool digit = cp >= '0' && cp <= '9';
      bool alpha = (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= 0x80 && IsCased(cp));
      bool ok = name == "isdigit" ? digit : name == "isalpha" ? alpha : name == "isalnum" ? digit || alpha
                                                                                             : IsPySpace(cp);
      if (!ok) return Value::Bool(false);
    }
    return Value::Bool(true);
  }
  return in.Error(absl::StrCat("'str' object has no attribute '", name, "'"));
}

absl::StatusOr<Value> CallDictMethod(Interpreter& in, const std::string& name, const Value& self, CallArgs& a) {
  const ValueDict& d = self.dict();
  if (name == "get") {
    ASSIGN_OR_RETURN(std::vector<Value> p, Bind(in, name, a, {"key", "default"}));
    const Value* v = d.Find(p[0]);
    if (v != nullptr) return *v;
    return Has(p[1]) ? p[1] : Value::None();
  }
  ASSIGN_OR_RETURN(std::vector<Value> p, Bind(in, name, a, {}));
  std::vector<Value> items;
  items.reserve(d.entries.size());
  for (const auto& [k, v] : d.entries) {
    if (name == "keys") {
      items.push_back(k);
    } else if (name == "values") {
      items.push_back(v);
    } else {
      items.push_back(Value::List({k, v}, /*is_tuple=*/true));
    }
  }
  return Value::List(std::move(items));
}

absl::StatusOr<Value> CallListMethod(Interpreter& in, const std::string& name, const Value& self, CallArgs& a) {
  ASSIGN_OR_RETURN(std::vector<Value> p, Bind(in, name, a, {"value"}));
  int64_t n = 0;
  for (size_t i = 0; i < self.items().size(); ++i) {
    if (!self.items()[i].Equals(p[0])) continue;
    if (name == "index") return Value::Int(static_cast<int64_t>(i));
    ++n;
  }
  if (name == "index") return in.Error(absl::StrCat(p[0].Repr(), " is not in list"));
  return Value::Int(n);
}

bool IsStrMethod(const std::string& n) {
  static const char* const kNames[] = {"strip", "lstrip", "rstrip", "startswith", "endswith", "upper", "lower",
                                       "title", "capitalize", "split", "rsplit", "replace", "find", "count",
                                       "join", "splitlines", "isdigit", "isalpha", "isalnum", "isspace",
                                       "islower", "isupper", "rfind", "index", "rindex", "removeprefix",
                                       "removesuffix"};
  for (const char* k : kNames) {
    if (n == k) return true;
  }
  return false;
}

Value BoundMethod(const Value& self, const std::string& name,
                  absl::StatusOr<Value> (*fn)(Interpreter&, const std::string&, const Value&, CallArgs&)) {
  return Value::Function(name, [self, name, fn](Interpreter& in, CallArgs& a) { return fn(in, name, self, a); });
}

}  // namespace

Value GetAttr(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case ValueKind::kString:
      if (IsStrMethod(name)) return BoundMethod(obj, name, CallStrMethod);
      break;
    case ValueKind::kDict:
      if (!obj.is_namespace() && (name == "get" || name == "items" || name == "keys" || name == "values")) {
        return BoundMethod(obj, name, CallDictMethod);
      }
      if (const Value* v = obj.dict().FindString(name)) return *v;
      break;
    case ValueKind::kList:
      if (name == "index" || name == "count") return BoundMethod(obj, name, CallListMethod);
      break;
    default: break;
  }
  return MissingAttr(obj, name);
}

Value GetItem(const Value& obj, const Value& key) {
  if (obj.is_dict()) {
    if (const Value* v = obj.dict().Find(key)) return *v;
  } else if ((obj.is_list() || obj.is_string()) && key.is_integral()) {
    int64_t len = *obj.Length();
    int64_t i = key.int_value();
    if (i < 0) i += len;
    if (i >= 0 && i < len) {
      if (obj.is_list()) return obj.items()[static_cast<size_t>(i)];
      std::vector<size_t> off = CodePointOffsets(obj.str());
      return Value::String(obj.str().substr(off[i], off[i + 1] - off[i]));
    }
    return Value::Undefined(absl::StrCat("'", ObjectDescription(obj), "' has no element ", key.Repr()));
  }
  if (key.is_string()) return GetAttr(obj, key.str());
  return Value::Undefined(absl::StrCat("'", ObjectDescription(obj), "' has no element ", key.Repr()));
}

namespace {

// ---- Tests --------------------------------------------------------------

using TestFn = absl::StatusOr<bool> (*)(Interpreter&, const Value&, CallArgs&);

absl::StatusOr<Value> Arg0(Interpreter& in, absl::string_view name, CallArgs& a) {
  ASSIGN_OR_RETURN(std::vector<Value> p, Bind(in, name, a, {"other"}));
  return p[0];
}

absl::StatusOr<bool> CompareTest(Interpreter& in, const Value& v, CallArgs& a, absl::string_view op) {
  ASSIGN_OR_RETURN(Value other, Arg0(in, op, a));
  if (op == "eq") return v.Equals(other);
  if (op == "ne") return !v.Equals(other);
  if (v.is_undefined()) return UndefinedError(in, v);
  if (other.is_undefined()) return UndefinedError(in, other);
  absl::StatusOr<bool> r = (op == "lt" || op == "ge") ? v.Less(other) : other.Less(v);
  if (!r.ok()) return in.Error(std::string(r.status().message()));
  return (op == "lt" || op == "gt") ? *r : !*r;
}

// v % divisor == want, as jinja2's even, odd and divisibleby test it.
absl::StatusOr<bool> RemainderIs(Interpreter& in, const Value& v, const Value& divisor, int64_t want) {
  if (v.is_undefined()) return UndefinedError(in, v);
  if (!v.is_number()) return in.Error(absl::StrCat("unsupported operand type(s) for %: '", v.TypeName(), "' and 'int'"));
  absl::StatusOr<Value> m = Arithmetic("%", v, divisor);
  if (!m.ok()) return in.AtLine(m.status());
  return m->Equals(Value::Int(want));
}

const absl::flat_hash_map<std::string, TestFn>& Tests() {
  static const auto* tests = new absl::flat_hash_map<std::string, TestFn>{
      {"defined", [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<bool> { return !v.is_undefined(); }},
      {"undefined", [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<bool> { return v.is_undefined(); }},
      {"none", [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<bool> { return v.is_none(); }},
      {"string", [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<bool> { return v.is_string(); }},
      {"mapping",
       [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<bool> { return v.is_dict() && !v.is_namespace(); }},
      {"iterable",
       [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<bool> {
         return v.is_undefined() || v.is_string() || v.is_list() || (v.is_dict() && !v.is_namespace());
       }},
      {"sequence",
       [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<bool> {
         return v.is_undefined() || v.is_string() || v.is_list() || (v.is_dict() && !v.is_namespace());
       }},
      {"number", [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<bool> { return v.is_number(); }},
      {"integer", [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<bool> { return v.is_int(); }},
      {"float", [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<bool> { return v.is_float(); }},
      {"boolean", [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<bool> { return v.is_bool(); }},
      {"true",
       [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<bool> { return v.is_bool() && v.bool_value(); }},
      {"false",
       [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<bool> { return v.is_bool() && !v.bool_value(); }},
      {"callable", [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<bool> { return v.is_callable(); }},
      {"even", [](Interpreter& in, const Value& v, CallArgs&) { return RemainderIs(in, v, Value::Int(2), 0); }},
      {"odd", [](Interpreter& in, const Value& v, CallArgs&) { return RemainderIs(in, v, Value::Int(2), 1); }},
      {"divisibleby",
       [](Interpreter& in, const Value& v, CallArgs& a) -> absl::StatusOr<bool> {
         ASSIGN_OR_RETURN(Value n, Arg0(in, "divisibleby", a));
         RETURN_IF_ERROR(NeedIntegral(in, "divisibleby", n));
         if (!n.Truthy()) return in.Error("integer division or modulo by zero");
         return RemainderIs(in, v, n, 0);
       }},
      {"lower",
       [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<bool> {
         std::string s = v.ToString();
         return PyLower(s) == s && PyUpper(s) != s;
       }},
      {"upper",
       [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<bool> {
         std::string s = v.ToString();
         return PyUpper(s) == s && PyLower(s) != s;
       }},
      {"in",
       [](Interpreter& in, const Value& v, CallArgs& a) -> absl::StatusOr<bool> {
         ASSIGN_OR_RETURN(Value seq, Arg0(in, "in", a));
         auto r = Contains(seq, v);
         if (!r.ok()) return in.Error(std::string(r.status().message()));
         return *r;
       }},
      {"sameas",
       [](Interpreter& in, const Value& v, CallArgs& a) -> absl::StatusOr<bool> {
         ASSIGN_OR_RETURN(Value o, Arg0(in, "sameas", a));
         if (v.kind() != o.kind()) return false;
         if (v.is_list() || v.is_dict() || v.is_callable()) return v.Equals(o) && v.Repr() == o.Repr();
         return v.Equals(o);
       }},
      {"filter",
       [](Interpreter& in, const Value& v, CallArgs&) -> absl::StatusOr<bool> {
         return v.is_string() && IsFilter(v.str());
       }},
      {"test",
       [](Interpreter& in, const Value& v, CallArgs&) -> absl::StatusOr<bool> {
         return v.is_string() && IsTest(v.str());
       }},
      {"eq", [](Interpreter& in, const Value& v, CallArgs& a) { return CompareTest(in, v, a, "eq"); }},
      {"ne", [](Interpreter& in, const Value& v, CallArgs& a) { return CompareTest(in, v, a, "ne"); }},
      {"lt", [](Interpreter& in, const Value& v, CallArgs& a) { return CompareTest(in, v, a, "lt"); }},
      {"le", [](Interpreter& in, const Value& v, CallArgs& a) { return CompareTest(in, v, a, "le"); }},
      {"gt", [](Interpreter& in, const Value& v, CallArgs& a) { return CompareTest(in, v, a, "gt"); }},
      {"ge", [](Interpreter& in, const Value& v, CallArgs& a) { return CompareTest(in, v, a, "ge"); }},
  };
  return *tests;
}

std::string TestAlias(absl::string_view name) {
  if (name == "equalto" || name == "==") return "eq";
  if (name == "!=") return "ne";
  if (name == "lessthan" || name == "<") return "lt";
  if (name == "<=") return "le";
  if (name == "greaterthan" || name == ">") return "gt";
  if (name == ">=") return "ge";
  return std::string(name);
}

}  // namespace

bool IsTest(absl::string_view name) { return Tests().contains(TestAlias(name)); }

absl::StatusOr<bool> CallTest(Interpreter& in, const std::string& name, const Value& input, CallArgs& args) {
  auto it = Tests().find(TestAlias(name));
  if (it == Tests().end()) return in.Error(absl::StrCat("no test named '", name, "'"));
  return it->second(in, input, args);
}

// Filters live in filters.cc; globals below.

void AddGlobals(Scope* scope) {
  scope->vars["range"] = Value::Function("range", [](Interpreter& in, CallArgs& a) -> absl::StatusOr<Value> {
    if (!a.kwargs.empty()) return in.Error("range() takes no keyword arguments");
    if (a.args.empty() || a.args.size() > 3) return in.Error("range expected 1 to 3 arguments");
    BigInt v[3];
    for (size_t i = 0; i < a.args.size(); ++i) {
      RETURN_IF_ERROR(NeedIntegral(in, "range", a.args[i]));
      v[i] = a.args[i].big_int_value();
    }
    const BigInt start = a.args.size() == 1 ? BigInt(0) : v[0];
    const BigInt stop = a.args.size() == 1 ? v[0] : v[1];
    const BigInt step = a.args.size() == 3 ? v[2] : BigInt(1);
    if (step.is_zero()) return in.Error("range() arg 3 must not be zero");
    // The length, ceil((stop - start) / step) or 0, is -floor((start - stop) / step).
    BigInt floor, rest;
    BigInt::DivMod(start - stop, step, &floor, &rest);
    if (Compare(-floor, BigInt(kMaxRange)) > 0) {
      return in.Error("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    }
    const int64_t count = floor.negative() ? *(-floor).ToInt64() : 0;
    std::vector<Value> items;
    items.reserve(count);
    const std::optional<int64_t> first = start.ToInt64(), stride = step.ToInt64();
    if (count > 0 && first && stride && (start + step * BigInt(count - 1)).ToInt64()) {
      // Every item fits int64.
      int64_t x = *first;
      for (int64_t k = 0; k < count; ++k) {
        items.push_back(Value::Int(x));
        if (k + 1 < count) x += *stride;
      }
    } else {
      BigInt x = start;
      for (int64_t k = 0; k < count; ++k, x = x + step) items.push_back(Value::Int(x));
    }
    return Value::List(std::move(items));
  });
  scope->vars["namespace"] = Value::Function("namespace", [](Interpreter& in, CallArgs& a) -> absl::StatusOr<Value> {
    auto d = std::make_shared<ValueDict>();
    d->is_namespace = true;
    for (const Value& init : a.args) {
      if (!init.is_dict()) return in.Error("namespace() takes a mapping and keyword arguments");
      for (const auto& [k, v] : init.dict().entries) d->Set(k, v);
    }
    for (const auto& [k, v] : a.kwargs) d->Set(Value::String(k), v);
    return Value::Dict(std::move(d));
  });
  scope->vars["dict"] = Value::Function("dict", [](Interpreter& in, CallArgs& a) -> absl::StatusOr<Value> {
    auto d = std::make_shared<ValueDict>();
    for (const Value& init : a.args) {
      if (!init.is_dict()) return in.Error("dict() takes a mapping and keyword arguments");
      for (const auto& [k, v] : init.dict().entries) d->Set(k, v);
    }
    for (const auto& [k, v] : a.kwargs) d->Set(Value::String(k), v);
    return Value::Dict(std::move(d));
  });
  // cycler(*items): .next() gives the current item and moves on, .reset()
  // goes back to the first, .current is the item next() would give.
  scope->vars["cycler"] = Value::Function("cycler", [](Interpreter& in, CallArgs& a) -> absl::StatusOr<Value> {
    if (a.args.empty()) return in.Error("at least one item has to be provided");
    auto obj = std::make_shared<ValueDict>();
    obj->is_namespace = true;  // attributes, printed as an object
    auto items = std::make_shared<std::vector<Value>>(a.args);
    auto pos = std::make_shared<size_t>(0);
    std::weak_ptr<ValueDict> self = obj;  // the functions must not own their object
    auto show = [self, items, pos] {
      if (auto o = self.lock()) o->Set(Value::String("current"), (*items)[*pos]);
    };
    obj->Set(Value::String("next"), Value::Function("cycler.next", [items, pos, show](Interpreter&, CallArgs&)
                                                                   -> absl::StatusOr<Value> {
      Value v = (*items)[*pos];
      *pos = (*pos + 1) % items->size();
      show();
      return v;
    }));
    obj->Set(Value::String("reset"), Value::Function("cycler.reset", [pos, show](Interpreter&, CallArgs&)
                                                                     -> absl::StatusOr<Value> {
      *pos = 0;
      show();
      return Value::None();
    }));
    obj->Set(Value::String("current"), (*items)[0]);
    return Value::Dict(std::move(obj));
  });
  // joiner(sep=", "): "" on its first call, `sep` on every later one.
  scope->vars["joiner"] = Value::Function("joiner", [](Interpreter& in, CallArgs& a) -> absl::StatusOr<Value> {
    std::string sep = ", ";
    if (!a.args.empty() || !a.kwargs.empty()) {
      ASSIGN_OR_RETURN(std::vector<Value> p, Bind(in, "joiner", a, {"sep"}));
      sep = p[0].ToString();
    }
    auto used = std::make_shared<bool>(false);
    return Value::Function("joiner", [sep, used](Interpreter&, CallArgs&) -> absl::StatusOr<Value> {
      const bool first = !*used;
      *used = true;
      return Value::String(first ? "" : sep);
    });
  });
  scope->vars["raise_exception"] =
      Value::Function("raise_exception", [](Interpreter& in, CallArgs& a) -> absl::StatusOr<Value> {
        ASSIGN_OR_RETURN(std::vector<Value> p, Bind(in, "raise_exception", a, {"message"}));
        return absl::InvalidArgumentError(p[0].ToString());
      });
  scope->vars["strftime_now"] =
      Value::Function("strftime_now", [](Interpreter& in, CallArgs& a) -> absl::StatusOr<Value> {
        ASSIGN_OR_RETURN(std::vector<Value> p, Bind(in, "strftime_now", a, {"format"}));
        RETURN_IF_ERROR(NeedString(in, "strftime_now", p[0]));
        timespec now{};
        clock_gettime(CLOCK_REALTIME, &now);
        std::tm local{};
        localtime_r(&now.tv_sec, &local);
        return Value::String(PyStrftime(p[0].str(), local, int(now.tv_nsec / 1000)));
      });
}

}  // namespace jinja_internal
}  // namespace kvcast
