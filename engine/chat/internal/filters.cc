// jinja2's filters (the ones chat templates use) and HF's tojson.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "engine/chat/internal/builtins.h"
#include "engine/chat/internal/numbers.h"
#include "engine/chat/internal/text.h"

namespace kvcast {
namespace jinja_internal {
namespace {

bool Has(const Value& v) { return !v.is_undefined(); }

// A numbers.h result with the template line in its error.
template <typename T>
absl::StatusOr<T> Located(Interpreter& in, absl::StatusOr<T> r) {
  if (!r.ok()) return in.AtLine(r.status());
  return r;
}

absl::StatusOr<std::vector<Value>> Bind(Interpreter& in, absl::string_view fn, const CallArgs& a,
                                        std::initializer_list<absl::string_view> names) {
  std::vector<absl::string_view> n(names);
  if (a.args.size() > n.size()) {
    return in.Error(absl::StrCat(fn, "() takes at most ", n.size(), " argument(s) (", a.args.size(), " given)"));
  }
  std::vector<Value> out(n.size());
  for (size_t i = 0; i < a.args.size(); ++i) out[i] = a.args[i];
  for (const auto& [key, value] : a.kwargs) {
    auto it = std::find(n.begin(), n.end(), key);
    if (it == n.end()) return in.Error(absl::StrCat(fn, "() got an unexpected keyword argument '", key, "'"));
    out[static_cast<size_t>(it - n.begin())] = value;
  }
  return out;
}

absl::StatusOr<std::vector<Value>> Items(Interpreter& in, const Value& v) {
  auto r = v.Iterate();
  if (!r.ok()) return in.Error(std::string(r.status().message()));
  return r;
}

absl::StatusOr<std::string> NeedString(Interpreter& in, absl::string_view fn, const Value& v) {
  if (v.is_undefined()) return UndefinedError(in, v);
  if (!v.is_string()) return in.Error(absl::StrCat(fn, ": expected a string, got ", v.TypeName()));
  return v.str();
}

// jinja2's make_attrgetter: "a.b.0" looked up item-first.
Value GetPath(const Value& obj, const Value& attribute) {
  if (attribute.is_integral()) return GetItem(obj, attribute);
  Value cur = obj;
  for (absl::string_view part : absl::StrSplit(attribute.ToString(), '.')) {
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (cur.is_undefined()) return cur;
    cur = digits ? GetItem(cur, Value::Int(std::atoll(std::string(part).c_str())))
                 : GetItem(cur, Value::String(std::string(part)));
  }
  return cur;
}

// A key for case-insensitive comparisons (sort, unique, min, max).
Value FoldKey(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::String(PyLower(v.str()));
  return v;
}

using FilterFn = absl::StatusOr<Value> (*)(Interpreter&, const Value&, CallArgs&);

absl::StatusOr<Value> SelectOrReject(Interpreter& in, const Value& v, CallArgs& a, bool select, bool by_attr) {
  if (!v.Truthy()) return Value::List({});  // Jinja2: None, 0, false give an empty sequence
  ASSIGN_OR_RETURN(std::vector<Value> items, Items(in, v));
  size_t next = 0;
  Value attribute;
  if (by_attr) {
    if (a.args.empty()) return in.Error("missing attribute argument");
    attribute = a.args[next++];
  }
  std::string test;
  if (next < a.args.size()) {
    ASSIGN_OR_RETURN(test, NeedString(in, "select", a.args[next]));
    ++next;
  }
  CallArgs test_args;
  test_args.args.assign(a.args.begin() + static_cast<long>(next), a.args.end());
  test_args.kwargs = a.kwargs;
  std::vector<Value> out;
  for (const Value& item : items) {
    Value subject = by_attr ? GetPath(item, attribute) : item;
    bool pass;
    if (test.empty()) {
      pass = subject.Truthy();
    } else {
      CallArgs copy = test_args;
      ASSIGN_OR_RETURN(pass, in.ApplyTest(test, subject, copy));
    }
    if (pass == select) out.push_back(item);
  }
  return Value::List(std::move(out));
}

// Python's %d, %i, %x, %X and %o of an int, with the flags "-+ 0#", a width
// and a precision (the least number of digits).
std::string FormatInt(const BigInt& v, absl::string_view flags, size_t width, size_t precision, char conv) {
  auto has = [&](char flag) { return flags.find(flag) != absl::string_view::npos; };
  const int base = conv == 'o' ? 8 : conv == 'x' || conv == 'X' ? 16 : 10;
  std::string digits = v.Abs().ToString(base);
  if (conv == 'X') absl::AsciiStrToUpper(&digits);
  if (digits.size() < precision) digits.insert(0, precision - digits.size(), '0');
  std::string prefix = v.negative() ? "-" : has('+') ? "+" : has(' ') ? " " : "";
  if (has('#') && base != 10) prefix += conv == 'o' ? "0o" : conv == 'x' ? "0x" : "0X";
  const size_t length = prefix.size() + digits.size();
  if (length >= width) return prefix + digits;
  if (has('-')) return prefix + digits + std::string(width - length, ' ');
  if (has('0')) return prefix + std::string(width - length, '0') + digits;
  return std::string(width - length, ' ') + prefix + digits;
}

// jinja2's format: str(value) % args, Python's %-formatting for %s %r %d %i
// %f %F %e %E %g %G %x %X %o and %%, with the flags "-+ 0#", a width and a
// precision (not %(name)s, nor * widths).
absl::StatusOr<Value> Format(Interpreter& in, const Value& v, CallArgs& a) {
  if (!a.kwargs.empty()) return in.Error("format with keyword arguments is not supported");
  const std::string fmt = v.ToString();
  std::string out;
  size_t next = 0;
  char buf[512];
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    std::string flags, width, precision;
    ++i;
    while (i < fmt.size() && std::string_view("-+ 0#").find(fmt[i]) != std::string_view::npos) {
      flags += fmt[i++];
    }
    while (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9') width += fmt[i++];
    const bool has_precision = i < fmt.size() && fmt[i] == '.';
    if (has_precision) {
      ++i;
      while (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9') precision += fmt[i++];
    }
    const std::string spec = "%" + flags + width + (has_precision ? "." + precision : "");
    if (i >= fmt.size()) return in.Error("incomplete format");
    const char conv = fmt[i];
    if (conv == '%' && spec == "%") {
      out += '%';
      continue;
    }
    if (next >= a.args.size()) return in.Error("not enough arguments for format string");
    const Value& x = a.args[next++];
    int n = 0;
    switch (conv) {
      case 's':
      case 'r': {
        const std::string text = conv == 's' ? x.ToString() : x.Repr();
        n = std::snprintf(buf, sizeof(buf), (spec + "s").c_str(), text.c_str());
        if (n >= int(sizeof(buf))) {  // a long string with no width: as it is
          out += text;
          continue;
        }
        break;
      }
      case 'd':
      case 'i':
      case 'x':
      case 'X':
      case 'o': {
        const bool decimal = conv == 'd' || conv == 'i';
        if (!x.is_number() || (x.is_float() && !decimal)) {
          return in.Error(absl::StrCat("%", std::string(1, conv), " format: ", decimal ? "a number" : "an integer",
                                       " is required, not ", x.TypeName()));
        }
        if (width.size() > 3 || precision.size() > 3) return in.Error("format: a field too wide");
        ASSIGN_OR_RETURN(Value value, Located(in, TruncateToInt(x)));
        out += FormatInt(value.big_int_value(), flags, std::atoi(width.c_str()), std::atoi(precision.c_str()), conv);
        continue;
      }
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G': {
        if (!x.is_number()) {
          return in.Error(absl::StrCat("%", std::string(1, conv), " format: a number is required, not ",
                                       x.TypeName()));
        }
        ASSIGN_OR_RETURN(double f, Located(in, ToDouble(x)));
        n = std::snprintf(buf, sizeof(buf), (spec + conv).c_str(), f);
        break;
      }
      default:
        return in.Error(absl::StrCat("unsupported format character '", std::string(1, conv), "'"));
    }
    if (n < 0 || n >= int(sizeof(buf))) return in.Error("format: a field too wide");
    out.append(buf, size_t(n));
  }
  if (next < a.args.size()) return in.Error("not all arguments converted during string formatting");
  return Value::String(std::move(out));
}

absl::StatusOr<Value> ToJson(Interpreter& in, const Value& v, CallArgs& a) {
  ASSIGN_OR_RETURN(std::vector<Value> p, Bind(in, "tojson", a, {"ensure_ascii", "indent", "separators", "sort_keys"}));
  Value::JsonOptions options;
  if (Has(p[1]) && !p[1].is_none()) {
    if (p[1].is_string()) {
      options.indent_is_string = true;
      options.indent_string = p[1].str();
    } else if (p[1].is_integral()) {
      options.indent = static_cast<int>(std::clamp<int64_t>(p[1].int_value(), 0, 1000));
      if (p[1].int_value() < 0) options.indent_is_string = true;  // Python: negative -> "" indent.
    } else {
      return in.Error("tojson: indent must be an integer or a string");
    }
  }
  if (Has(p[2]) && !p[2].is_none()) {
    if (!p[2].is_list() || p[2].items().size() != 2 || !p[2].items()[0].is_string() || !p[2].items()[1].is_string()) {
      return in.Error("tojson: separators must be a pair of strings");
    }
    options.separators_given = true;
    options.item_separator = p[2].items()[0].str();
    options.key_separator = p[2].items()[1].str();
  }
  options.sort_keys = p[3].Truthy();
  std::string out;
  absl::Status s = v.DumpJson(options, &out);
  if (!s.ok()) return in.Error(std::string(s.message()));
  RETURN_IF_ERROR(in.CheckStringSize(out.size()));
  if (p[0].Truthy()) out = AsciiEscape(out);
  return Value::String(std::move(out));
}

absl::StatusOr<Value> Indent(Interpreter& in, const Value& v, CallArgs& a) {
  ASSIGN_OR_RETURN(std::vector<Value> p, Bind(in, "indent", a, {"width", "first", "blank"}));
  std::string indention = "    ";
  if (p[0].is_string()) {
    indention = p[0].str();
  } else if (p[0].is_integral()) {
    indention = std::string(static_cast<size_t>(std::clamp<int64_t>(p[0].int_value(), 0, 1000)), ' ');
  }
  std::string s = v.ToString() + "\n";
  std::vector<std::string> lines = PySplitLines(s);
  std::string rv;
  if (p[2].Truthy()) {
    for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + indention : "") + lines[i];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].empty() ? "" : indention + lines[i]);
  }
  if (p[1].Truthy()) rv = indention + rv;
  RETURN_IF_ERROR(in.CheckStringSize(rv.size()));
  return Value::String(std::move(rv));
}

