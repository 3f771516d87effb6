#include "engine/chat/internal/lexer.h"

#include <cerrno>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/chat/internal/numbers.h"
#include "engine/chat/internal/value.h"

namespace kvcast {
namespace jinja_internal {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsNameChar(char c) { return IsNameStart(c) || IsDigit(c); }
int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Python's "unicode-escape" decoding of a string literal's body; unknown
// escapes keep their backslash, as Python's do.
std::string DecodeEscapes(absl::string_view body) {
  std::string out;
  out.reserve(body.size());
  for (size_t i = 0; i < body.size(); ++i) {
    char c = body[i];
    if (c != '\\' || i + 1 >= body.size()) {
      out.push_back(c);
      continue;
    }
    char e = body[++i];
    switch (e) {
      case '\n': break;
      case '\\': out.push_back('\\'); break;
      case '\'': out.push_back('\''); break;
      case '"': out.push_back('"'); break;
      case 'a': out.push_back('\a'); break;
      case 'b': out.push_back('\b'); break;
      case 'f': out.push_back('\f'); break;
      case 'n': out.push_back('\n'); break;
      case 'r': out.push_back('\r'); break;
      case 't': out.push_back('\t'); break;
      case 'v': out.push_back('\v'); break;
      case 'x':
      case 'u':
      case 'U': {
        size_t digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        uint32_t cp = 0;
        bool ok = i + digits < body.size();
        for (size_t k = 1; ok && k <= digits; ++k) {
          int h = HexValue(body[i + k]);
          if (h < 0) ok = false;
          cp = cp * 16 + static_cast<uint32_t>(h < 0 ? 0 : h);
        }
        if (!ok || cp > 0x10FFFF) {
          out.push_back('\\');
          out.push_back(e);
        } else {
          AppendUtf8(cp, &out);
          i += digits;
        }
        break;
      }
      default:
        if (e >= '0' && e <= '7') {
          uint32_t cp = static_cast<uint32_t>(e - '0');
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++k) {
            cp = cp * 8 + static_cast<uint32_t>(body[++i] - '0');
          }
          AppendUtf8(cp, &out);
        } else {
          out.push_back('\\');
          out.push_back(e);
        }
    }
  }
  return out;
}

class Lexer {
 public:
  Lexer(std::string source, const LexerOptions& options) : src_(std::move(source)), options_(options) {}

