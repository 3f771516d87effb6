#include "engine/grammar/ebnf.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace kvcast::grammar {
namespace {

using Seq = GrammarBuilder::Seq;
using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

constexpr int kMaxCount = 1000;
constexpr uint32_t kMaxCodePoint = 0x10ffff;

bool NameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

class Parser {
 public:
  explicit Parser(std::string_view text) : t_(text) {}

  absl::StatusOr<Grammar> Parse() {
    for (SkipSpace(); pos_ < t_.size(); SkipSpace()) {
      const size_t at = pos_;
      const std::string name = Name();
      if (name.empty()) return Fail("expected a rule name");
      SkipSpace();
      if (t_.substr(pos_, 3) != "::=") return Fail(absl::StrCat("expected '::=' after '", name, "'"));
      pos_ += 3;
      if (defined_.contains(name)) {
        pos_ = at;
        return Fail(absl::StrCat("rule '", name, "' is defined twice"));
      }
      defined_[name] = true;
      rule_ = name;
      groups_ = 0;
      ASSIGN_OR_RETURN(std::vector<Seq> alternatives, Alternatives());
      b_.Define(RuleNamed(name), std::move(alternatives));
    }
    for (const auto& [name, at] : used_) {
      if (!defined_.contains(name)) {
        pos_ = at;
        return Fail(absl::StrCat("rule '", name, "' is used but not defined"));
      }
    }
    if (!defined_.contains("root")) {
      return absl::InvalidArgumentError("grammar: no rule 'root' (where the output starts)");
    }
    absl::StatusOr<Grammar> g = b_.Build(RuleNamed("root"));
    if (!g.ok()) return absl::InvalidArgumentError(absl::StrCat("grammar: ", g.status().message()));
    return g;
  }