absl::StatusOr<Value> Map(Interpreter& in, const Value& v, CallArgs& a) {
  if (!v.Truthy()) return Value::List({});  // Jinja2: None, 0, false give an empty sequence
  ASSIGN_OR_RETURN(std::vector<Value> items, Items(in, v));
  std::vector<Value> out;
  out.reserve(items.size());
  Value attribute, fallback;
  for (const auto& [k, val] : a.kwargs) {
    if (k == "attribute") {
      attribute = val;
    } else if (k == "default") {
      fallback = val;
    }
  }
  if (Has(attribute)) {
    for (const Value& item : items) {
      Value r = GetPath(item, attribute);
      out.push_back(r.is_undefined() && Has(fallback) ? fallback : r);
    }
    return Value::List(std::move(out));
  }
  if (a.args.empty()) return in.Error("map requires a filter argument");
  ASSIGN_OR_RETURN(std::string name, NeedString(in, "map", a.args[0]));
  CallArgs rest;
  rest.args.assign(a.args.begin() + 1, a.args.end());
  rest.kwargs = a.kwargs;
  for (const Value& item : items) {
    CallArgs copy = rest;
    ASSIGN_OR_RETURN(Value r, in.ApplyFilter(name, item, copy));
    out.push_back(std::move(r));
  }
  return Value::List(std::move(out));
}

