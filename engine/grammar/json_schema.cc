#include "engine/grammar/json_schema.h"

#include <algorithm>
#include <cmath>
#include <array>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/grammar/regex.h"
#include "nlohmann/json.hpp"

namespace kvcast::grammar {
namespace {

using Json = nlohmann::ordered_json;
using Seq = GrammarBuilder::Seq;

constexpr int kMaxIntegerDigits = 16;
constexpr int kMaxFractionDigits = 16;

const absl::flat_hash_set<std::string>& Annotations() {
  static const auto* names = new absl::flat_hash_set<std::string>{
      "title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated",
      "readOnly", "writeOnly", "discriminator", "strict", "$defs", "definitions"};
  return *names;
}

const absl::flat_hash_set<std::string>& Supported() {
  static const auto* names = new absl::flat_hash_set<std::string>{
      "type", "enum", "const", "properties", "required", "additionalProperties", "items",
      "prefixItems", "minItems", "maxItems", "minLength", "maxLength", "format", "anyOf",
      "oneOf", "allOf", "$ref", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "pattern"};
  return *names;
}

absl::Status Unsupported(const std::string& what, const std::string& path) {
  return absl::InvalidArgumentError(
      absl::StrCat("unsupported JSON Schema keyword '", what, "' at ", path));
}

absl::Status Bad(const std::string& path, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("JSON Schema at ", path, ": ", why));
}

class Compiler {
 public:
  explicit Compiler(const Json* root) : root_(root) {
    ws_ = b_.Repeat("ws", {b_.Bytes(ByteSet::Of(' ').Add('\t', '\t').Add('\n', '\n').Add('\r', '\r'))},
                    0, kMaxWhitespace);
  }

  absl::StatusOr<Grammar> Finish(RuleId root) { return b_.Build(root); }
  RuleId Around(std::string_view prefix, RuleId body, std::string_view suffix) {
    Seq seq = b_.Literal(prefix);
    seq.push_back(GrammarBuilder::Ref(body));
    Append(seq, b_.Literal(suffix));
    return b_.Rule("around", {seq});
  }
  absl::StatusOr<RuleId> Compile(const Json& s, const std::string& path);
  RuleId AnyValue();
  RuleId AnyObject();

 private:
  Symbol Ws() const { return GrammarBuilder::Ref(ws_); }
  Symbol Lit(std::string_view text) { return GrammarBuilder::Ref(LiteralRule(text)); }
  RuleId LiteralRule(std::string_view text) { return b_.Rule(text, {b_.Literal(text)}); }
  Symbol Digits(int min, int max) {
    return GrammarBuilder::Ref(b_.Repeat("digits", {b_.Bytes(ByteSet::Range('0', '9'))}, min, max));
  }
  RuleId Char();
  RuleId String(int min_length, int max_length);
  absl::StatusOr<RuleId> FormattedString(const std::string& format, const std::string& path);
  RuleId Integer();
  RuleId Number();
  RuleId Fraction();  // ("." digits)?
  // Integers / numbers within the schema's minimum, maximum,
  // exclusiveMinimum, exclusiveMaximum.
  absl::StatusOr<RuleId> BoundedNumber(const Json& s, bool integer, const std::string& path);
  // Decimal integers in [lo, hi] (0 <= lo <= hi), no leading zeros.
  std::vector<Seq> DigitRange(int64_t lo, int64_t hi);
  void SameLength(const std::string& a, const std::string& b, Seq prefix, std::vector<Seq>* out);
  // Non-negative numbers v with lo <= v (lo < v when lo_open), v <= hi
  // (v < hi when hi_open; no hi when hi < 0), lo and hi whole; `integer`:
  // no fraction.
  std::vector<Seq> NonNegative(int64_t lo, bool lo_open, int64_t hi, bool hi_open, bool integer);
  absl::StatusOr<RuleId> Typed(const std::string& type, const Json& s, const std::string& path);
  absl::StatusOr<RuleId> Object(const Json& s, const std::string& path);
  absl::StatusOr<RuleId> Array(const Json& s, const std::string& path);
  absl::StatusOr<RuleId> Ref(const std::string& ref, const std::string& path);
  absl::StatusOr<RuleId> OneOfSchemas(const Json& list, const std::string& path);
  // `{` ws (key ws `:` ws value ws (`,` ws key ws `:` ws value ws)*)? `}`.
  RuleId Map(RuleId key, RuleId value);
  static absl::StatusOr<int> Count(const Json& s, const char* key, int fallback, const std::string& path);

