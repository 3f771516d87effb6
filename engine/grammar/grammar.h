// A context-free grammar over bytes, the form constrained decoding runs
// (matcher.h): rules of alternatives, each alternative a sequence of symbols,
// a symbol either a set of bytes (one byte of output) or another rule.
// Compilers (json_schema.h, regex.h) build one with GrammarBuilder; a built
// Grammar is immutable and may be shared between threads.
//
// The matcher expands rules top-down, so a grammar must not be left-recursive
// (a rule reaching itself before consuming a byte); Build() refuses one.
#ifndef KVCAST_ENGINE_GRAMMAR_GRAMMAR_H_
#define KVCAST_ENGINE_GRAMMAR_GRAMMAR_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace kvcast::grammar {

class ByteSet {
 public:
  ByteSet() = default;
  static ByteSet Of(uint8_t b) { return Range(b, b); }
  static ByteSet Range(uint8_t lo, uint8_t hi);
  ByteSet& Add(uint8_t lo, uint8_t hi);
  ByteSet& Add(const ByteSet& other);
  ByteSet Complement() const;
  // The bytes in both sets; in this one and not `other`.
  ByteSet Intersect(const ByteSet& other) const;
  ByteSet Minus(const ByteSet& other) const;
  bool Has(uint8_t b) const { return (bits_[b >> 6] >> (b & 63)) & 1; }
  // The smallest byte in the set (which must not be empty).
  uint8_t First() const;
  // Calls f(b) for every byte b in the set, in increasing order.
  template <typename F>
  void ForEach(F f) const {
    for (int w = 0; w < 4; ++w) {
      for (uint64_t bits = bits_[size_t(w)]; bits != 0; bits &= bits - 1) f(uint8_t(w * 64 + __builtin_ctzll(bits)));
    }
  }
  bool Empty() const { return (bits_[0] | bits_[1] | bits_[2] | bits_[3]) == 0; }
  bool operator==(const ByteSet& o) const { return bits_ == o.bits_; }

 private:
  std::array<uint64_t, 4> bits_{};
};

using RuleId = int32_t;

struct Symbol {
  enum Kind : uint8_t { kEnd, kBytes, kRule };
  Kind kind = kEnd;
  int32_t index = 0;  // kBytes: into Grammar::byte_sets(); kRule: a RuleId
};

class Grammar {
 public:
  // Every alternative's symbols, each alternative followed by a kEnd symbol;
  // a position is an index into this array.
  const std::vector<Symbol>& symbols() const { return symbols_; }
  const std::vector<ByteSet>& byte_sets() const { return byte_sets_; }
  // Positions where the alternatives of `rule` start.
  const std::vector<int32_t>& alternatives(RuleId rule) const { return alternatives_[size_t(rule)]; }
  RuleId root() const { return root_; }
  int num_rules() const { return int(alternatives_.size()); }
  const std::string& rule_name(RuleId rule) const { return names_[size_t(rule)]; }
  // The grammar in a BNF-like text, one rule a line (for tests and logs).
  std::string ToString() const;

 private:
  friend class GrammarBuilder;
  std::vector<Symbol> symbols_;
  std::vector<ByteSet> byte_sets_;
  std::vector<std::vector<int32_t>> alternatives_;
  std::vector<std::string> names_;
  RuleId root_ = 0;
};

class GrammarBuilder {
 public:
  using Seq = std::vector<Symbol>;

  // A rule to be defined later (so rules can refer to each other).
  RuleId Declare(std::string_view name);
  // Gives a declared rule its alternatives (an empty Seq matches nothing:
  // the empty string). Once per rule.
  void Define(RuleId rule, std::vector<Seq> alternatives);
  RuleId Rule(std::string_view name, std::vector<Seq> alternatives) {
    RuleId r = Declare(name);
    Define(r, std::move(alternatives));
    return r;
  }

  Symbol Bytes(const ByteSet& set);
  static Symbol Ref(RuleId rule) { return {Symbol::kRule, rule}; }
  // One single-byte symbol per byte of `text`.
  Seq Literal(std::string_view text);
  // A rule matching `item` repeated min..max times (max < 0: unbounded),
  // with `separator` between repetitions (empty: none).
  RuleId Repeat(std::string_view name, const Seq& item, int min, int max,
                const Seq& separator = {});

  // InvalidArgument naming the rule when a rule is declared but not defined
  // or the grammar is left-recursive. The builder is spent afterwards.
  absl::StatusOr<Grammar> Build(RuleId root);

 private:
  RuleId BoundedTail(std::string_view name, const Seq& step, int count);

  std::vector<ByteSet> byte_sets_;
  std::vector<std::string> names_;
  std::vector<std::vector<Seq>> rules_;
  std::vector<bool> defined_;
};

// The byte sequences of one non-ASCII character in valid UTF-8 (U+0080 to
// U+10FFFF, no surrogates), as alternatives.
std::vector<GrammarBuilder::Seq> Utf8NonAscii(GrammarBuilder& b);

// Appends code point `cp` (< 0x110000) to `out` as UTF-8.
void AppendUtf8(uint32_t cp, std::string* out);

// The UTF-8 byte sequences of the characters whose code points lie in
// `ranges` (inclusive [first, last] pairs, clamped to U+0000..U+10FFFF,
// surrogates U+D800..U+DFFF left out), as alternatives: one per run of code
// points whose encodings share each byte's range.
std::vector<GrammarBuilder::Seq> Utf8CodePoints(GrammarBuilder& b,
                                                std::vector<std::pair<uint32_t, uint32_t>> ranges);

// Appends `b` to `seq` (a small helper for compilers).
inline void Append(GrammarBuilder::Seq& seq, const GrammarBuilder::Seq& b) {
  seq.insert(seq.end(), b.begin(), b.end());
}

}  // namespace kvcast::grammar

#endif  // KVCAST_ENGINE_GRAMMAR_GRAMMAR_H_