absl::StatusOr<Value> SortFilter(Interpreter& in, const Value& v, CallArgs& a) {
  ASSIGN_OR_RETURN(std::vector<Value> p, Bind(in, "sort", a, {"reverse", "case_sensitive", "attribute"}));
  ASSIGN_OR_RETURN(std::vector<Value> items, Items(in, v));
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& item : items) {
    keyed.emplace_back(FoldKey(Has(p[2]) ? GetPath(item, p[2]) : item, p[1].Truthy()), item);
  }
  absl::Status error;
  bool reverse = p[0].Truthy();
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    auto r = reverse ? y.first.Less(x.first) : x.first.Less(y.first);
    if (!r.ok() && error.ok()) error = r.status();
    return r.ok() && *r;
  });
  if (!error.ok()) return in.Error(std::string(error.message()));
  std::vector<Value> out;
  for (auto& [k, item] : keyed) out.push_back(std::move(item));
  return Value::List(std::move(out));
}

absl::StatusOr<Value> MinMax(Interpreter& in, const Value& v, CallArgs& a, bool want_max) {
  ASSIGN_OR_RETURN(std::vector<Value> p, Bind(in, want_max ? "max" : "min", a, {"case_sensitive", "attribute"}));
  ASSIGN_OR_RETURN(std::vector<Value> items, Items(in, v));
  if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    Value x = FoldKey(Has(p[1]) ? GetPath(items[i], p[1]) : items[i], p[0].Truthy());
    Value y = FoldKey(Has(p[1]) ? GetPath(items[best], p[1]) : items[best], p[0].Truthy());
    auto r = want_max ? y.Less(x) : x.Less(y);
    if (!r.ok()) return in.Error(std::string(r.status().message()));
    if (*r) best = i;
  }
  return items[best];
}