  const Json* root_;
  GrammarBuilder b_;
  RuleId ws_;
  RuleId char_ = -1, any_ = -1, any_object_ = -1, integer_ = -1, number_ = -1, string_ = -1,
         fraction_ = -1;
  absl::flat_hash_map<std::string, RuleId> refs_;
};

RuleId Compiler::Char() {
  if (char_ >= 0) return char_;
  // Printable ASCII but the quote and the backslash, which must be escaped.
  const ByteSet ascii = ByteSet::Range(0x20, 0x21).Add(0x23, 0x5b).Add(0x5d, 0x7e);
  const Symbol hex = b_.Bytes(ByteSet::Range('0', '9').Add('a', 'f').Add('A', 'F'));
  Seq escape_u = b_.Literal("\\u00");
  escape_u.push_back(hex);
  escape_u.push_back(hex);
  std::vector<Seq> alternatives = {
      {b_.Bytes(ascii)},
      {b_.Bytes(ByteSet::Of('\\')), b_.Bytes(ByteSet::Of('"').Add('\\', '\\').Add('/', '/').Add('b', 'b')
                                                 .Add('f', 'f').Add('n', 'n').Add('r', 'r').Add('t', 't'))},
      escape_u};
  for (Seq& multi : Utf8NonAscii(b_)) alternatives.push_back(std::move(multi));
  char_ = b_.Rule("char", std::move(alternatives));
  return char_;
}

RuleId Compiler::String(int min_length, int max_length) {
  if (min_length == 0 && max_length < 0 && string_ >= 0) return string_;
  const Symbol quote = b_.Bytes(ByteSet::Of('"'));
  RuleId chars = b_.Repeat("chars", {GrammarBuilder::Ref(Char())}, min_length, max_length);
  RuleId r = b_.Rule("string", {{quote, GrammarBuilder::Ref(chars), quote}});
  if (min_length == 0 && max_length < 0) string_ = r;
  return r;
}

absl::StatusOr<RuleId> Compiler::FormattedString(const std::string& format, const std::string& path) {
  auto digit = [&](char lo, char hi) { return b_.Bytes(ByteSet::Range(uint8_t(lo), uint8_t(hi))); };
  auto lit = [&](char c) { return b_.Bytes(ByteSet::Of(uint8_t(c))); };
  const Symbol d = digit('0', '9');
  // Only dates every calendar has (days 01-28), so each validates.
  RuleId month = b_.Rule("month", {{lit('0'), digit('1', '9')}, {lit('1'), digit('0', '2')}});
  RuleId day = b_.Rule("day", {{lit('0'), digit('1', '9')}, {lit('1'), d}, {lit('2'), digit('0', '8')}});
  Seq date = {d, d, d, d, lit('-'), GrammarBuilder::Ref(month), lit('-'), GrammarBuilder::Ref(day)};
  RuleId hour = b_.Rule("hour", {{digit('0', '1'), d}, {lit('2'), digit('0', '3')}});
  const Symbol sixty = digit('0', '5');
  RuleId offset = b_.Rule("offset", {{lit('Z')}, {b_.Bytes(ByteSet::Of('+').Add('-', '-')),
                                                 GrammarBuilder::Ref(hour), lit(':'), sixty, d}});
  RuleId fraction = b_.Rule("fraction", {{lit('.'), Digits(1, 6)}, {}});
  Seq time = {GrammarBuilder::Ref(hour), lit(':'), sixty, d, lit(':'), sixty, d,
              GrammarBuilder::Ref(fraction), GrammarBuilder::Ref(offset)};
  Seq body;
  if (format == "date") {
    body = date;
  } else if (format == "time") {
    body = time;
  } else if (format == "date-time") {
    body = date;
    body.push_back(lit('T'));
    Append(body, time);
  } else if (format == "uuid") {
    const Symbol hex = b_.Bytes(ByteSet::Range('0', '9').Add('a', 'f'));
    for (int group : {8, 4, 4, 4, 12}) {
      if (!body.empty()) body.push_back(lit('-'));
      for (int i = 0; i < group; ++i) body.push_back(hex);
    }
  } else {
    return Unsupported(absl::StrCat("format: ", format), path);
  }
  Seq quoted = {lit('"')};
  Append(quoted, body);
  quoted.push_back(lit('"'));
  return b_.Rule(format, {quoted});
}

RuleId Compiler::Integer() {
  if (integer_ >= 0) return integer_;
  RuleId sign = b_.Rule("sign", {b_.Literal("-"), {}});
  integer_ = b_.Rule("integer", {{GrammarBuilder::Ref(sign), b_.Bytes(ByteSet::Of('0'))},
                                 {GrammarBuilder::Ref(sign), b_.Bytes(ByteSet::Range('1', '9')),
                                  Digits(0, kMaxIntegerDigits - 1)}});
  return integer_;
}

RuleId Compiler::Fraction() {
  if (fraction_ < 0) {
    fraction_ = b_.Rule("fraction", {{b_.Bytes(ByteSet::Of('.')), Digits(1, kMaxFractionDigits)}, {}});
  }
  return fraction_;
}

RuleId Compiler::Number() {
  if (number_ >= 0) return number_;
  RuleId fraction = Fraction();
  RuleId exponent = b_.Rule(
      "exponent", {{b_.Bytes(ByteSet::Of('e').Add('E', 'E')),
                    GrammarBuilder::Ref(b_.Rule("exp_sign", {{b_.Bytes(ByteSet::Of('+').Add('-', '-'))}, {}})),
                    Digits(1, 2)},  // stays within a double's range
                   {}});
  number_ = b_.Rule("number", {{GrammarBuilder::Ref(Integer()), GrammarBuilder::Ref(fraction),
                                GrammarBuilder::Ref(exponent)}});
  return number_;
}

void Compiler::SameLength(const std::string& a, const std::string& b, Seq prefix,
                          std::vector<Seq>* out) {
  if (a.empty()) {
    out->push_back(std::move(prefix));
    return;
  }
  const std::string rest_a = a.substr(1), rest_b = b.substr(1);
  const bool full = rest_a.find_first_not_of('0') == std::string::npos &&
                    rest_b.find_first_not_of('9') == std::string::npos;
  if (full) {  // [a0-b0] then any digits
    prefix.push_back(b_.Bytes(ByteSet::Range(uint8_t(a[0]), uint8_t(b[0]))));
    for (size_t i = 0; i < rest_a.size(); ++i) prefix.push_back(b_.Bytes(ByteSet::Range('0', '9')));
    out->push_back(std::move(prefix));
    return;
  }
  auto with = [&](uint8_t lo, uint8_t hi) {
    Seq p = prefix;
    p.push_back(b_.Bytes(ByteSet::Range(lo, hi)));
    return p;
  };
  if (a[0] == b[0]) {
    SameLength(rest_a, rest_b, with(uint8_t(a[0]), uint8_t(a[0])), out);
    return;
  }
  SameLength(rest_a, std::string(rest_a.size(), '9'), with(uint8_t(a[0]), uint8_t(a[0])), out);
  if (b[0] - a[0] > 1) {
    SameLength(std::string(rest_a.size(), '0'), std::string(rest_a.size(), '9'),
               with(uint8_t(a[0] + 1), uint8_t(b[0] - 1)), out);
  }
  SameLength(std::string(rest_b.size(), '0'), rest_b, with(uint8_t(b[0]), uint8_t(b[0])), out);
}

std::vector<Seq> Compiler::DigitRange(int64_t lo, int64_t hi) {
  std::vector<Seq> out;
  const std::string l = std::to_string(lo), h = std::to_string(hi);
  for (size_t len = l.size(); len <= h.size(); ++len) {
    const std::string a = len == l.size() ? l : "1" + std::string(len - 1, '0');
    const std::string b = len == h.size() ? h : std::string(len, '9');
    SameLength(a, b, {}, &out);
  }
  return out;
}

std::vector<Seq> Compiler::NonNegative(int64_t lo, bool lo_open, int64_t hi, bool hi_open,
                                                bool integer) {
  const int64_t top = std::stoll(std::string(kMaxIntegerDigits, '9'));
  std::vector<Seq> out;
  // Whole parts that take any fraction: [lo (+1 when open), hi - 1], or to
  // the top without hi; an integer schema's whole parts reach hi itself.
  const int64_t first = lo + (lo_open ? 1 : 0);
  const int64_t last = hi < 0 ? top : hi - ((integer && !hi_open) ? 0 : 1);
  if (first <= last) {
    for (Seq seq : DigitRange(first, std::min(last, top))) {
      if (!integer) seq.push_back(GrammarBuilder::Ref(Fraction()));
      out.push_back(std::move(seq));
    }
  }
  if (!integer && lo_open && (hi < 0 || lo < hi)) {  // lo itself with a fraction that is not 0
    const int half = kMaxFractionDigits / 2;
    RuleId nonzero = b_.Rule("nonzero_fraction", {{Lit("."), Digits(0, half - 1),
                                                   b_.Bytes(ByteSet::Range('1', '9')), Digits(0, half)}});
    for (Seq seq : DigitRange(lo, lo)) {
      seq.push_back(GrammarBuilder::Ref(nonzero));
      out.push_back(std::move(seq));
    }
  }
  if (!integer && hi >= 0 && !hi_open && hi >= first && hi <= top) {  // hi itself, no fraction
    for (Seq seq : DigitRange(hi, hi)) out.push_back(std::move(seq));
  }
  return out;
}

absl::StatusOr<RuleId> Compiler::BoundedNumber(const Json& s, bool integer, const std::string& path) {
  // The bounds, as whole numbers: an integer schema rounds them inward; a
  // number schema refuses fractional ones.
  std::optional<int64_t> lo, hi;
  bool lo_open = false, hi_open = false;
  for (const char* key : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
    auto it = s.find(key);
    if (it == s.end()) continue;
    const std::string k = key;
    if (!it->is_number()) return Bad(path + "/" + k, "must be a number");
    const double v = it->get<double>();
    if (std::abs(v) >= 1e15) return Unsupported(k + " beyond 1e15", path);
    const bool is_min = k.find("inimum") != std::string::npos;
    const bool open = k.rfind("exclusive", 0) == 0;
    int64_t whole;
    if (v == std::floor(v)) {
      whole = int64_t(v);
    } else if (integer) {  // the integers inside: strict bounds become inclusive
      whole = int64_t(is_min ? std::ceil(v) : std::floor(v));
    } else {
      return Unsupported(k + " (not a whole number, on a number)", path);
    }
    const bool now_open = open && v == std::floor(v);
    if (is_min) {
      if (!lo || whole > *lo || (whole == *lo && now_open)) { lo = whole; lo_open = now_open; }
    } else {
      if (!hi || whole < *hi || (whole == *hi && now_open)) { hi = whole; hi_open = now_open; }
    }
  }
  std::vector<Seq> alternatives;
  // v >= 0: NonNegative over [max(lo, 0), hi]; v < 0: "-" then w = -v > 0
  // over [max(-hi, 0) (open at 0), -lo].
  if (!hi || *hi > 0 || (*hi == 0 && !hi_open)) {
    const bool from_lo = lo && (*lo > 0 || (*lo == 0 && lo_open));
    for (Seq& seq : NonNegative(from_lo ? *lo : 0, from_lo && lo_open, hi ? *hi : -1, hi_open, integer)) {
      alternatives.push_back(std::move(seq));
    }
  }
  if (!lo || *lo < 0) {
    const bool from_hi = hi && *hi < 0;
    const int64_t w_lo = from_hi ? -*hi : 0;
    const bool w_lo_open = from_hi ? hi_open : true;  // w > 0: "-0" is left out
    for (Seq seq : NonNegative(w_lo, w_lo_open, lo ? -*lo : -1, lo_open, integer)) {
      seq.insert(seq.begin(), Lit("-"));
      alternatives.push_back(std::move(seq));
    }
  }
  if (alternatives.empty()) return Bad(path, "the bounds leave no value");
  return b_.Rule(path, std::move(alternatives));
}

RuleId Compiler::Map(RuleId key, RuleId value) {
  Seq member = {GrammarBuilder::Ref(key), Ws(), Lit(":"), Ws(), GrammarBuilder::Ref(value), Ws()};
  RuleId members = b_.Repeat("members", member, 0, -1, {Lit(","), Ws()});
  return b_.Rule("object", {{Lit("{"), Ws(), GrammarBuilder::Ref(members), Lit("}")}});
}

RuleId Compiler::AnyValue() {
  if (any_ >= 0) return any_;
  any_ = b_.Declare("value");
  RuleId array_items = b_.Repeat("items", {GrammarBuilder::Ref(any_), Ws()}, 0, -1, {Lit(","), Ws()});
  RuleId array = b_.Rule("array", {{Lit("["), Ws(), GrammarBuilder::Ref(array_items), Lit("]")}});
  b_.Define(any_, {{GrammarBuilder::Ref(AnyObject())},
                   {GrammarBuilder::Ref(array)},
                   {GrammarBuilder::Ref(String(0, -1))},
                   {GrammarBuilder::Ref(Number())},
                   {Lit("true")},
                   {Lit("false")},
                   {Lit("null")}});
  return any_;
}

RuleId Compiler::AnyObject() {
  if (any_object_ >= 0) return any_object_;
  if (any_ < 0) return AnyValue(), any_object_;  // AnyValue defines it
  any_object_ = Map(String(0, -1), any_);
  return any_object_;
}

absl::StatusOr<int> Compiler::Count(const Json& s, const char* key, int fallback,
                                    const std::string& path) {
  auto it = s.find(key);
  if (it == s.end()) return fallback;
  if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > 100000) {
    return Bad(path, absl::StrCat("'", key, "' must be an integer in [0, 100000]"));
  }
  return int(it->get<int64_t>());
}

