#include "engine/grammar/matcher.h"

#include <algorithm>
#include <cstring>

namespace kvcast::grammar {
namespace {

// Expansion deeper than this is a runaway grammar (rules nesting without
// consuming input); such branches are dropped.
constexpr int kMaxExpansionDepth = 1024;
// Masks kept (each vocab / 8 bytes); past it they are dropped and remade.
constexpr size_t kMaxMasks = 256;

}  // namespace

Automaton::Automaton(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)) {
  Set start;
  for (int32_t alt : grammar_->alternatives(grammar_->root())) Expand(alt, -1, &start, 0);
  start_ = SetId(std::move(start));
}

size_t Automaton::memory_bytes() const {
  size_t bytes = nodes_.size() * (sizeof(Node) + 16) + transitions_.size() * sizeof(int32_t);
  for (const Set& s : sets_) bytes += 2 * s.nodes.size() * sizeof(int32_t) + 64;
  for (const auto& [state, mask] : masks_) bytes += mask.size() * sizeof(uint32_t);
  return bytes;
}

int32_t Automaton::NodeId(int32_t pos, int32_t parent) {
  const uint64_t key = (uint64_t(uint32_t(pos)) << 32) | uint32_t(parent);
  auto [it, added] = node_ids_.try_emplace(key, int32_t(nodes_.size()));
  if (added) nodes_.push_back({pos, parent});
  return it->second;
}

int32_t Automaton::SetId(Set set) {
  std::sort(set.nodes.begin(), set.nodes.end());
  set.nodes.erase(std::unique(set.nodes.begin(), set.nodes.end()), set.nodes.end());
  std::vector<int32_t> key = set.nodes;
  key.push_back(set.accepting ? -1 : -2);
  auto [it, added] = set_ids_.try_emplace(std::move(key), int32_t(sets_.size()));
  if (added) {
    sets_.push_back(std::move(set));
    transitions_.resize(transitions_.size() + 256, kUnknown);
  }
  return it->second;
}

void Automaton::Expand(int32_t pos, int32_t parent, Set* out, int depth) {
  if (depth > kMaxExpansionDepth) return;
  const std::vector<Symbol>& symbols = grammar_->symbols();
  const Symbol& s = symbols[size_t(pos)];
  switch (s.kind) {
    case Symbol::kBytes:
      out->nodes.push_back(NodeId(pos, parent));
      return;
    case Symbol::kEnd:
      if (parent < 0) {
        out->accepting = true;
      } else {
        const Node up = nodes_[size_t(parent)];
        Expand(up.pos, up.parent, out, depth + 1);
      }
      return;
    case Symbol::kRule: {
      // Where the caller goes on; a rule called last in its alternative
      // returns straight to the caller's caller.
      const int32_t cont =
          symbols[size_t(pos) + 1].kind == Symbol::kEnd ? parent : NodeId(pos + 1, parent);
      for (int32_t alt : grammar_->alternatives(s.index)) Expand(alt, cont, out, depth + 1);
      return;
    }
  }
}

int32_t Automaton::Step(int32_t from, uint8_t b) {
  const size_t slot = size_t(from) * 256 + b;
  if (transitions_[slot] != kUnknown) return transitions_[slot];
  const std::vector<Symbol>& symbols = grammar_->symbols();
  const std::vector<ByteSet>& byte_sets = grammar_->byte_sets();
  Set next;
  for (int32_t n : sets_[size_t(from)].nodes) {
    const Node node = nodes_[size_t(n)];
    if (byte_sets[size_t(symbols[size_t(node.pos)].index)].Has(b)) {
      Expand(node.pos + 1, node.parent, &next, 0);
    }
  }
  const int32_t to = next.nodes.empty() && !next.accepting ? kDead : SetId(std::move(next));
  transitions_[slot] = to;  // after SetId, which may grow the table
  return to;
}

bool Matcher::Advance(std::string_view bytes) {
  int32_t s = state_;
  for (char c : bytes) {
    s = automaton_->Step(s, uint8_t(c));
    if (s == Automaton::kDead) return false;
  }
  state_ = s;
  return true;
}

void Automaton::FillMask(int32_t state, const TokenTrie& trie, absl::Span<uint32_t> mask) {
  if (auto it = masks_.find(state); it != masks_.end() && it->second.size() == mask.size()) {
    std::memcpy(mask.data(), it->second.data(), mask.size() * sizeof(uint32_t));
    return;
  }
  std::fill(mask.begin(), mask.end(), 0u);
  levels_.resize(size_t(trie.max_depth()) + 1);
  levels_[0] = state;
  for (int node = 1; node < trie.num_nodes();) {
    const size_t d = size_t(trie.depth(node));
    const int32_t s = Step(levels_[d - 1], trie.byte(node));
    if (s == kDead) {
      node = trie.subtree_end(node);
      continue;
    }
    for (int32_t t : trie.tokens(node)) mask[size_t(t) >> 5] |= 1u << (t & 31);
    if (sets_[size_t(s)].nodes.empty()) {  // complete: no byte may follow
      node = trie.subtree_end(node);
      continue;
    }
    levels_[d] = s;
    ++node;
  }
  if (masks_.size() >= kMaxMasks) masks_.clear();
  masks_[state].assign(mask.begin(), mask.end());
}

}  // namespace kvcast::grammar