// Python's int(s, base) of stripped text without '_': a sign, a prefix
// that names the base (0x, 0o, 0b) and its digits; nullopt when s is not
// such a number.
absl::StatusOr<std::optional<Value>> ParseIntText(Interpreter& in, absl::string_view s, int base) {
  const bool negative = !s.empty() && s[0] == '-';
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) s.remove_prefix(1);
  const char prefix = base == 16 ? 'x' : base == 8 ? 'o' : base == 2 ? 'b' : 0;
  if (prefix != 0 && s.size() > 2 && s[0] == '0' && (s[1] | 0x20) == prefix) s.remove_prefix(2);
  absl::StatusOr<BigInt> digits = ParseIntDigits(s, base);
  if (absl::IsInvalidArgument(digits.status())) return std::nullopt;
  if (!digits.ok()) return in.AtLine(digits.status());
  return Value::Int(negative ? -*digits : *digits);
}

absl::StatusOr<Value> ToInt(Interpreter& in, const Value& v, CallArgs& a) {
  ASSIGN_OR_RETURN(std::vector<Value> p, Bind(in, "int", a, {"default", "base"}));
  Value fallback = Has(p[0]) ? p[0] : Value::Int(0);
  int base = p[1].is_integral() ? static_cast<int>(p[1].int_value()) : 10;
  // int(x), and where that is a ValueError int(float(x)); the default where
  // that fails too. int(inf) is Python's OverflowError.
  if (v.is_number()) {
    if (v.is_float() && std::isnan(v.number_value())) return fallback;
    return Located(in, TruncateToInt(v));
  }
  if (!v.is_string()) return fallback;
  std::string s = PyStrip(v.str(), nullptr, 3);
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  if (!s.empty() && base >= 2 && base <= 36) {
    ASSIGN_OR_RETURN(std::optional<Value> i, ParseIntText(in, s, base));
    if (i.has_value()) return *std::move(i);
    char* end = nullptr;
    double f = std::strtod(s.c_str(), &end);
    if (end == s.c_str() + s.size() && std::isfinite(f)) return Located(in, TruncateToInt(Value::Float(f)));
  }
  return fallback;
}