absl::StatusOr<RuleId> Compiler::Ref(const std::string& ref, const std::string& path) {
  if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
  if (ref.empty() || ref[0] != '#') return Unsupported(absl::StrCat("$ref: ", ref), path);
  const Json* target = nullptr;
  try {
    target = &root_->at(Json::json_pointer(ref.substr(1)));
  } catch (const Json::exception&) {
    return Bad(path, absl::StrCat("$ref '", ref, "' names nothing in the schema"));
  }
  RuleId rule = b_.Declare(ref);  // declared first: the target may refer to itself
  refs_[ref] = rule;
  absl::StatusOr<RuleId> body = Compile(*target, ref);
  if (!body.ok()) return body.status();
  b_.Define(rule, {{GrammarBuilder::Ref(*body)}});
  return rule;
}

absl::StatusOr<RuleId> Compiler::OneOfSchemas(const Json& list, const std::string& path) {
  if (!list.is_array() || list.empty()) return Bad(path, "must be a non-empty array of schemas");
  std::vector<Seq> alternatives;
  for (size_t i = 0; i < list.size(); ++i) {
    absl::StatusOr<RuleId> r = Compile(list[i], absl::StrCat(path, "/", i));
    if (!r.ok()) return r.status();
    alternatives.push_back({GrammarBuilder::Ref(*r)});
  }
  return b_.Rule(path, std::move(alternatives));
}

