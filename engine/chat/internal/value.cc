#include "engine/chat/internal/value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/tokenizer/internal/utf8.h"
#include "engine/chat/internal/text.h"

namespace kvcast {
namespace jinja_internal {

const Value* ValueDict::Find(const Value& key) const {
  if (key.is_string()) return FindString(key.str());
  for (const auto& [k, v] : entries) {
    if (k.Equals(key)) return &v;
  }
  return nullptr;
}

const Value* ValueDict::FindString(absl::string_view key) const {
  for (const auto& [k, v] : entries) {
    if (k.is_string() && k.str() == key) return &v;
  }
  return nullptr;
}

void ValueDict::Set(Value key, Value value) {
  for (auto& [k, v] : entries) {
    if (k.Equals(key)) {
      v = std::move(value);
      return;
    }
  }
  entries.emplace_back(std::move(key), std::move(value));
}

Value Value::Int(const BigInt& i) {
  if (std::optional<int64_t> small = i.ToInt64()) return Int(*small);
  Value v(ValueKind::kInt);
  v.int_ = i.negative() ? INT64_MIN : INT64_MAX;
  v.object_ = std::make_shared<const BigInt>(i);
  return v;
}

Value Value::List(std::vector<Value> items, bool is_tuple) {
  Value v(ValueKind::kList);
  v.list_ = std::make_shared<ValueList>();
  v.list_->items = std::move(items);
  v.list_->is_tuple = is_tuple;
  return v;
}

Value Value::Dict(std::shared_ptr<ValueDict> dict) {
  Value v(ValueKind::kDict);
  v.dict_ = std::move(dict);
  return v;
}

Value Value::Function(std::string name, NativeFunction fn) {
  Value v(ValueKind::kCallable);
  auto c = std::make_shared<Callable>();
  c->name = std::move(name);
  c->fn = std::move(fn);
  v.object_ = std::move(c);
  return v;
}

Value Value::FromJson(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return None();
    case nlohmann::ordered_json::value_t::boolean:
      return Bool(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Int(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Int(*BigInt::FromDigits(absl::StrCat(u), 10));
      return Int(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Float(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return String(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(FromJson(e));
      return List(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      auto d = std::make_shared<ValueDict>();
      d->entries.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) {
        d->entries.emplace_back(String(it.key()), FromJson(it.value()));
      }
      return Dict(std::move(d));
    }
    default:
      return None();
  }
}

nlohmann::ordered_json Value::ToJson() const {
  switch (kind_) {
    case ValueKind::kBool: return bool_value();
    case ValueKind::kInt:
      if (is_big_int()) return big().ToDouble();  // The nearest a JSON number holds.
      return int_;
    case ValueKind::kFloat: return float_;
    case ValueKind::kString: return str_;
    case ValueKind::kList: {
      auto a = nlohmann::ordered_json::array();
      for (const Value& v : items()) a.push_back(v.ToJson());
      return a;
    }
    case ValueKind::kDict: {
      auto o = nlohmann::ordered_json::object();
      for (const auto& [k, v] : dict_->entries) o[k.is_string() ? k.str() : k.ToString()] = v.ToJson();
      return o;
    }
    default: return nullptr;
  }
}

bool Value::Truthy() const {
  switch (kind_) {
    case ValueKind::kUndefined:
    case ValueKind::kNone: return false;
    case ValueKind::kBool:
    case ValueKind::kInt: return int_ != 0;
    case ValueKind::kFloat: return float_ != 0.0;
    case ValueKind::kString: return !str_.empty();
    case ValueKind::kList: return !list_->items.empty();
    case ValueKind::kDict: return dict_->is_namespace || !dict_->entries.empty();
    case ValueKind::kCallable: return true;
  }
  return false;
}

std::string FormatPythonFloat(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  // Shortest %e representation that reads back as the same double.
  char buf[64];
  int precision = 0;
  for (precision = 0; precision < 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*e", precision, f);
    if (std::strtod(buf, nullptr) == f) break;
  }
  std::snprintf(buf, sizeof(buf), "%.*e", precision, f);
  std::string s(buf);
  bool negative = s[0] == '-';
  if (negative) s.erase(0, 1);
  size_t e = s.find('e');
  int exponent = std::atoi(s.c_str() + e + 1);
  std::string digits;
  for (size_t i = 0; i < e; ++i) {
    if (s[i] != '.') digits.push_back(s[i]);
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    if (exponent >= 0) {
      std::string int_part = digits.substr(0, std::min<size_t>(digits.size(), exponent + 1));
      while (static_cast<int>(int_part.size()) < exponent + 1) int_part.push_back('0');
      std::string frac = digits.size() > static_cast<size_t>(exponent + 1) ? digits.substr(exponent + 1) : "0";
      out += int_part + "." + frac;
    } else {
      out += "0." + std::string(-exponent - 1, '0') + digits;
    }
  } else {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    out += absl::StrFormat("e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  }
  return out;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  tokenizer_internal::AppendUtf8(static_cast<char32_t>(cp), out);
}

std::vector<size_t> CodePointOffsets(absl::string_view s) {
  std::vector<size_t> offsets;
  offsets.reserve(s.size() + 1);
  size_t i = 0;
  while (i < s.size()) {
    offsets.push_back(i);
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (i + len > s.size()) len = 1;
    for (size_t k = 1; k < len; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) {
        len = 1;
        break;
      }
    }
    i += len;
  }
  offsets.push_back(s.size());
  return offsets;
}

namespace {

// Python's str.isprintable() for the code points chat text contains:
// control characters, format characters (zero-width spaces, bidi marks,
// BOM, tags), separators other than the ASCII space and private use.
bool IsPrintable(uint32_t cp) {
  if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) return false;
  if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) ||
      (cp >= 0x205F && cp <= 0x2064) || (cp >= 0x2066 && cp <= 0x206F) || cp == 0x3000 || cp == 0xFEFF ||
      (cp >= 0xFFF9 && cp <= 0xFFFB) || cp == 0x061C || cp == 0x180E || (cp >= 0xD800 && cp <= 0xF8FF) ||
      (cp >= 0xE0000 && cp <= 0xE0FFF) || cp >= 0xF0000 || cp == 0x110BD || (cp >= 0x1BCA0 && cp <= 0x1BCA3) ||
      (cp >= 0x1D173 && cp <= 0x1D17A) || cp == 0x600 || cp == 0x601 || cp == 0x602 || cp == 0x603 ||
      cp == 0x604 || cp == 0x605 || cp == 0x6DD || cp == 0x70F || cp == 0x8E2) {
    return false;
  }
  return true;
}

// How two numbers compare, exactly as Python compares ints and floats of
// any size: -1, 0 or 1; nullopt when a NaN leaves them unordered.
std::optional<int> CompareNumbers(const Value& a, const Value& b) {
  if (!a.is_float() && !b.is_float()) return Compare(a.big_int_value(), b.big_int_value());
  const double x = a.number_value(), y = b.number_value();
  if (std::isnan(x) || std::isnan(y)) return std::nullopt;
  if (a.is_float() && b.is_float()) return (x > y) - (x < y);
  // An int and a float: as doubles where the int is one exactly (at most
  // 53 bits), else as integers with the float's fraction breaking a tie.
  const Value& i = a.is_float() ? b : a;
  const double f = a.is_float() ? x : y;
  constexpr int64_t kExact = int64_t{1} << 53;
  const int c = i.is_big_int() || i.int_value() < -kExact || i.int_value() > kExact
                    ? i.big_int_value().CompareToDouble(f)
                    : (i.number_value() > f) - (i.number_value() < f);
  return a.is_float() ? -c : c;
}

std::string ReprString(const std::string& s) {
  char quote = '\'';
  if (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) quote = '"';
  std::string out(1, quote);
  for (uint32_t cp : DecodeUtf8(s)) {
    if (cp & 0x80000000u) {  // A byte that is not UTF-8: as Python's surrogateescape would show it.
      out += absl::StrFormat("\\udc%02x", cp & 0xFF);
    } else if (cp == static_cast<uint32_t>(quote) || cp == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(cp));
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp == ' ' || IsPrintable(cp)) {
      AppendUtf8(cp, &out);
    } else if (cp <= 0xFF) {
      out += absl::StrFormat("\\x%02x", cp);
    } else if (cp <= 0xFFFF) {
      out += absl::StrFormat("\\u%04x", cp);
    } else {
      out += absl::StrFormat("\\U%08x", cp);
    }
  }
  out.push_back(quote);
  return out;
}

void AppendJsonString(const std::string& s, std::string* out) {
  out->push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      default:
        if (c < 0x20) {
          *out += absl::StrFormat("\\u%04x", c);
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
  }
  out->push_back('"');
}

}  // namespace

std::string Value::ToString() const {
  switch (kind_) {
    case ValueKind::kUndefined: return "";
    case ValueKind::kString: return str_;
    default: return Repr();
  }
}

std::string Value::Repr() const {
  switch (kind_) {
    case ValueKind::kUndefined: return "Undefined";
    case ValueKind::kNone: return "None";
    case ValueKind::kBool: return bool_value() ? "True" : "False";
    case ValueKind::kInt: return is_big_int() ? big().ToString() : absl::StrCat(int_);
    case ValueKind::kFloat: return FormatPythonFloat(float_);
    case ValueKind::kString: return ReprString(str_);
    case ValueKind::kList: {
      std::string out = is_tuple() ? "(" : "[";
      for (size_t i = 0; i < items().size(); ++i) {
        if (i > 0) out += ", ";
        out += items()[i].Repr();
      }
      if (is_tuple() && items().size() == 1) out += ",";
      out += is_tuple() ? ")" : "]";
      return out;
    }
    case ValueKind::kDict: {
      if (dict_->is_namespace) return "<Namespace>";
      std::string out = "{";
      bool first = true;
      for (const auto& [k, v] : dict_->entries) {
        if (!first) out += ", ";
        first = false;
        out += k.Repr() + ": " + v.Repr();
      }
      return out + "}";
    }
    case ValueKind::kCallable: return "<function " + callable().name + ">";
  }
  return "";
}

std::string Value::TypeName() const {
  switch (kind_) {
    case ValueKind::kUndefined: return "undefined";
    case ValueKind::kNone: return "NoneType";
    case ValueKind::kBool: return "bool";
    case ValueKind::kInt: return "int";
    case ValueKind::kFloat: return "float";
    case ValueKind::kString: return "str";
    case ValueKind::kList: return is_tuple() ? "tuple" : "list";
    case ValueKind::kDict: return dict_->is_namespace ? "Namespace" : "dict";
    case ValueKind::kCallable: return "function";
  }
  return "object";
}

bool Value::Equals(const Value& other) const {
  if (is_number() && other.is_number()) {
    if (!is_float() && !other.is_float() && !is_big_int() && !other.is_big_int()) return int_ == other.int_;
    return CompareNumbers(*this, other) == 0;
  }
  if (kind_ != other.kind_) return false;
  switch (kind_) {
    case ValueKind::kUndefined:
    case ValueKind::kNone: return true;
    case ValueKind::kString: return str_ == other.str_;
    case ValueKind::kList: {
      if (list_ == other.list_) return true;
      if (is_tuple() != other.is_tuple() || items().size() != other.items().size()) return false;
      for (size_t i = 0; i < items().size(); ++i) {
        if (!items()[i].Equals(other.items()[i])) return false;
      }
      return true;
    }
    case ValueKind::kDict: {
      if (dict_ == other.dict_) return true;
      if (dict_->is_namespace || other.dict_->is_namespace) return false;
      if (dict_->entries.size() != other.dict_->entries.size()) return false;
      for (const auto& [k, v] : dict_->entries) {
        const Value* o = other.dict_->Find(k);
        if (o == nullptr || !o->Equals(v)) return false;
      }
      return true;
    }
    case ValueKind::kCallable: return object_ == other.object_;
    default: return false;
  }
}

absl::StatusOr<bool> Value::Less(const Value& other) const {
  if (is_number() && other.is_number()) {
    if (!is_float() && !other.is_float() && !is_big_int() && !other.is_big_int()) return int_ < other.int_;
    return CompareNumbers(*this, other) == -1;
  }
  if (is_string() && other.is_string()) return str_ < other.str_;
  if (is_list() && other.is_list()) {
    const auto& a = items();
    const auto& b = other.items();
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
      if (a[i].Equals(b[i])) continue;
      return a[i].Less(b[i]);
    }
    return a.size() < b.size();
  }
  return absl::InvalidArgumentError(absl::StrCat("'<' not supported between instances of '", TypeName(),
                                                 "' and '", other.TypeName(), "'"));
}

absl::StatusOr<int64_t> Value::Length() const {
  switch (kind_) {
    case ValueKind::kUndefined: return 0;
    case ValueKind::kString: {
      int64_t n = 0;
      bool ascii = true;
      for (unsigned char c : str_) ascii &= c < 0x80;
      if (ascii) return static_cast<int64_t>(str_.size());
      n = static_cast<int64_t>(CodePointOffsets(str_).size()) - 1;
      return n;
    }
    case ValueKind::kList: return static_cast<int64_t>(items().size());
    case ValueKind::kDict:
      if (!dict_->is_namespace) return static_cast<int64_t>(dict_->entries.size());
      break;
    default: break;
  }
  return absl::InvalidArgumentError(absl::StrCat("object of type '", TypeName(), "' has no len()"));
}

absl::StatusOr<std::vector<Value>> Value::Iterate() const {
  switch (kind_) {
    case ValueKind::kUndefined: return std::vector<Value>();
    case ValueKind::kString: {
      std::vector<Value> out;
      std::vector<size_t> off = CodePointOffsets(str_);
      out.reserve(off.size());
      for (size_t i = 0; i + 1 < off.size(); ++i) out.push_back(String(str_.substr(off[i], off[i + 1] - off[i])));
      return out;
    }
    case ValueKind::kList: return items();
    case ValueKind::kDict: {
      if (dict_->is_namespace) break;
      std::vector<Value> out;
      out.reserve(dict_->entries.size());
      for (const auto& [k, v] : dict_->entries) out.push_back(k);
      return out;
    }
    default: break;
  }
  return absl::InvalidArgumentError(absl::StrCat("'", TypeName(), "' object is not iterable"));
}

absl::Status Value::DumpJson(const JsonOptions& options, std::string* out) const {
  return DumpJsonAt(options, 0, out);
}

absl::Status Value::DumpJsonAt(const JsonOptions& options, int depth, std::string* out) const {
  if (depth > 200) return absl::InvalidArgumentError("tojson: value nested too deeply");
  bool indented = options.indent >= 0 || options.indent_is_string;
  std::string item_sep = options.separators_given ? options.item_separator : (indented ? "," : ", ");
  std::string key_sep = options.separators_given ? options.key_separator : ": ";
  auto newline = [&](int level) {
    if (!indented) return;
    out->push_back('\n');
    for (int i = 0; i < level; ++i) {
      if (options.indent_is_string) {
        *out += options.indent_string;
      } else {
        out->append(static_cast<size_t>(options.indent), ' ');
      }
    }
  };
  switch (kind_) {
    case ValueKind::kNone: *out += "null"; return absl::OkStatus();
    case ValueKind::kBool: *out += bool_value() ? "true" : "false"; return absl::OkStatus();
    case ValueKind::kInt: *out += Repr(); return absl::OkStatus();
    case ValueKind::kFloat:
      if (std::isnan(float_)) {
        *out += "NaN";
      } else if (std::isinf(float_)) {
        *out += float_ > 0 ? "Infinity" : "-Infinity";
      } else {
        *out += FormatPythonFloat(float_);
      }
      return absl::OkStatus();
    case ValueKind::kString: AppendJsonString(str_, out); return absl::OkStatus();
    case ValueKind::kList: {
      if (items().empty()) {
        *out += "[]";
        return absl::OkStatus();
      }
      out->push_back('[');
      for (size_t i = 0; i < items().size(); ++i) {
        if (i > 0) *out += item_sep;
        newline(depth + 1);
        absl::Status s = items()[i].DumpJsonAt(options, depth + 1, out);
        if (!s.ok()) return s;
      }
      newline(depth);
      out->push_back(']');
      return absl::OkStatus();
    }
    case ValueKind::kDict: {
      if (dict_->is_namespace) break;
      if (dict_->entries.empty()) {
        *out += "{}";
        return absl::OkStatus();
      }
      std::vector<std::pair<std::string, const Value*>> entries;
      for (const auto& [k, v] : dict_->entries) {
        std::string key;
        switch (k.kind()) {
          case ValueKind::kString: key = k.str(); break;
          case ValueKind::kBool: key = k.bool_value() ? "true" : "false"; break;
          case ValueKind::kNone: key = "null"; break;
          case ValueKind::kInt:
          case ValueKind::kFloat: k.DumpJsonAt(options, depth, &key).IgnoreError(); break;
          default:
            return absl::InvalidArgumentError(
                absl::StrCat("keys must be str, int, float, bool or None, not ", k.TypeName()));
        }
        entries.emplace_back(std::move(key), &v);
      }
      if (options.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
      }
      out->push_back('{');
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i > 0) *out += item_sep;
        newline(depth + 1);
        AppendJsonString(entries[i].first, out);
        *out += key_sep;
        absl::Status s = entries[i].second->DumpJsonAt(options, depth + 1, out);
        if (!s.ok()) return s;
      }
      newline(depth);
      out->push_back('}');
      return absl::OkStatus();
    }
    default: break;
  }
  return absl::InvalidArgumentError(absl::StrCat("Object of type ", TypeName(), " is not JSON serializable"));
}

}  // namespace jinja_internal
}  // namespace kvcast