absl::StatusOr<Value> ToFloat(Interpreter& in, const Value& v, CallArgs& a) {
  ASSIGN_OR_RETURN(std::vector<Value> p, Bind(in, "float", a, {"default"}));
  Value fallback = Has(p[0]) ? p[0] : Value::Float(0.0);
  if (v.is_number()) {
    ASSIGN_OR_RETURN(double f, Located(in, ToDouble(v)));
    return Value::Float(f);
  }
  if (!v.is_string()) return fallback;
  std::string s = PyStrip(v.str(), nullptr, 3);
  if (s.empty()) return fallback;
  char* end = nullptr;
  double f = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return fallback;
  return Value::Float(f);
}

// jinja2's round: Python's round(x, precision) for the method "common";
// math.ceil or math.floor of x * 10**precision, over 10**precision (a
// float) for "ceil" and "floor".
absl::StatusOr<Value> RoundFilter(Interpreter& in, const Value& v, CallArgs& a) {
  ASSIGN_OR_RETURN(std::vector<Value> p, Bind(in, "round", a, {"precision", "method"}));
  const Value precision = Has(p[0]) ? p[0] : Value::Int(0);
  const std::string method = Has(p[1]) ? p[1].ToString() : "common";
  if (method != "common" && method != "ceil" && method != "floor") {
    return in.Error("method must be common, ceil or floor");
  }
  if (!v.is_number()) return in.Error(absl::StrCat("type ", v.TypeName(), " doesn't define __round__ method"));
  if (!precision.is_integral() && (method == "common" || !precision.is_float())) {
    return in.Error(absl::StrCat("'", precision.TypeName(), "' object cannot be interpreted as an integer"));
  }
  if (method == "common") {
    return Located(in, Round(v, precision.int_value()));  // Python clamps a huge precision, as int_value does.
  }
  ASSIGN_OR_RETURN(Value scale, Located(in, Arithmetic("**", Value::Int(10), precision)));
  ASSIGN_OR_RETURN(Value scaled, Located(in, Arithmetic("*", v, scale)));
  if (scaled.is_float()) {
    const double f = scaled.number_value();
    ASSIGN_OR_RETURN(scaled, Located(in, TruncateToInt(Value::Float(method == "ceil" ? std::ceil(f) : std::floor(f)))));
  }
  return Located(in, Arithmetic("/", scaled, scale));
}

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