  absl::StatusOr<std::vector<Token>> Run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      size_t start = src_.find('{', pos_);
      while (start != std::string::npos && start + 1 < src_.size() && src_[start + 1] != '{' &&
             src_[start + 1] != '%' && src_[start + 1] != '#') {
        start = src_.find('{', start + 1);
      }
      if (start == std::string::npos || start + 1 >= src_.size()) {
        EmitData(src_.substr(pos_), pos_);
        pos_ = src_.size();
        break;
      }
      char type = src_[start + 1];
      size_t after = start + 2;
      char sign = after < src_.size() && (src_[after] == '-' || src_[after] == '+') ? src_[after] : 0;
      if (sign) ++after;
      std::string text = src_.substr(pos_, start - pos_);
      size_t raw_body = 0;
      bool is_raw = type == '%' && MatchRawBegin(after, &raw_body);
      ApplyLeftStrip(&text, sign, type != '{', line_starting);
      EmitData(std::move(text), pos_);
      if (type == '#') {
        size_t end = src_.find("#}", after);
        if (end == std::string::npos) return Error(start, "missing end of comment tag");
        char end_sign = end > after && (src_[end - 1] == '-' || src_[end - 1] == '+') ? src_[end - 1] : 0;
        pos_ = end + 2;
        line_starting = FinishTag(end_sign, /*trim=*/true);
      } else if (is_raw) {
        RETURN_IF_ERROR(LexRaw(start, raw_body, &line_starting));
      } else {
        absl::Status s = LexTag(type, start, after, &line_starting);
        if (!s.ok()) return s;
      }
    }
    Token eof;
    eof.kind = TokenKind::kEof;
    eof.line = LineAt(src_.size());
    tokens_.push_back(eof);
    return std::move(tokens_);
  }

 private:
  absl::Status Error(size_t at, absl::string_view message) {
    return absl::InvalidArgumentError(absl::StrCat("line ", LineAt(at), ": ", message));
  }

  // The value of an integer literal's digits (at `at`) in `base`: int64
  // where it fits, else within numbers.h's bound as decimal text.
  absl::Status ReadInt(size_t at, const std::string& digits, int base, Token* t) {
    errno = 0;
    t->int_value = std::strtoll(digits.c_str(), nullptr, base);
    if (errno != ERANGE) return absl::OkStatus();
    absl::StatusOr<BigInt> big = ParseIntDigits(digits, base);
    if (!big.ok()) return Error(at, "integer literal too large");
    t->int_value = 0;
    t->big_int = true;
    t->text = big->ToString();
    return absl::OkStatus();
  }

  int LineAt(size_t at) {
    // Incremental: positions are requested mostly in increasing order.
    if (at < line_pos_) {
      line_pos_ = 0;
      line_ = 1;
    }
    for (; line_pos_ < at && line_pos_ < src_.size(); ++line_pos_) {
      if (src_[line_pos_] == '\n') ++line_;
    }
    return line_;
  }

  void EmitData(std::string text, size_t at) {
    if (text.empty()) return;
    Token t;
    t.kind = TokenKind::kData;
    t.text = std::move(text);
    t.line = LineAt(at);
    tokens_.push_back(std::move(t));
  }

  void ApplyLeftStrip(std::string* text, char sign, bool lstrip_applies, bool line_starting) {
    if (sign == '-') {
      size_t n = text->size();
      while (n > 0 && IsSpace((*text)[n - 1])) --n;
      text->resize(n);
    } else if (sign != '+' && options_.lstrip_blocks && lstrip_applies) {
      size_t nl = text->rfind('\n');
      size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if (l_pos > 0 || line_starting) {
        bool blank = true;
        for (size_t i = l_pos; i < text->size(); ++i) blank &= IsSpace((*text)[i]);
        if (blank) text->resize(l_pos);
      }
    }
  }

  // After a tag's closing delimiter (pos_ just past it): "-" strips all
  // whitespace, no sign applies trim_blocks when `trim`. Returns whether the
  // consumed text ends with a newline (jinja2's line_starting).
  bool FinishTag(char end_sign, bool trim) {
    bool newline = false;
    if (end_sign == '-') {
      while (pos_ < src_.size() && IsSpace(src_[pos_])) newline = src_[pos_++] == '\n';
    } else if (end_sign != '+' && trim && options_.trim_blocks && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
      newline = true;
    }
    return newline;
  }

  size_t SkipSpaces(size_t p) const {
    while (p < src_.size() && IsSpace(src_[p])) ++p;
    return p;
  }

  bool MatchWord(size_t p, absl::string_view word) const {
    return src_.compare(p, word.size(), word.data(), word.size()) == 0 &&
           (p + word.size() >= src_.size() || !IsNameChar(src_[p + word.size()]));
  }

  // {%[-+]? raw [-]?%}: on success *body is where the raw text starts.
  bool MatchRawBegin(size_t after, size_t* body) {
    size_t p = SkipSpaces(after);
    if (!MatchWord(p, "raw")) return false;
    p = SkipSpaces(p + 3);
    if (src_.compare(p, 3, "-%}") == 0) {
      *body = SkipSpaces(p + 3);
      return true;
    }
    if (src_.compare(p, 2, "%}") == 0) {
      *body = p + 2;
      return true;
    }
    return false;
  }

  absl::Status LexRaw(size_t start, size_t body, bool* line_starting) {
    size_t p = body;
    while (true) {
      size_t tag = src_.find("{%", p);
      if (tag == std::string::npos) return Error(start, "missing end of raw directive");
      size_t q = tag + 2;
      char sign = q < src_.size() && (src_[q] == '-' || src_[q] == '+') ? src_[q] : 0;
      if (sign) ++q;
      q = SkipSpaces(q);
      if (MatchWord(q, "endraw")) {
        q = SkipSpaces(q + 6);
        char end_sign = 0;
        if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) end_sign = src_[q++];
        if (src_.compare(q, 2, "%}") == 0) {
          std::string text = src_.substr(body, tag - body);
          // The raw-begin match ends with "%}" (or whitespace after "-%}").
          bool begin_line = body > 0 && src_[body - 1] == '\n';
          ApplyLeftStrip(&text, sign, true, begin_line);
          EmitData(std::move(text), body);
          pos_ = q + 2;
          *line_starting = FinishTag(end_sign, true);
          return absl::OkStatus();
        }
      }
      p = tag + 2;
    }
  }

  absl::Status LexTag(char type, size_t start, size_t after, bool* line_starting) {
    Token begin;
    begin.kind = type == '{' ? TokenKind::kVariableBegin : TokenKind::kBlockBegin;
    begin.line = LineAt(start);
    tokens_.push_back(begin);
    const char* end = type == '{' ? "}}" : "%}";
    std::vector<char> stack;
    size_t p = after;
    while (true) {
      if (p >= src_.size()) {
        return Error(start, type == '{' ? "unexpected end of template: missing '}}'"
                                        : "unexpected end of template: missing '%}'");
      }
      if (stack.empty()) {
        char end_sign = 0;
        size_t q = p;
        if (src_[q] == '-' || (src_[q] == '+' && type == '%')) end_sign = src_[q++];
        if (src_.compare(q, 2, end) == 0) {
          Token t;
          t.kind = type == '{' ? TokenKind::kVariableEnd : TokenKind::kBlockEnd;
          t.line = LineAt(p);
          tokens_.push_back(t);
          pos_ = q + 2;
          *line_starting = FinishTag(end_sign, type == '%');
          return absl::OkStatus();
        }
      }
      char c = src_[p];
      if (IsSpace(c)) {
        ++p;
        continue;
      }
      Token t;
      t.line = LineAt(p);
      const char base_char = c == '0' && p + 1 < src_.size() ? char(src_[p + 1] | 0x20) : 0;
      const int base = base_char == 'x' ? 16 : base_char == 'o' ? 8 : base_char == 'b' ? 2 : 0;
      if (base != 0) {
        // Jinja2's 0x / 0o / 0b integers (either case), with an optional
        // '_' before each digit: 0x_ff, 0b1_0.
        auto is_digit = [base](char d) {
          const int v = IsDigit(d) ? d - '0' : (d | 0x20) >= 'a' && (d | 0x20) <= 'f' ? (d | 0x20) - 'a' + 10 : 99;
          return v < base;
        };
        size_t q = p + 2;
        std::string num;
        while (q < src_.size()) {
          const size_t at = src_[q] == '_' ? q + 1 : q;
          if (at >= src_.size() || !is_digit(src_[at])) break;
          num.push_back(src_[at]);
          q = at + 1;
        }
        if (!num.empty()) {
          t.kind = TokenKind::kInt;
          t.text = src_.substr(p, q - p);
          RETURN_IF_ERROR(ReadInt(p, num, base, &t));
          p = q;
          tokens_.push_back(std::move(t));
          continue;
        }
      }
      if (IsDigit(c)) {
        size_t q = p;
        auto digits = [&](size_t x) {
          size_t y = x;
          while (y < src_.size() && (IsDigit(src_[y]) || (src_[y] == '_' && y + 1 < src_.size() && IsDigit(src_[y + 1]) && y > x))) ++y;
          return y;
        };
        q = digits(p);
        bool is_float = false;
        if (q + 1 < src_.size() && src_[q] == '.' && IsDigit(src_[q + 1])) {
          q = digits(q + 1);
          is_float = true;
        }
        if (q < src_.size() && (src_[q] == 'e' || src_[q] == 'E')) {
          size_t r = q + 1;
          if (r < src_.size() && (src_[r] == '+' || src_[r] == '-')) ++r;
          if (r < src_.size() && IsDigit(src_[r])) {
            q = digits(r);
            is_float = true;
          }
        }
        std::string num;
        for (size_t k = p; k < q; ++k) {
          if (src_[k] != '_') num.push_back(src_[k]);
        }
        t.text = num;
        if (is_float) {
          t.kind = TokenKind::kFloat;
          t.float_value = std::strtod(num.c_str(), nullptr);
        } else {
          t.kind = TokenKind::kInt;
          RETURN_IF_ERROR(ReadInt(p, num, 10, &t));
        }
        p = q;
      } else if (IsNameStart(c)) {
        size_t q = p;
        while (q < src_.size() && IsNameChar(src_[q])) ++q;
        t.kind = TokenKind::kName;
        t.text = src_.substr(p, q - p);
        p = q;
      } else if (c == '\'' || c == '"') {
        size_t q = p + 1;
        while (q < src_.size() && src_[q] != c) q += src_[q] == '\\' ? 2 : 1;
        if (q >= src_.size()) return Error(p, "unterminated string literal");
        t.kind = TokenKind::kString;
        t.text = DecodeEscapes(absl::string_view(src_).substr(p + 1, q - p - 1));
        p = q + 1;
      } else {
        static const char* const kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op;
        for (const char* two : kTwo) {
          if (src_.compare(p, 2, two) == 0) op = two;
        }
        if (op.empty()) {
          if (std::string("+-*/%~()[]{},.:|=<>;").find(c) == std::string::npos) {
            return Error(p, absl::StrCat("unexpected char '", std::string(1, c), "'"));
          }
          op = std::string(1, c);
        }
        if (op == "(" || op == "[" || op == "{") {
          stack.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
        } else if (op == ")" || op == "]" || op == "}") {
          if (stack.empty()) return Error(p, absl::StrCat("unexpected '", op, "'"));
          if (stack.back() != op[0]) {
            return Error(p, absl::StrCat("unexpected '", op, "', expected '", std::string(1, stack.back()), "'"));
          }
          stack.pop_back();
        }
        t.kind = TokenKind::kOperator;
        t.text = op;
        p += op.size();
      }
      tokens_.push_back(std::move(t));
    }
  }

  std::string src_;
  LexerOptions options_;
  size_t pos_ = 0;
  size_t line_pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

absl::StatusOr<std::vector<Token>> Tokenize(absl::string_view source, const LexerOptions& options) {
  // Newlines normalized to "\n"; one trailing newline dropped
  // (keep_trailing_newline=False).
  std::string text;
  text.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      text.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      text.push_back(source[i]);
    }
  }
  if (!text.empty() && text.back() == '\n') text.pop_back();
  return Lexer(std::move(text), options).Run();
}

}  // namespace jinja_internal
}  // namespace kvcast