absl::StatusOr<RuleId> Compiler::Object(const Json& s, const std::string& path) {
  auto extra = s.find("additionalProperties");
  auto props = s.find("properties");
  const bool has_props = props != s.end() && !props->empty();
  if (!has_props) {
    if (extra != s.end() && extra->is_boolean() && !extra->get<bool>()) return LiteralRule("{}");
    if (extra == s.end() || extra->is_boolean()) return AnyObject();
    absl::StatusOr<RuleId> value = Compile(*extra, path + "/additionalProperties");
    if (!value.ok()) return value.status();
    return Map(String(0, -1), *value);
  }
  if (!props->is_object()) return Bad(path + "/properties", "must be an object");
  if (extra != s.end() && !(extra->is_boolean() && !extra->get<bool>())) {
    return Unsupported("additionalProperties (beside properties)", path);
  }
  absl::flat_hash_set<std::string> required;
  if (auto r = s.find("required"); r != s.end()) {
    if (!r->is_array()) return Bad(path + "/required", "must be an array of names");
    for (const Json& name : *r) {
      if (!name.is_string()) return Bad(path + "/required", "must be an array of names");
      if (!props->contains(name.get<std::string>())) {
        return Bad(path + "/required", absl::StrCat("'", name.get<std::string>(),
                                                    "' is required but not in properties"));
      }
      required.insert(name.get<std::string>());
    }
  }
  struct Prop {
    Seq text;  // "key" ws : ws value ws
    bool required;
  };
  std::vector<Prop> list;
  for (const auto& [name, schema] : props->items()) {
    absl::StatusOr<RuleId> value = Compile(schema, absl::StrCat(path, "/properties/", name));
    if (!value.ok()) return value.status();
    Seq text = {Lit(Json(name).dump()), Ws(), Lit(":"), Ws(), GrammarBuilder::Ref(*value), Ws()};
    list.push_back({std::move(text), required.contains(name)});
  }
  // rest[i][first]: the properties from i on, `first` when none came yet;
  // a property after another is preceded by `,` ws.
  const size_t n = list.size();
  std::vector<std::array<RuleId, 2>> rest(n + 1);
  rest[n] = {b_.Rule("end", {{}}), b_.Rule("end", {{}})};
  for (size_t i = n; i-- > 0;) {
    for (int first = 0; first < 2; ++first) {
      Seq emit;
      if (!first) emit = {Lit(","), Ws()};
      Append(emit, list[i].text);
      emit.push_back(GrammarBuilder::Ref(rest[i + 1][0]));
      std::vector<Seq> alternatives = {emit};
      if (!list[i].required) alternatives.push_back({GrammarBuilder::Ref(rest[i + 1][size_t(first)])});
      rest[i][size_t(first)] = b_.Rule(absl::StrCat(path, "/", i), std::move(alternatives));
    }
  }
  return b_.Rule(path, {{Lit("{"), Ws(), GrammarBuilder::Ref(rest[0][1]), Lit("}")}});
}

