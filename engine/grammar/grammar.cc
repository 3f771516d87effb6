#include "engine/grammar/grammar.h"

#include <algorithm>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kvcast::grammar {

ByteSet ByteSet::Range(uint8_t lo, uint8_t hi) { return ByteSet().Add(lo, hi); }

ByteSet& ByteSet::Add(uint8_t lo, uint8_t hi) {
  for (int b = lo; b <= hi; ++b) bits_[size_t(b >> 6)] |= uint64_t{1} << (b & 63);
  return *this;
}

ByteSet& ByteSet::Add(const ByteSet& other) {
  for (size_t i = 0; i < 4; ++i) bits_[i] |= other.bits_[i];
  return *this;
}

ByteSet ByteSet::Complement() const {
  ByteSet out;
  for (size_t i = 0; i < 4; ++i) out.bits_[i] = ~bits_[i];
  return out;
}

ByteSet ByteSet::Intersect(const ByteSet& other) const {
  ByteSet out;
  for (size_t i = 0; i < 4; ++i) out.bits_[i] = bits_[i] & other.bits_[i];
  return out;
}

ByteSet ByteSet::Minus(const ByteSet& other) const {
  ByteSet out;
  for (size_t i = 0; i < 4; ++i) out.bits_[i] = bits_[i] & ~other.bits_[i];
  return out;
}

uint8_t ByteSet::First() const {
  for (int w = 0;; ++w) {
    if (bits_[size_t(w)] != 0) return uint8_t(w * 64 + __builtin_ctzll(bits_[size_t(w)]));
  }
}

RuleId GrammarBuilder::Declare(std::string_view name) {
  names_.emplace_back(name);
  rules_.emplace_back();
  defined_.push_back(false);
  return RuleId(rules_.size() - 1);
}

void GrammarBuilder::Define(RuleId rule, std::vector<Seq> alternatives) {
  rules_[size_t(rule)] = std::move(alternatives);
  defined_[size_t(rule)] = true;
}

Symbol GrammarBuilder::Bytes(const ByteSet& set) {
  for (size_t i = 0; i < byte_sets_.size(); ++i) {
    if (byte_sets_[i] == set) return {Symbol::kBytes, int32_t(i)};
  }
  byte_sets_.push_back(set);
  return {Symbol::kBytes, int32_t(byte_sets_.size() - 1)};
}

GrammarBuilder::Seq GrammarBuilder::Literal(std::string_view text) {
  Seq seq;
  for (char c : text) seq.push_back(Bytes(ByteSet::Of(uint8_t(c))));
  return seq;
}

RuleId GrammarBuilder::BoundedTail(std::string_view name, const Seq& step, int count) {
  // O_k ::= step O_(k-1) | "" ; O_0 ::= "".
  RuleId tail = Rule(absl::StrCat(std::string(name), "_0"), {Seq{}});
  for (int k = 1; k <= count; ++k) {
    Seq more = step;
    more.push_back(Ref(tail));
    tail = Rule(absl::StrCat(std::string(name), "_", k), {more, Seq{}});
  }
  return tail;
}

RuleId GrammarBuilder::Repeat(std::string_view name, const Seq& item, int min, int max,
                              const Seq& separator) {
  Seq step = separator;  // every repetition after the first
  Append(step, item);
  auto tail_of = [&](int done) -> RuleId {  // the rest after `done` (>= 1) items
    if (max < 0) {
      RuleId tail = Declare(absl::StrCat(std::string(name), "_more"));
      Seq more = step;
      more.push_back(Ref(tail));
      Define(tail, {more, Seq{}});
      return tail;
    }
    return BoundedTail(absl::StrCat(std::string(name), "_upto"), step, max - done);
  };
  if (min == 0) {
    if (max == 0) return Rule(name, {Seq{}});
    Seq some = item;
    some.push_back(Ref(tail_of(1)));
    return Rule(name, {some, Seq{}});
  }
  Seq seq = item;
  for (int i = 1; i < min; ++i) Append(seq, step);
  if (max < 0 || max > min) seq.push_back(Ref(tail_of(min)));
  return Rule(name, {seq});
}

