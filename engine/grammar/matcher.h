// Where a constrained generation stands in its grammar, and which tokens may
// come next.
//
// A configuration is the set of parse stacks the bytes so far leave open (a
// grammar may be ambiguous until later bytes decide), each stack a chain of
// positions in the grammar's symbols: the top a byte set the next byte must
// be in, below it where each enclosing rule goes on. Stacks are interned as
// (position, parent) nodes, so equal stacks are one node and stacks sharing
// their lower part share its nodes; sets of stacks are interned too, each
// with a row of 256 transitions filled the first time a byte is tried
// (bytes the same stacks take share one expansion). The
// matcher thus builds, lazily, the part of the grammar's automaton that its
// text visits: after the first step in a state, advancing by a byte is one
// table lookup.
//
// FillMask walks the vocabulary's trie (token_trie.h) depth-first through
// those transitions, skipping a node's subtree at the first byte no stack
// takes: a token is allowed when every one of its bytes is. Where a state
// takes any run of plain string bytes (PlainRun: inside a string), the
// tokens made only of them are allowed without walking: from the trie's
// table per length (and then never visited: below bytes all plain, the walk
// jumps over a node's plain siblings at once), a subtree at a time below. A
// new state's row of transitions splits the bytes into the classes no
// stack's byte set cuts and expands each class once. The mask of a
// state is kept, so a state met again (the inside of a string, a list's
// next item, the same schema's next request) costs a copy.
#ifndef KVCAST_ENGINE_GRAMMAR_MATCHER_H_
#define KVCAST_ENGINE_GRAMMAR_MATCHER_H_

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "engine/grammar/grammar.h"
#include "engine/grammar/token_trie.h"

namespace kvcast::grammar {

// The grammar's automaton, built as it is used. Shared by the matchers of
// one grammar (so a state one sequence visited is known to the next); NOT
// safe for concurrent use: one thread at a time (the engine's compute
// thread).
class Automaton {
 public:
  static constexpr int32_t kDead = -2;

  explicit Automaton(std::shared_ptr<const Grammar> grammar);

  int32_t start() const { return start_; }
  // The state after byte `b` in `state`, or kDead.
  int32_t Step(int32_t state, uint8_t b);
  bool accepting(int32_t state) const { return sets_[size_t(state)].accepting; }
  bool continues(int32_t state) const { return !sets_[size_t(state)].nodes.empty(); }
  // See Matcher::FillMask. Masks are kept per state: use one trie with an
  // automaton.
  void FillMask(int32_t state, const TokenTrie& trie, absl::Span<uint32_t> mask);

  int num_states() const { return int(sets_.size()); }
  // Interned nodes and states plus kept masks, in bytes (an owner may start
  // a fresh automaton past a budget).
  size_t memory_bytes() const;
  const Grammar& grammar() const { return *grammar_; }

 private:
  static constexpr int32_t kUnknown = -1;
  struct Node {
    int32_t pos;     // a position in the grammar's symbols
    int32_t parent;  // the node below (where the enclosing rule goes on); -1 at the bottom
  };
  struct Set {
    std::vector<int32_t> nodes;  // sorted; each node's position is a byte set
    bool accepting = false;
  };

  int32_t NodeId(int32_t pos, int32_t parent);
  // The id of `set` (sorting and deduplicating its nodes), interning a copy
  // when it is new.
  int32_t SetId(Set* set);
  // Adds to `out` the stacks reached from position `pos` over `parent` by
  // expanding rules until a byte set is on top; `accepting` when an
  // expansion completes the root rule.
  void Expand(int32_t pos, int32_t parent, Set* out, int depth);
  // Computes the 256 transitions of `from`.
  void FillRow(int32_t from);
  // How many TokenTrie::IsPlain bytes in a row `state` takes whichever they
  // are (each state on the way leads all of them to one same live state):
  // kAnyPlainRun inside an unbounded string, the characters left inside a
  // bounded one. A subtree of plain bytes no taller than that is allowed
  // whole without walking it; with plain_exact_ (no plain byte at all is
  // taken after the run), a taller one's tokens of up to `run` bytes are.
  int PlainRun(int32_t state);
  static constexpr int kAnyPlainRun = 127;
  static constexpr int kMaxPlainChain = 100;

  std::shared_ptr<const Grammar> grammar_;
  std::vector<Node> nodes_;
  absl::flat_hash_map<uint64_t, int32_t> node_ids_;
  std::vector<Set> sets_;
  absl::flat_hash_map<uint64_t, int32_t> set_ids_;  // a hash of the set: the last set of it
  std::vector<int32_t> same_hash_;                   // per set: the one before of its hash, or -1
  std::vector<int32_t> transitions_;                            // 256 per set
  std::vector<uint8_t> continues_;                              // per set: has nodes
  std::vector<int8_t> plain_run_;                               // per set: -1 unknown
  std::vector<uint8_t> plain_exact_;                            // per set: see PlainRun
  absl::flat_hash_map<int32_t, std::vector<uint32_t>> masks_;   // per set, FillMask's
  int32_t start_ = 0;
  std::vector<int32_t> row_tops_;       // FillRow's scratch
  std::vector<ByteSet> row_classes_;
  Set row_next_;
  std::vector<int32_t> levels_;       // FillMask's state per trie depth
  std::vector<uint8_t> plain_path_;   // ... and whether its path is all plain
};

// One sequence's place in its grammar: a state of a shared automaton.
// Copies are independent states of the same automaton.
class Matcher {
 public:
  explicit Matcher(std::shared_ptr<Automaton> automaton)
      : automaton_(std::move(automaton)), state_(automaton_->start()) {}
  // With an automaton of its own.
  explicit Matcher(std::shared_ptr<const Grammar> grammar)
      : Matcher(std::make_shared<Automaton>(std::move(grammar))) {}

  // Consumes `bytes` when the grammar allows all of them (true); otherwise
  // returns false and leaves the state as it was.
  bool Advance(std::string_view bytes);
  // The bytes so far form a complete sentence of the grammar.
  bool CanEnd() const { return automaton_->accepting(state_); }
  // Some byte may still follow.
  bool CanContinue() const { return automaton_->continues(state_); }

  // Sets bit t (mask[t / 32] >> t % 32) of every token of `trie` whose bytes
  // the grammar allows next, and clears the others; `mask` holds
  // ceil(trie.vocab_size() / 32) words. Tokens without bytes (special ones,
  // EOS) stay clear: the caller decides those from CanEnd().
  void FillMask(const TokenTrie& trie, absl::Span<uint32_t> mask) {
    automaton_->FillMask(state_, trie, mask);
  }

  const Automaton& automaton() const { return *automaton_; }

 private:
  std::shared_ptr<Automaton> automaton_;
  int32_t state_;
};

}  // namespace kvcast::grammar

#endif  // KVCAST_ENGINE_GRAMMAR_MATCHER_H_