absl::StatusOr<RuleId> Compiler::Array(const Json& s, const std::string& path) {
  absl::StatusOr<int> min_items = Count(s, "minItems", 0, path);
  absl::StatusOr<int> max_items = Count(s, "maxItems", -1, path);
  if (!min_items.ok()) return min_items.status();
  if (!max_items.ok()) return max_items.status();
  if (*max_items >= 0 && *max_items < *min_items) return Bad(path, "maxItems < minItems");
  std::vector<RuleId> prefix;
  if (auto p = s.find("prefixItems"); p != s.end()) {
    if (!p->is_array()) return Bad(path + "/prefixItems", "must be an array of schemas");
    for (size_t i = 0; i < p->size(); ++i) {
      absl::StatusOr<RuleId> r = Compile((*p)[i], absl::StrCat(path, "/prefixItems/", i));
      if (!r.ok()) return r.status();
      prefix.push_back(*r);
    }
  }
  std::optional<RuleId> item;  // of the items after the prefix; none: no more
  auto items = s.find("items");
  if (items == s.end()) {
    if (prefix.empty()) item = AnyValue();
  } else if (!(items->is_boolean() && !items->get<bool>())) {
    absl::StatusOr<RuleId> r = Compile(*items, path + "/items");
    if (!r.ok()) return r.status();
    item = *r;
  }
  const int fixed = int(prefix.size());
  if (!item && *min_items > fixed) return Bad(path, "minItems exceeds the items allowed");
  // The prefix items present (a count k), then the rest: with k < fixed
  // the array ends after k items (only when k >= minItems).
  const int max_total = *max_items < 0 ? -1 : *max_items;
  std::vector<Seq> alternatives;
  Seq seq = {Lit("["), Ws()};
  for (int k = 0; k <= fixed; ++k) {
    if (max_total >= 0 && k > max_total) break;
    if (k == fixed) {
      Seq full = seq;
      if (item) {
        const int min_rest = std::max(0, *min_items - fixed);
        const int max_rest = max_total < 0 ? -1 : max_total - fixed;
        Seq element = {GrammarBuilder::Ref(*item), Ws()};
        if (fixed > 0) {  // each further item follows a comma
          Seq step = {Lit(","), Ws(), GrammarBuilder::Ref(*item), Ws()};
          full.push_back(GrammarBuilder::Ref(b_.Repeat("more", step, min_rest, max_rest)));
        } else {
          full.push_back(GrammarBuilder::Ref(
              b_.Repeat("elements", element, min_rest, max_rest, {Lit(","), Ws()})));
        }
      }
      full.push_back(Lit("]"));
      if (k >= *min_items || item) alternatives.push_back(full);
      break;
    }
    if (k >= *min_items) {
      Seq ended = seq;
      ended.push_back(Lit("]"));
      alternatives.push_back(ended);
    }
    if (k > 0) Append(seq, {Lit(","), Ws()});
    Append(seq, {GrammarBuilder::Ref(prefix[size_t(k)]), Ws()});
  }
  return b_.Rule(path, std::move(alternatives));
}