const absl::flat_hash_map<std::string, FilterFn>& Filters() {
  static const auto* filters = new absl::flat_hash_map<std::string, FilterFn>{
      {"tojson", ToJson},
      {"format", Format},
      {"indent", Indent},
      {"map", Map},
      {"sort", SortFilter},
      {"int", ToInt},
      {"float", ToFloat},
      {"select", [](Interpreter& in, const Value& v, CallArgs& a) { return SelectOrReject(in, v, a, true, false); }},
      {"reject", [](Interpreter& in, const Value& v, CallArgs& a) { return SelectOrReject(in, v, a, false, false); }},
      {"selectattr", [](Interpreter& in, const Value& v, CallArgs& a) { return SelectOrReject(in, v, a, true, true); }},
      {"rejectattr",
       [](Interpreter& in, const Value& v, CallArgs& a) { return SelectOrReject(in, v, a, false, true); }},
      {"max", [](Interpreter& in, const Value& v, CallArgs& a) { return MinMax(in, v, a, true); }},
      {"min", [](Interpreter& in, const Value& v, CallArgs& a) { return MinMax(in, v, a, false); }},
      {"safe", [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<Value> { return v; }},
      {"string",
       [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<Value> { return Value::String(v.ToString()); }},
      {"escape",
       [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<Value> {
         return Value::String(HtmlEscape(v.ToString()));
       }},
      {"length",
       [](Interpreter& in, const Value& v, CallArgs&) -> absl::StatusOr<Value> {
         auto n = v.Length();
         if (!n.ok()) return in.Error(std::string(n.status().message()));
         return Value::Int(*n);
       }},
      {"list",
       [](Interpreter& in, const Value& v, CallArgs&) -> absl::StatusOr<Value> {
         ASSIGN_OR_RETURN(std::vector<Value> items, Items(in, v));
         return Value::List(std::move(items));
       }},
      {"items",
       [](Interpreter& in, const Value& v, CallArgs&) -> absl::StatusOr<Value> {
         if (v.is_undefined()) return Value::List({});
         if (!v.is_dict() || v.is_namespace()) return in.Error("Can only get item pairs from a mapping.");
         std::vector<Value> out;
         for (const auto& [k, val] : v.dict().entries) out.push_back(Value::List({k, val}, true));
         return Value::List(std::move(out));
       }},
      {"dictsort",
       [](Interpreter& in, const Value& v, CallArgs& a) -> absl::StatusOr<Value> {
         ASSIGN_OR_RETURN(std::vector<Value> p, Bind(in, "dictsort", a, {"case_sensitive", "by", "reverse"}));
         if (!v.is_dict() || v.is_namespace()) return in.Error("dictsort: expected a mapping");
         int pos = p[1].is_string() && p[1].str() == "value" ? 1 : 0;
         std::vector<Value> pairs;
         for (const auto& [k, val] : v.dict().entries) pairs.push_back(Value::List({k, val}, true));
         absl::Status error;
         bool reverse = p[2].Truthy();
         std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& x, const Value& y) {
           Value kx = FoldKey(x.items()[pos], p[0].Truthy()), ky = FoldKey(y.items()[pos], p[0].Truthy());
           auto r = reverse ? ky.Less(kx) : kx.Less(ky);
           if (!r.ok() && error.ok()) error = r.status();
           return r.ok() && *r;
         });
         if (!error.ok()) return in.Error(std::string(error.message()));
         return Value::List(std::move(pairs));
       }},
      {"first",
       [](Interpreter& in, const Value& v, CallArgs&) -> absl::StatusOr<Value> {
         ASSIGN_OR_RETURN(std::vector<Value> items, Items(in, v));
         if (items.empty()) return Value::Undefined("No first item, sequence was empty.");
         return items.front();
       }},
      {"last",
       [](Interpreter& in, const Value& v, CallArgs&) -> absl::StatusOr<Value> {
         ASSIGN_OR_RETURN(std::vector<Value> items, Items(in, v));
         if (items.empty()) return Value::Undefined("No last item, sequence was empty.");
         return items.back();
       }},
      {"reverse",
       [](Interpreter& in, const Value& v, CallArgs&) -> absl::StatusOr<Value> {
         if (v.is_string()) {
           std::vector<uint32_t> cps = DecodeUtf8(v.str());
           std::reverse(cps.begin(), cps.end());
           return Value::String(EncodeUtf8(cps));
         }
         ASSIGN_OR_RETURN(std::vector<Value> items, Items(in, v));
         std::reverse(items.begin(), items.end());
         return Value::List(std::move(items));
       }},
      {"unique",
       [](Interpreter& in, const Value& v, CallArgs& a) -> absl::StatusOr<Value> {
         ASSIGN_OR_RETURN(std::vector<Value> p, Bind(in, "unique", a, {"case_sensitive", "attribute"}));
         ASSIGN_OR_RETURN(std::vector<Value> items, Items(in, v));
         std::vector<Value> out, seen;
         for (const Value& item : items) {
           Value key = FoldKey(Has(p[1]) ? GetPath(item, p[1]) : item, p[0].Truthy());
           if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return s.Equals(key); })) continue;
           seen.push_back(key);
           out.push_back(item);
         }
         return Value::List(std::move(out));
       }},
      {"join",
       [](Interpreter& in, const Value& v, CallArgs& a) -> absl::StatusOr<Value> {
         ASSIGN_OR_RETURN(std::vector<Value> p, Bind(in, "join", a, {"d", "attribute"}));
         ASSIGN_OR_RETURN(std::vector<Value> items, Items(in, v));
         std::string sep = Has(p[0]) ? p[0].ToString() : "";
         std::string out;
         for (size_t i = 0; i < items.size(); ++i) {
           if (i > 0) out += sep;
           out += (Has(p[1]) ? GetPath(items[i], p[1]) : items[i]).ToString();
           RETURN_IF_ERROR(in.CheckStringSize(out.size()));
         }
         return Value::String(std::move(out));
       }},
      {"default",
       [](Interpreter& in, const Value& v, CallArgs& a) -> absl::StatusOr<Value> {
         ASSIGN_OR_RETURN(std::vector<Value> p, Bind(in, "default", a, {"default_value", "boolean"}));
         if (v.is_undefined() || (p[1].Truthy() && !v.Truthy())) return Has(p[0]) ? p[0] : Value::String("");
         return v;
       }},
      {"trim",
       [](Interpreter& in, const Value& v, CallArgs& a) -> absl::StatusOr<Value> {
         ASSIGN_OR_RETURN(std::vector<Value> p, Bind(in, "trim", a, {"chars"}));
         std::string chars = p[0].is_string() ? p[0].str() : "";
         return Value::String(PyStrip(v.ToString(), p[0].is_string() ? &chars : nullptr, 3));
       }},
      {"upper",
       [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<Value> { return Value::String(PyUpper(v.ToString())); }},
      {"lower",
       [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<Value> { return Value::String(PyLower(v.ToString())); }},
      {"capitalize",
       [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<Value> {
         return Value::String(PyCapitalize(v.ToString()));
       }},
      {"title",
       [](Interpreter&, const Value& v, CallArgs&) -> absl::StatusOr<Value> {
         return Value::String(JinjaTitle(v.ToString()));
       }},
      {"replace",
       [](Interpreter& in, const Value& v, CallArgs& a) -> absl::StatusOr<Value> {
         ASSIGN_OR_RETURN(std::vector<Value> p, Bind(in, "replace", a, {"old", "new", "count"}));
         if (p[2].is_big_int()) return in.Error("Python int too large to convert to C ssize_t");
         int64_t count = p[2].is_integral() ? p[2].int_value() : -1;
         std::string r = PyReplace(v.ToString(), p[0].ToString(), p[1].ToString(), count);
         RETURN_IF_ERROR(in.CheckStringSize(r.size()));
         return Value::String(std::move(r));
       }},
      {"abs",
       [](Interpreter& in, const Value& v, CallArgs&) -> absl::StatusOr<Value> {
         if (!v.is_number()) return in.Error(absl::StrCat("bad operand type for abs(): '", v.TypeName(), "'"));
         return Located(in, Absolute(v));
       }},
      {"round", RoundFilter},
      {"attr",
       [](Interpreter& in, const Value& v, CallArgs& a) -> absl::StatusOr<Value> {
         ASSIGN_OR_RETURN(std::vector<Value> p, Bind(in, "attr", a, {"name"}));
         ASSIGN_OR_RETURN(std::string name, NeedString(in, "attr", p[0]));
         return GetAttr(v, name);
       }},
      {"sum",
       [](Interpreter& in, const Value& v, CallArgs& a) -> absl::StatusOr<Value> {
         ASSIGN_OR_RETURN(std::vector<Value> p, Bind(in, "sum", a, {"attribute", "start"}));
         ASSIGN_OR_RETURN(std::vector<Value> items, Items(in, v));
         Value total = Has(p[1]) ? p[1] : Value::Int(0);
         for (const Value& item : items) {
           Value x = Has(p[0]) ? GetPath(item, p[0]) : item;
           if (!x.is_number() || !total.is_number()) return in.Error("sum: expected numbers");
           ASSIGN_OR_RETURN(total, Located(in, Arithmetic("+", total, x)));
         }
         return total;
       }},
  };
  return *filters;
}

std::string FilterAlias(absl::string_view name) {
  if (name == "count") return "length";
  if (name == "d") return "default";
  if (name == "e") return "escape";
  return std::string(name);
}

}  // namespace

bool IsFilter(absl::string_view name) { return Filters().contains(FilterAlias(name)); }

absl::StatusOr<Value> CallFilter(Interpreter& in, const std::string& name, const Value& input, CallArgs& args) {
  auto it = Filters().find(FilterAlias(name));
  if (it == Filters().end()) return in.Error(absl::StrCat("no filter named '", name, "'"));
  return it->second(in, input, args);
}

}  // namespace jinja_internal
}  // namespace kvcast
