#include "engine/grammar/regex.h"

#include <cctype>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kvcast::grammar {
namespace {

using Seq = GrammarBuilder::Seq;

constexpr int kMaxCount = 1000;

// The characters of a class: ASCII as a set, non-ASCII ones listed; a
// negated class keeps its ASCII complement and takes every non-ASCII
// character.
struct CharClass {
  ByteSet ascii;                   // within 0x00-0x7f
  std::vector<uint32_t> others;    // non-ASCII code points
  bool any_non_ascii = false;
  bool spaces = false;             // has \s (whose Unicode spaces are not in `others`)
};

class RegexCompiler {
 public:
  RegexCompiler(GrammarBuilder& b, std::string_view pattern, bool raw)
      : b_(b), p_(pattern), raw_(raw) {}

  absl::StatusOr<RuleId> Compile() {
    size_t end = p_.size();
    bool anchored_start = false, anchored_end = false;
    if (!p_.empty() && p_[0] == '^') {
      anchored_start = true;
      pos_ = 1;
    }
    if (end > pos_ && p_[end - 1] == '$' && !Escaped(end - 1)) {
      anchored_end = true;
      --end;
    }
    end_ = end;
    absl::StatusOr<Seq> body = Alternation();
    if (!body.ok()) return body.status();
    if (pos_ != end_) return Refuse(absl::StrCat("an unmatched ')' at ", pos_));
    Seq all;
    if (!anchored_start && !raw_) all.push_back(AnyText());
    Append(all, *body);
    if (!anchored_end && !raw_) all.push_back(AnyText());
    return b_.Rule("pattern", {all});
  }

 private:
  absl::Status Refuse(const std::string& what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported pattern ", std::string(p_), ": ", what));
  }
  // The backslashes before `at` are odd in number.
  bool Escaped(size_t at) const {
    size_t n = 0;
    while (at > n && p_[at - 1 - n] == '\\') ++n;
    return n % 2 == 1;
  }
  bool More() const { return pos_ < end_; }

  // One character as JSON writes it inside a string.
  Seq JsonChar(uint32_t cp) {
    std::string text;
    if (raw_) {
      AppendUtf8(cp, &text);
      return b_.Literal(text);
    }
    switch (cp) {
      case '"': text = "\\\""; break;
      case '\\': text = "\\\\"; break;
      case '\n': text = "\\n"; break;
      case '\t': text = "\\t"; break;
      case '\r': text = "\\r"; break;
      case '\b': text = "\\b"; break;
      case '\f': text = "\\f"; break;
      default:
        if (cp < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
          text = buf;
        } else {
          AppendUtf8(cp, &text);
        }
    }
    return b_.Literal(text);
  }
  // The next code point of the pattern (UTF-8).
  uint32_t NextCodePoint() {
    const uint8_t c = uint8_t(p_[pos_++]);
    if (c < 0x80) return c;
    const int extra = c >= 0xf0 ? 3 : c >= 0xe0 ? 2 : 1;
    uint32_t cp = c & (0x3f >> extra);
    for (int i = 0; i < extra && pos_ < p_.size(); ++i) cp = (cp << 6) | (uint8_t(p_[pos_++]) & 0x3f);
    return cp;
  }

  // A class as one symbol: a rule of its characters' JSON forms.
  Symbol ClassSymbol(const CharClass& c) {
    std::vector<Seq> alternatives;
    ByteSet plain;  // raw: every ASCII member; JSON: those written as themselves
    for (int ch = 0; ch < 0x80; ++ch) {
      const bool as_is = raw_ || (ch >= 0x20 && ch < 0x7f && ch != '"' && ch != '\\');
      if (!c.ascii.Has(uint8_t(ch))) continue;
      if (as_is) {
        plain.Add(uint8_t(ch), uint8_t(ch));
      } else {
        alternatives.push_back(JsonChar(uint32_t(ch)));
      }
    }
    if (!plain.Empty()) alternatives.insert(alternatives.begin(), Seq{b_.Bytes(plain)});
    if (c.any_non_ascii) {
      for (Seq& s : Utf8NonAscii(b_)) alternatives.push_back(std::move(s));
    } else {
      for (uint32_t cp : c.others) alternatives.push_back(JsonChar(cp));
    }
    return GrammarBuilder::Ref(b_.Rule("class", std::move(alternatives)));
  }

  // Any text, for an unanchored side: every character a JSON string holds.
  Symbol AnyText() {
    CharClass all;
    all.ascii = ByteSet::Range(0x00, 0x7f);
    all.any_non_ascii = true;
    return GrammarBuilder::Ref(b_.Repeat("any", {ClassSymbol(all)}, 0, -1));
  }