 private:
  absl::Status Fail(const std::string& what) const {
    int line = 1, column = 1;
    for (size_t i = 0; i < pos_ && i < t_.size(); ++i) {
      if (t_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    return absl::InvalidArgumentError(absl::StrCat("grammar: line ", line, ", column ", column, ": ", what));
  }

  // Spaces, tabs, newlines and # comments.
  void SkipSpace() {
    while (pos_ < t_.size()) {
      const char c = t_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else if (c == '#') {
        while (pos_ < t_.size() && t_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  std::string Name() {
    const size_t start = pos_;
    while (pos_ < t_.size() && NameChar(t_[pos_])) ++pos_;
    return std::string(t_.substr(start, pos_ - start));
  }

  // At `name ::=`: the next rule starts here.
  bool AtRuleStart() {
    const size_t save = pos_;
    const bool named = !Name().empty();
    SkipSpace();
    const bool yes = named && t_.substr(pos_, 3) == "::=";
    pos_ = save;
    return yes;
  }

  RuleId RuleNamed(const std::string& name) {
    auto [it, fresh] = rules_.try_emplace(name, 0);
    if (fresh) it->second = b_.Declare(name);
    return it->second;
  }

  // A helper rule's name: the rule being defined, numbered.
  std::string Helper() { return absl::StrCat(rule_, "_", ++groups_); }

  absl::StatusOr<std::vector<Seq>> Alternatives() {
    std::vector<Seq> out;
    for (;;) {
      ASSIGN_OR_RETURN(Seq seq, Sequence());
      out.push_back(std::move(seq));
      SkipSpace();
      if (pos_ >= t_.size() || t_[pos_] != '|') return out;
      ++pos_;
    }
  }

  absl::StatusOr<Seq> Sequence() {
    Seq seq;
    for (;;) {
      SkipSpace();
      if (pos_ >= t_.size() || t_[pos_] == '|' || t_[pos_] == ')' || AtRuleStart()) return seq;
      ASSIGN_OR_RETURN(Seq item, Item());
      Append(seq, item);
    }
  }

  // A primary and its repetitions.
  absl::StatusOr<Seq> Item() {
    ASSIGN_OR_RETURN(Seq item, Primary());
    for (;;) {
      if (pos_ >= t_.size()) return item;
      int min = 0, max = -1;
      const char c = t_[pos_];
      if (c == '*') {
        ++pos_;
      } else if (c == '+') {
        ++pos_;
        min = 1;
      } else if (c == '?') {
        ++pos_;
        max = 1;
      } else if (c == '{') {
        ++pos_;
        RETURN_IF_ERROR(Counts(&min, &max));
      } else {
        return item;
      }
      item = Seq{GrammarBuilder::Ref(b_.Repeat(Helper(), item, min, max))};
    }
  }

  // After '{': "m}", "m,}" or "m,n}".
  absl::Status Counts(int* min, int* max) {
    auto number = [&](int* out) -> absl::Status {
      SkipSpace();
      const size_t start = pos_;
      int64_t v = 0;
      while (pos_ < t_.size() && t_[pos_] >= '0' && t_[pos_] <= '9' && v <= kMaxCount) {
        v = v * 10 + (t_[pos_++] - '0');
      }
      if (pos_ == start) return Fail("expected a count");
      if (v > kMaxCount) return Fail(absl::StrCat("a count above ", kMaxCount));
      *out = int(v);
      SkipSpace();
      return absl::OkStatus();
    };
    RETURN_IF_ERROR(number(min));
    *max = *min;
    if (pos_ < t_.size() && t_[pos_] == ',') {
      ++pos_;
      SkipSpace();
      *max = -1;
      if (pos_ < t_.size() && t_[pos_] != '}') RETURN_IF_ERROR(number(max));
    }
    if (pos_ >= t_.size() || t_[pos_] != '}') return Fail("expected '}'");
    ++pos_;
    if (*max >= 0 && *max < *min) return Fail(absl::StrCat("{", *min, ",", *max, "}: the maximum is below the minimum"));
    return absl::OkStatus();
  }

  absl::StatusOr<Seq> Primary() {
    const char c = t_[pos_];
    if (c == '"' || c == '\'') return Literal(c);
    if (c == '[') return Class();
    if (c == '.') {
      ++pos_;
      return Characters({{0, kMaxCodePoint}});
    }
    if (c == '(') {
      ++pos_;
      ASSIGN_OR_RETURN(std::vector<Seq> alternatives, Alternatives());
      if (pos_ >= t_.size() || t_[pos_] != ')') return Fail("expected ')'");
      ++pos_;
      if (alternatives.size() == 1) return alternatives[0];
      return Seq{GrammarBuilder::Ref(b_.Rule(Helper(), std::move(alternatives)))};
    }
    if (NameChar(c)) {
      const size_t at = pos_;
      const std::string name = Name();
      used_.emplace_back(name, at);
      return Seq{GrammarBuilder::Ref(RuleNamed(name))};
    }
    return Fail(absl::StrCat("unexpected '", std::string(1, c), "'"));
  }

  absl::StatusOr<Seq> Literal(char quote) {
    ++pos_;
    std::string bytes;
    for (;;) {
      if (pos_ >= t_.size()) return Fail("unterminated string");
      if (t_[pos_] == quote) break;
      ASSIGN_OR_RETURN(uint32_t cp, CodePoint());
      AppendUtf8(cp, &bytes);
    }
    ++pos_;
    return b_.Literal(bytes);
  }

  absl::StatusOr<Seq> Class() {
    ++pos_;
    bool negate = false;
    if (pos_ < t_.size() && t_[pos_] == '^') {
      negate = true;
      ++pos_;
    }
    Ranges ranges;
    for (;;) {
      if (pos_ >= t_.size()) return Fail("unterminated character class");
      if (t_[pos_] == ']') break;
      ASSIGN_OR_RETURN(uint32_t lo, CodePoint());
      uint32_t hi = lo;
      if (pos_ + 1 < t_.size() && t_[pos_] == '-' && t_[pos_ + 1] != ']') {
        ++pos_;
        ASSIGN_OR_RETURN(hi, CodePoint());
        if (hi < lo) return Fail("a character range that runs backwards");
      }
      ranges.emplace_back(lo, hi);
    }
    ++pos_;
    if (negate) {
      std::sort(ranges.begin(), ranges.end());
      Ranges rest;
      uint32_t next = 0;
      for (auto [lo, hi] : ranges) {
        if (lo > next) rest.emplace_back(next, lo - 1);
        next = std::max(next, hi + 1);
      }
      if (next <= kMaxCodePoint) rest.emplace_back(next, kMaxCodePoint);
      ranges = std::move(rest);
    }
    if (ranges.empty()) return Fail("a character class that admits no character");
    return Characters(ranges);
  }

  // One character of `ranges`: a byte set for the ASCII ones, a rule of
  // UTF-8 sequences beside it for the others.
  Seq Characters(const Ranges& ranges) {
    ByteSet ascii;
    Ranges wide;
    for (auto [lo, hi] : ranges) {
      if (lo < 0x80) ascii.Add(uint8_t(lo), uint8_t(std::min<uint32_t>(hi, 0x7f)));
      if (hi >= 0x80) wide.emplace_back(std::max<uint32_t>(lo, 0x80), hi);
    }
    if (wide.empty()) return Seq{b_.Bytes(ascii)};
    std::vector<Seq> alternatives = Utf8CodePoints(b_, wide);
    if (!ascii.Empty()) alternatives.push_back(Seq{b_.Bytes(ascii)});
    return Seq{GrammarBuilder::Ref(b_.Rule(Helper(), std::move(alternatives)))};
  }

  // One character of a string or class: an escape, or a UTF-8 character.
  absl::StatusOr<uint32_t> CodePoint() {
    const auto c = uint8_t(t_[pos_]);
    if (c == '\\') {
      if (++pos_ >= t_.size()) return Fail("a '\\' at the end");
      const char e = t_[pos_++];
      switch (e) {
        case 'n': return uint32_t('\n');
        case 'r': return uint32_t('\r');
        case 't': return uint32_t('\t');
        case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/':
          return uint32_t(uint8_t(e));
        case 'x': return Hex(2);
        case 'u': return Hex(4);
        case 'U': return Hex(8);
        default:
          --pos_;
          return Fail(absl::StrCat("unknown escape '\\", std::string(1, e), "'"));
      }
    }
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || pos_ + n > t_.size()) return Fail("invalid UTF-8");
    uint32_t cp = n == 1 ? c : c & (0x7f >> n);
    for (int i = 1; i < n; ++i) {
      const auto k = uint8_t(t_[pos_ + i]);
      if ((k >> 6) != 2) return Fail("invalid UTF-8");
      cp = cp << 6 | (k & 0x3f);
    }
    pos_ += size_t(n);
    return cp;
  }

  absl::StatusOr<uint32_t> Hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i, ++pos_) {
      const char h = pos_ < t_.size() ? t_[pos_] : '\0';
      const int d = h >= '0' && h <= '9' ? h - '0'
                    : h >= 'a' && h <= 'f' ? h - 'a' + 10
                    : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                           : -1;
      if (d < 0) return Fail(absl::StrCat("expected ", digits, " hex digits"));
      v = v << 4 | uint32_t(d);
    }
    if (v > kMaxCodePoint || (v >= 0xd800 && v <= 0xdfff)) return Fail("not a Unicode scalar value");
    return v;
  }

  const std::string_view t_;
  size_t pos_ = 0;
  GrammarBuilder b_;
  absl::flat_hash_map<std::string, RuleId> rules_;
  absl::flat_hash_map<std::string, bool> defined_;
  std::vector<std::pair<std::string, size_t>> used_;  // rule names referred to, and where
  std::string rule_;  // the rule being defined
  int groups_ = 0;    // its helper rules so far
};

}  // namespace

absl::StatusOr<Grammar> EbnfGrammar(std::string_view text) { return Parser(text).Parse(); }

}  // namespace kvcast::grammar