absl::StatusOr<Grammar> GrammarBuilder::Build(RuleId root) {
  const size_t n = rules_.size();
  for (size_t r = 0; r < n; ++r) {
    if (!defined_[r]) {
      return absl::InvalidArgumentError(absl::StrCat("grammar: rule '", names_[r], "' is not defined"));
    }
  }
  // Nullable rules (a fixpoint), then the rules each can reach before
  // consuming a byte: a cycle there is left recursion.
  std::vector<bool> nullable(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      for (const Seq& alt : rules_[r]) {
        bool all = true;
        for (const Symbol& s : alt) all = all && s.kind == Symbol::kRule && nullable[size_t(s.index)];
        if (all) {
          nullable[r] = changed = true;
          break;
        }
      }
    }
  }
  std::vector<std::vector<RuleId>> left(n);
  for (size_t r = 0; r < n; ++r) {
    for (const Seq& alt : rules_[r]) {
      for (const Symbol& s : alt) {
        if (s.kind != Symbol::kRule) break;
        left[r].push_back(s.index);
        if (!nullable[size_t(s.index)]) break;
      }
    }
  }
  std::vector<int> color(n, 0);  // 0 new, 1 on the DFS path, 2 done
  std::string cycle;
  std::function<bool(size_t)> visit = [&](size_t r) {
    color[r] = 1;
    for (RuleId next : left[r]) {
      if (color[size_t(next)] == 1) {
        cycle = names_[size_t(next)];
        return true;
      }
      if (color[size_t(next)] == 0 && visit(size_t(next))) return true;
    }
    color[r] = 2;
    return false;
  };
  for (size_t r = 0; r < n; ++r) {
    if (color[r] == 0 && visit(r)) {
      return absl::InvalidArgumentError(
          absl::StrCat("grammar: rule '", cycle, "' is left-recursive"));
    }
  }

  Grammar g;
  g.byte_sets_ = std::move(byte_sets_);
  g.names_ = std::move(names_);
  g.root_ = root;
  g.alternatives_.resize(n);
  for (size_t r = 0; r < n; ++r) {
    for (const Seq& alt : rules_[r]) {
      g.alternatives_[r].push_back(int32_t(g.symbols_.size()));
      g.symbols_.insert(g.symbols_.end(), alt.begin(), alt.end());
      g.symbols_.push_back({Symbol::kEnd, 0});
    }
  }
  rules_.clear();
  return g;
}

std::vector<GrammarBuilder::Seq> Utf8NonAscii(GrammarBuilder& b) {
  const Symbol cont = b.Bytes(ByteSet::Range(0x80, 0xbf));
  return {
      {b.Bytes(ByteSet::Range(0xc2, 0xdf)), cont},
      {b.Bytes(ByteSet::Range(0xe1, 0xec).Add(0xee, 0xef)), cont, cont},
      {b.Bytes(ByteSet::Of(0xe0)), b.Bytes(ByteSet::Range(0xa0, 0xbf)), cont},
      {b.Bytes(ByteSet::Of(0xed)), b.Bytes(ByteSet::Range(0x80, 0x9f)), cont},
      {b.Bytes(ByteSet::Range(0xf1, 0xf3)), cont, cont, cont},
      {b.Bytes(ByteSet::Of(0xf0)), b.Bytes(ByteSet::Range(0x90, 0xbf)), cont, cont},
      {b.Bytes(ByteSet::Of(0xf4)), b.Bytes(ByteSet::Range(0x80, 0x8f)), cont, cont},
  };
}