  // \d \w \s and their negations, into `c`.
  static bool ShortClass(char e, CharClass* c) {
    ByteSet set;
    switch (e) {
      case 'd': case 'D': set = ByteSet::Range('0', '9'); break;
      case 'w': case 'W': set = ByteSet::Range('0', '9').Add('a', 'z').Add('A', 'Z').Add('_', '_'); break;
      case 's': case 'S': set = ByteSet::Of(' ').Add('\t', '\r'); break;
      default: return false;
    }
    if (e >= 'A' && e <= 'Z') {  // the complement: other ASCII, and non-ASCII for \D \W
      c->ascii.Add(set.Complement());
      c->any_non_ascii = c->any_non_ascii || e != 'S';  // \S: not the Unicode spaces either
    } else {
      c->ascii.Add(set);
      c->spaces = c->spaces || e == 's';
    }
    return true;
  }

  // After a backslash: a single character's code point, or a short class
  // into `c` (then nullopt).
  absl::StatusOr<std::optional<uint32_t>> Escape(CharClass* c) {
    if (!More()) return Refuse("a trailing backslash");
    const char e = p_[pos_++];
    if (ShortClass(e, c)) return std::optional<uint32_t>();
    auto hex = [&](int digits) -> absl::StatusOr<std::optional<uint32_t>> {
      if (pos_ + size_t(digits) > end_) return Refuse(absl::StrCat("a short \\", std::string(1, e), " escape"));
      uint32_t v = 0;
      for (int i = 0; i < digits; ++i) {
        const char h = p_[pos_++];
        if (!std::isxdigit(uint8_t(h))) return Refuse(absl::StrCat("a bad \\", std::string(1, e), " escape"));
        v = v * 16 + uint32_t(std::isdigit(uint8_t(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
      }
      if (v >= 0xd800 && v < 0xe000) return Refuse("a surrogate \\u escape");
      return std::optional<uint32_t>(v);
    };
    switch (e) {
      case 't': return std::optional<uint32_t>('\t');
      case 'n': return std::optional<uint32_t>('\n');
      case 'r': return std::optional<uint32_t>('\r');
      case 'f': return std::optional<uint32_t>('\f');
      case 'v': return std::optional<uint32_t>('\v');
      case '0': return std::optional<uint32_t>(0);
      case 'x': return hex(2);
      case 'u': return hex(4);
      default: break;
    }
    if (std::isalnum(uint8_t(e))) return Refuse(absl::StrCat("the escape \\", std::string(1, e)));
    --pos_;
    return std::optional<uint32_t>(NextCodePoint());  // escaped punctuation, or UTF-8
  }

  absl::StatusOr<Symbol> Class() {  // after '['
    CharClass c;
    bool negated = false;
    if (More() && p_[pos_] == '^') {
      negated = true;
      ++pos_;
    }
    bool first = true;
    for (;;) {
      if (!More()) return Refuse("an unclosed '['");
      if (p_[pos_] == ']' && !first) {
        ++pos_;
        break;
      }
      first = false;
      std::optional<uint32_t> lo;
      if (p_[pos_] == '\\') {
        ++pos_;
        absl::StatusOr<std::optional<uint32_t>> e = Escape(&c);
        if (!e.ok()) return e.status();
        lo = *e;
      } else {
        lo = NextCodePoint();
      }
      if (!lo) continue;  // a short class
      uint32_t hi = *lo;
      if (pos_ + 1 < end_ && p_[pos_] == '-' && p_[pos_ + 1] != ']') {
        ++pos_;
        if (p_[pos_] == '\\') {
          ++pos_;
          CharClass ignored;
          absl::StatusOr<std::optional<uint32_t>> e = Escape(&ignored);
          if (!e.ok()) return e.status();
          if (!*e) return Refuse("a class escape ending a range");
          hi = **e;
        } else {
          hi = NextCodePoint();
        }
        if (hi < *lo) return Refuse("a range out of order");
      }
      if (hi < 0x80) {
        c.ascii.Add(uint8_t(*lo), uint8_t(hi));
      } else if (*lo == hi) {
        c.others.push_back(hi);
      } else {
        return Refuse("a range of non-ASCII characters");
      }
    }
    if (negated) {
      if (!c.others.empty()) return Refuse("a negated class naming non-ASCII characters");
      CharClass n;  // the other ASCII characters, and non-ASCII unless \D \W \S took them
      for (int ch = 0; ch < 0x80; ++ch) {
        if (!c.ascii.Has(uint8_t(ch))) n.ascii.Add(uint8_t(ch), uint8_t(ch));
      }
      n.any_non_ascii = !c.any_non_ascii && !c.spaces;
      return ClassSymbol(n);
    }
    return ClassSymbol(c);
  }

  absl::StatusOr<Seq> Atom() {
    const char c = p_[pos_];
    if (c == '(') {
      ++pos_;
      if (p_.substr(pos_, 2) == "?:") {
        pos_ += 2;
      } else if (p_.substr(pos_, 2) == "?<" && p_.substr(pos_, 3) != "?<=" && p_.substr(pos_, 3) != "?<!") {
        const size_t close = p_.find('>', pos_);
        if (close == std::string_view::npos) return Refuse("an unclosed group name");
        pos_ = close + 1;
      } else if (More() && p_[pos_] == '?') {
        return Refuse(absl::StrCat("the group (", std::string(p_.substr(pos_, 2)), "...)"));
      }
      absl::StatusOr<Seq> inner = Alternation();
      if (!inner.ok()) return inner.status();
      if (!More() || p_[pos_] != ')') return Refuse("an unclosed '('");
      ++pos_;
      return inner;
    }
    if (c == '[') {
      ++pos_;
      absl::StatusOr<Symbol> s = Class();
      if (!s.ok()) return s.status();
      return Seq{*s};
    }
    if (c == '.') {
      ++pos_;
      CharClass dot;  // any character but the line breaks \n and \r
      dot.ascii = ByteSet::Range(0x00, 0x09).Add(0x0b, 0x0c).Add(0x0e, 0x7f);
      dot.any_non_ascii = true;
      return Seq{ClassSymbol(dot)};
    }
    if (c == '\\') {
      ++pos_;
      CharClass short_class;
      absl::StatusOr<std::optional<uint32_t>> e = Escape(&short_class);
      if (!e.ok()) return e.status();
      if (!*e) return Seq{ClassSymbol(short_class)};
      return JsonChar(**e);
    }
    if (c == '^' || c == '$') return Refuse(absl::StrCat("'", std::string(1, c), "' inside the pattern"));
    if (c == '*' || c == '+' || c == '?' || c == '{') {
      return Refuse(absl::StrCat("a quantifier with nothing before it at ", pos_));
    }
    return JsonChar(NextCodePoint());
  }

  // A quantifier after an atom: {min, max} (max -1: unbounded), or none.
  absl::StatusOr<std::optional<std::pair<int, int>>> Quantifier() {
    if (!More()) return std::optional<std::pair<int, int>>();
    std::pair<int, int> q;
    const char c = p_[pos_];
    if (c == '*') {
      q = {0, -1};
      ++pos_;
    } else if (c == '+') {
      q = {1, -1};
      ++pos_;
    } else if (c == '?') {
      q = {0, 1};
      ++pos_;
    } else if (c == '{') {
      const size_t close = p_.find('}', pos_);
      if (close == std::string_view::npos || close >= end_) return Refuse("an unclosed '{'");
      const std::string body(p_.substr(pos_ + 1, close - pos_ - 1));
      int lo = 0, hi = 0;
      char tail[2];
      if (std::sscanf(body.c_str(), "%d,%d%1s", &lo, &hi, tail) == 2) {
      } else if (std::sscanf(body.c_str(), "%d%1s", &lo, tail) == 2 && tail[0] == ',' &&
                 body.back() == ',') {
        hi = -1;
      } else if (std::sscanf(body.c_str(), "%d%1s", &lo, tail) == 1) {
        hi = lo;
      } else {
        return Refuse(absl::StrCat("the count {", body, "}"));
      }
      if (lo < 0 || lo > kMaxCount || hi > kMaxCount || (hi >= 0 && hi < lo)) {
        return Refuse(absl::StrCat("the count {", body, "} (at most ", kMaxCount, ")"));
      }
      q = {lo, hi};
      pos_ = close + 1;
    } else {
      return std::optional<std::pair<int, int>>();
    }
    if (More() && p_[pos_] == '?') ++pos_;  // lazy: the same language
    return std::optional<std::pair<int, int>>(q);
  }

  absl::StatusOr<Seq> Concat() {
    Seq seq;
    while (More() && p_[pos_] != '|' && p_[pos_] != ')') {
      absl::StatusOr<Seq> atom = Atom();
      if (!atom.ok()) return atom.status();
      absl::StatusOr<std::optional<std::pair<int, int>>> q = Quantifier();
      if (!q.ok()) return q.status();
      if (*q) {
        seq.push_back(GrammarBuilder::Ref(b_.Repeat("repeat", *atom, (*q)->first, (*q)->second)));
      } else {
        Append(seq, *atom);
      }
    }
    return seq;
  }

  absl::StatusOr<Seq> Alternation() {
    std::vector<Seq> alternatives;
    for (;;) {
      absl::StatusOr<Seq> s = Concat();
      if (!s.ok()) return s.status();
      alternatives.push_back(*std::move(s));
      if (!More() || p_[pos_] != '|') break;
      ++pos_;
    }
    if (alternatives.size() == 1) return alternatives[0];
    return Seq{GrammarBuilder::Ref(b_.Rule("alternatives", std::move(alternatives)))};
  }

  GrammarBuilder& b_;
  std::string_view p_;
  const bool raw_;  // the text itself (guided_regex), not a JSON string's contents
  size_t pos_ = 0;
  size_t end_ = 0;
};

}  // namespace

absl::StatusOr<RuleId> JsonStringPattern(GrammarBuilder& b, std::string_view pattern) {
  return RegexCompiler(b, pattern, /*raw=*/false).Compile();
}

absl::StatusOr<Grammar> RegexGrammar(std::string_view regex) {
  GrammarBuilder b;
  absl::StatusOr<RuleId> root = RegexCompiler(b, regex, /*raw=*/true).Compile();
  if (!root.ok()) return root.status();
  return b.Build(*root);
}

}  // namespace kvcast::grammar