absl::StatusOr<RuleId> Compiler::Typed(const std::string& type, const Json& s,
                                       const std::string& path) {
  if (type == "string") {
    if (auto p = s.find("pattern"); p != s.end()) {
      if (!p->is_string()) return Bad(path + "/pattern", "must be a string");
      for (const char* other : {"format", "minLength", "maxLength"}) {
        if (s.contains(other)) return Unsupported(absl::StrCat(other, " (beside pattern)"), path);
      }
      absl::StatusOr<RuleId> body = JsonStringPattern(b_, p->get<std::string>());
      if (!body.ok()) return Bad(path + "/pattern", std::string(body.status().message()));
      const Symbol quote = b_.Bytes(ByteSet::Of('"'));
      return b_.Rule("pattern_string", {{quote, GrammarBuilder::Ref(*body), quote}});
    }
    if (auto f = s.find("format"); f != s.end()) {
      if (!f->is_string()) return Bad(path + "/format", "must be a string");
      if (s.contains("minLength") || s.contains("maxLength")) {
        return Unsupported("minLength/maxLength (beside format)", path);
      }
      return FormattedString(f->get<std::string>(), path);
    }
    absl::StatusOr<int> min_length = Count(s, "minLength", 0, path);
    absl::StatusOr<int> max_length = Count(s, "maxLength", -1, path);
    if (!min_length.ok()) return min_length.status();
    if (!max_length.ok()) return max_length.status();
    if (*max_length >= 0 && *max_length < *min_length) return Bad(path, "maxLength < minLength");
    return String(*min_length, *max_length);
  }
  if (type == "integer" || type == "number") {
    for (const char* bound : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
      if (s.contains(bound)) return BoundedNumber(s, type == "integer", path);
    }
    return type == "integer" ? Integer() : Number();
  }
  if (type == "boolean") return b_.Rule("boolean", {b_.Literal("true"), b_.Literal("false")});
  if (type == "null") return LiteralRule("null");
  if (type == "object") return Object(s, path);
  if (type == "array") return Array(s, path);
  return Bad(path + "/type", absl::StrCat("unknown type '", type, "'"));
}