namespace {

// Splits [lo, hi] until each piece's encodings have one length and, byte by
// byte, run over a range: then that piece is one sequence of byte ranges.
void SplitUtf8(GrammarBuilder& b, uint32_t lo, uint32_t hi, std::vector<GrammarBuilder::Seq>* out) {
  if (lo > hi) return;
  for (uint32_t edge : {0x7fu, 0x7ffu, 0xffffu}) {
    if (lo <= edge && edge < hi) {
      SplitUtf8(b, lo, edge, out);
      SplitUtf8(b, edge + 1, hi, out);
      return;
    }
  }
  std::string a, z;
  AppendUtf8(lo, &a);
  AppendUtf8(hi, &z);
  const int n = int(a.size());
  // Trailing bytes must each span their whole range unless every byte
  // before them is the same in lo and hi.
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) == (hi & ~m)) continue;
    if ((lo & m) != 0) {
      SplitUtf8(b, lo, lo | m, out);
      SplitUtf8(b, (lo | m) + 1, hi, out);
      return;
    }
    if ((hi & m) != m) {
      SplitUtf8(b, lo, (hi & ~m) - 1, out);
      SplitUtf8(b, hi & ~m, hi, out);
      return;
    }
  }
  GrammarBuilder::Seq seq;
  for (int i = 0; i < n; ++i) seq.push_back(b.Bytes(ByteSet::Range(uint8_t(a[size_t(i)]), uint8_t(z[size_t(i)]))));
  out->push_back(std::move(seq));
}

}  // namespace

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(char(cp));
  } else if (cp < 0x800) {
    out->push_back(char(0xc0 | (cp >> 6)));
    out->push_back(char(0x80 | (cp & 0x3f)));
  } else if (cp < 0x10000) {
    out->push_back(char(0xe0 | (cp >> 12)));
    out->push_back(char(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(char(0x80 | (cp & 0x3f)));
  } else {
    out->push_back(char(0xf0 | (cp >> 18)));
    out->push_back(char(0x80 | ((cp >> 12) & 0x3f)));
    out->push_back(char(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(char(0x80 | (cp & 0x3f)));
  }
}

std::vector<GrammarBuilder::Seq> Utf8CodePoints(GrammarBuilder& b,
                                                std::vector<std::pair<uint32_t, uint32_t>> ranges) {
  std::sort(ranges.begin(), ranges.end());
  std::vector<GrammarBuilder::Seq> out;
  int64_t next = 0;  // code points below were emitted (ranges may overlap)
  for (auto [lo, hi] : ranges) {
    int64_t first = std::max<int64_t>(lo, next), last = std::min<uint32_t>(hi, 0x10ffff);
    if (first > last) continue;
    next = last + 1;
    // Around the surrogates.
    if (first < 0xd800 && last >= 0xd800) {
      SplitUtf8(b, uint32_t(first), 0xd7ff, &out);
      first = 0xe000;
    } else if (first >= 0xd800 && first <= 0xdfff) {
      first = 0xe000;
    }
    SplitUtf8(b, uint32_t(first), uint32_t(last), &out);
  }
  return out;
}

namespace {

std::string ByteSetText(const ByteSet& set) {
  auto show = [](int b) {
    if (b >= 0x21 && b < 0x7f && b != '\\' && b != ']' && b != '-') return std::string(1, char(b));
    return absl::StrFormat("\\x%02x", b);
  };
  std::string out = "[";
  for (int b = 0; b < 256;) {
    if (!set.Has(uint8_t(b))) {
      ++b;
      continue;
    }
    int e = b;
    while (e + 1 < 256 && set.Has(uint8_t(e + 1))) ++e;
    out += show(b);
    if (e > b) absl::StrAppend(&out, "-", show(e));
    b = e + 1;
  }
  return out + "]";
}

}  // namespace

std::string Grammar::ToString() const {
  std::string out;
  for (size_t r = 0; r < alternatives_.size(); ++r) {
    absl::StrAppend(&out, names_[r], " ::=");
    for (size_t a = 0; a < alternatives_[r].size(); ++a) {
      if (a > 0) out += " |";
      bool empty = true;
      for (size_t p = size_t(alternatives_[r][a]); symbols_[p].kind != Symbol::kEnd; ++p) {
        const Symbol& s = symbols_[p];
        absl::StrAppend(&out, " ",
                        s.kind == Symbol::kRule ? names_[size_t(s.index)]
                                                : ByteSetText(byte_sets_[size_t(s.index)]));
        empty = false;
      }
      if (empty) out += " \"\"";
    }
    out += "\n";
  }
  return out;
}

}  // namespace kvcast::grammar