absl::StatusOr<RuleId> Compiler::Compile(const Json& s, const std::string& path) {
  if (s.is_boolean()) {
    if (s.get<bool>()) return AnyValue();
    return Bad(path, "the schema false accepts nothing");
  }
  if (!s.is_object()) return Bad(path, "a schema must be an object or a boolean");
  bool validates = false;  // any keyword besides annotations
  for (const auto& [key, value] : s.items()) {
    if (Annotations().contains(key)) continue;
    if (!Supported().contains(key)) return Unsupported(key, path);
    validates = true;
  }
  if (!validates) return AnyValue();
  auto sole = [&](const char* key) -> absl::Status {
    for (const auto& [k, v] : s.items()) {
      if (k != key && !Annotations().contains(k)) {
        return Unsupported(absl::StrCat(k, " (beside ", key, ")"), path);
      }
    }
    return absl::OkStatus();
  };
  if (auto r = s.find("$ref"); r != s.end()) {
    RETURN_IF_ERROR(sole("$ref"));
    if (!r->is_string()) return Bad(path + "/$ref", "must be a string");
    return Ref(r->get<std::string>(), path);
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    if (auto r = s.find(key); r != s.end()) {
      RETURN_IF_ERROR(sole(key));
      return OneOfSchemas(*r, absl::StrCat(path, "/", key));
    }
  }
  if (auto r = s.find("allOf"); r != s.end()) {
    RETURN_IF_ERROR(sole("allOf"));
    if (!r->is_array() || r->size() != 1) return Unsupported("allOf (of more than one schema)", path);
    return Compile((*r)[0], path + "/allOf/0");
  }
  std::vector<std::string> types;
  if (auto t = s.find("type"); t != s.end()) {
    if (t->is_string()) {
      types.push_back(t->get<std::string>());
    } else if (t->is_array() && !t->empty()) {
      for (const Json& name : *t) {
        if (!name.is_string()) return Bad(path + "/type", "must be a name or a list of names");
        types.push_back(name.get<std::string>());
      }
    } else {
      return Bad(path + "/type", "must be a name or a list of names");
    }
  }
  auto type_of = [](const Json& v) -> std::string {
    if (v.is_string()) return "string";
    if (v.is_number_integer() || v.is_number_unsigned()) return "integer";
    if (v.is_number()) return "number";
    if (v.is_boolean()) return "boolean";
    if (v.is_null()) return "null";
    if (v.is_array()) return "array";
    return "object";
  };
  auto type_allows = [&](const Json& v) {
    if (types.empty()) return true;
    const std::string t = type_of(v);
    for (const std::string& allowed : types) {
      if (allowed == t || (allowed == "number" && t == "integer")) return true;
    }
    return false;
  };
  if (s.contains("const") || s.contains("enum")) {
    std::vector<Json> values;
    if (auto c = s.find("const"); c != s.end()) values.push_back(*c);
    if (auto e = s.find("enum"); e != s.end()) {
      if (!e->is_array() || e->empty()) return Bad(path + "/enum", "must be a non-empty array");
      for (const Json& v : *e) {
        if (s.contains("const") && v != s["const"]) continue;
        values.push_back(v);
      }
    }
    std::vector<Seq> alternatives;
    for (const Json& v : values) {
      if (type_allows(v)) alternatives.push_back({Lit(v.dump())});
    }
    if (alternatives.empty()) return Bad(path, "no value of enum/const has the schema's type");
    return b_.Rule(path, std::move(alternatives));
  }
  if (types.empty()) {  // the type the keywords imply
    if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required")) {
      types.push_back("object");
    } else if (s.contains("items") || s.contains("prefixItems") || s.contains("minItems") ||
               s.contains("maxItems")) {
      types.push_back("array");
    } else if (s.contains("minLength") || s.contains("maxLength") || s.contains("format") ||
               s.contains("pattern")) {
      types.push_back("string");
    } else {
      return AnyValue();
    }
  }
  if (types.size() == 1) return Typed(types[0], s, path);
  std::vector<Seq> alternatives;
  for (const std::string& t : types) {
    absl::StatusOr<RuleId> r = Typed(t, s, path);
    if (!r.ok()) return r.status();
    alternatives.push_back({GrammarBuilder::Ref(*r)});
  }
  return b_.Rule(path, std::move(alternatives));
}

}  // namespace

absl::StatusOr<Grammar> JsonObjectGrammar() {
  Compiler c(nullptr);
  return c.Finish(c.AnyObject());
}

absl::StatusOr<Grammar> JsonSchemaGrammar(const Json& schema, std::string_view prefix,
                                          std::string_view suffix) {
  Compiler c(&schema);
  absl::StatusOr<RuleId> root = c.Compile(schema, "#");
  if (!root.ok()) return root.status();
  if (prefix.empty() && suffix.empty()) return c.Finish(*root);
  return c.Finish(c.Around(prefix, *root, suffix));
}

}  // namespace kvcast::grammar
