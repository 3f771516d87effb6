#include "engine/grammar/matcher.h"

#include <algorithm>
#include <cstring>
#include <limits>

namespace kvcast::grammar {
namespace {

// Expansion deeper than this is a runaway grammar (rules nesting without
// consuming input); such branches are dropped.
constexpr int kMaxExpansionDepth = 1024;
// Masks kept (each vocab / 8 bytes); past it they are dropped and remade.
constexpr size_t kMaxMasks = 256;

}  // namespace

Automaton::Automaton(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)) {
  // Room for the states a document's walk builds (untouched room costs no
  // memory), so the table rarely moves.
  transitions_.reserve(256 * 1024);
  node_ids_.reserve(1024);
  set_ids_.reserve(1024);
  Set start;
  for (int32_t alt : grammar_->alternatives(grammar_->root())) Expand(alt, -1, &start, 0);
  start_ = SetId(&start);
}

size_t Automaton::memory_bytes() const {
  size_t bytes = nodes_.size() * (sizeof(Node) + 16) + transitions_.size() * sizeof(int32_t);
  for (const Set& s : sets_) bytes += s.nodes.size() * sizeof(int32_t) + 64;
  for (const auto& [state, mask] : masks_) bytes += mask.size() * sizeof(uint32_t);
  return bytes;
}

int32_t Automaton::NodeId(int32_t pos, int32_t parent) {
  const uint64_t key = (uint64_t(uint32_t(pos)) << 32) | uint32_t(parent);
  auto [it, added] = node_ids_.try_emplace(key, int32_t(nodes_.size()));
  if (added) nodes_.push_back({pos, parent});
  return it->second;
}

int32_t Automaton::SetId(Set* set) {
  std::vector<int32_t>& nodes = set->nodes;
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  uint64_t h = set->accepting ? 0x9e3779b97f4a7c15ull : 0x6a09e667f3bcc909ull;
  for (int32_t n : nodes) h = (h ^ uint32_t(n)) * 0x100000001b3ull + (h >> 29);
  auto [it, added] = set_ids_.try_emplace(h, int32_t(sets_.size()));
  if (!added) {  // a set of this hash: the same one, or another down its chain
    for (int32_t id = it->second; id >= 0; id = same_hash_[size_t(id)]) {
      const Set& known = sets_[size_t(id)];
      if (known.accepting == set->accepting && known.nodes == nodes) return id;
    }
    same_hash_.push_back(it->second);
    it->second = int32_t(sets_.size());
  } else {
    same_hash_.push_back(-1);
  }
  continues_.push_back(!nodes.empty());
  plain_run_.push_back(-1);
  plain_exact_.push_back(0);
  sets_.push_back(Set{nodes, set->accepting});
  transitions_.resize(transitions_.size() + 256, kUnknown);
  return int32_t(sets_.size()) - 1;
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
  if (transitions_[slot] == kUnknown) FillRow(from);
  return transitions_[size_t(from) * 256 + b];
}

void Automaton::FillRow(int32_t from) {
  // Bytes that the same stacks take lead to the same state: split the 256
  // bytes into classes no stack's byte set cuts (refining by each stack's
  // set in turn), then expand once per class (inside a string, ~95
  // printable bytes are one class).
  const std::vector<Symbol>& symbols = grammar_->symbols();
  const std::vector<ByteSet>& byte_sets = grammar_->byte_sets();
  std::vector<int32_t>& tops = row_tops_;
  tops = sets_[size_t(from)].nodes;  // SetId may grow sets_
  auto set_of = [&](int32_t node) -> const ByteSet& {
    return byte_sets[size_t(symbols[size_t(nodes_[size_t(node)].pos)].index)];
  };
  std::vector<ByteSet>& classes = row_classes_;
  classes.assign(1, ByteSet().Complement());
  for (int32_t top : tops) {
    const ByteSet& taken = set_of(top);
    for (size_t c = 0, n = classes.size(); c < n; ++c) {
      ByteSet in = classes[c].Intersect(taken);
      if (in.Empty() || in == classes[c]) continue;
      classes[c] = classes[c].Minus(taken);
      classes.push_back(in);
    }
  }
  std::fill_n(&transitions_[size_t(from) * 256], 256, kDead);
  Set& next = row_next_;
  for (const ByteSet& bytes : classes) {
    const uint8_t first = bytes.First();
    next.nodes.clear();
    next.accepting = false;
    bool any_stack = false;  // takes this class's bytes
    for (int32_t top : tops) {
      if (!set_of(top).Has(first)) continue;
      any_stack = true;
      const Node node = nodes_[size_t(top)];
      Expand(node.pos + 1, node.parent, &next, 0);
    }
    if (!any_stack || (next.nodes.empty() && !next.accepting)) continue;
    const int32_t to = SetId(&next);
    int32_t* row = &transitions_[size_t(from) * 256];  // after SetId, which may grow the table
    bytes.ForEach([&](uint8_t b) { row[b] = to; });
  }
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

int Automaton::PlainRun(int32_t state) {
  if (plain_run_[size_t(state)] >= 0) return plain_run_[size_t(state)];
  // Follow the chain of states that take every plain byte to one same live
  // state; then give each state on it its run, from the last back.
  std::vector<int32_t> chain;
  int tail = 0;         // the run of the state after the chain's last
  bool exact = false;   // ... and whether it is exact
  for (int32_t s = state;;) {
    if (plain_run_[size_t(s)] >= 0) {
      tail = plain_run_[size_t(s)];
      exact = plain_exact_[size_t(s)];
      break;
    }
    if (std::find(chain.begin(), chain.end(), s) != chain.end()) {  // a loop: any run
      tail = kAnyPlainRun;
      exact = true;
      break;
    }
    if (int(chain.size()) == kMaxPlainChain) break;  // run unknown past here: 0, inexact
    int32_t next = kUnknown;
    bool some_dead = false;
    for (int b = 0; b < 256; ++b) {
      if (!TokenTrie::IsPlain(uint8_t(b))) continue;
      const int32_t t = Step(s, uint8_t(b));
      if (t == kDead) {
        some_dead = true;
      } else if (next == kUnknown || next == t) {
        next = t;
      } else {
        next = kDead;  // two live targets
        break;
      }
    }
    if (next == kUnknown) {  // every plain byte dies here: exactly no run
      plain_run_[size_t(s)] = 0;
      plain_exact_[size_t(s)] = 1;
      exact = true;
      break;
    }
    if (next == kDead || some_dead) {  // the bytes disagree: no run, inexact
      plain_run_[size_t(s)] = 0;
      plain_exact_[size_t(s)] = 0;
      break;
    }
    chain.push_back(s);
    s = next;
  }
  for (size_t i = chain.size(); i-- > 0;) {
    tail = tail == kAnyPlainRun ? tail : tail + 1;
    plain_run_[size_t(chain[i])] = int8_t(tail);
    plain_exact_[size_t(chain[i])] = exact;
  }
  return plain_run_[size_t(state)];
}

void Automaton::FillMask(int32_t state, const TokenTrie& trie, absl::Span<uint32_t> mask) {
  if (auto it = masks_.find(state); it != masks_.end() && it->second.size() == mask.size()) {
    std::memcpy(mask.data(), it->second.data(), mask.size() * sizeof(uint32_t));
    return;
  }
  std::fill(mask.begin(), mask.end(), 0u);
  levels_.resize(size_t(trie.max_depth()) + 1);
  levels_[0] = state;
  // The hot loop of a first visit: raw pointers, the transition looked up
  // inline (Step only on a miss, after which the table may have moved).
  const TokenTrie::Node* nodes = trie.nodes();
  const int32_t* ids = trie.ids();
  int32_t* level = levels_.data();
  uint32_t* bits = mask.data();
  auto allow = [&](int32_t first, int32_t last) {  // the tokens ids[first, last)
    for (int32_t k = first; k < last; ++k) bits[size_t(ids[k]) >> 5] |= 1u << (ids[k] & 31);
  };
  const int end = trie.num_nodes();
  // Inside a string every all-plain token short enough is allowed, whatever
  // its bytes: one table of them per length, and the walk skips the
  // all-plain subtrees at the top.
  const int root_run = PlainRun(state);
  const bool root_plain = root_run == kAnyPlainRun || (root_run > 0 && plain_exact_[size_t(state)]);
  if (root_plain) {
    const uint32_t* plain =
        trie.plain_tokens_up_to(root_run == kAnyPlainRun ? std::numeric_limits<int>::max() : root_run);
    for (size_t w = 0; w < mask.size(); ++w) bits[w] |= plain[w];
  }
  // Per depth: whether the bytes down to it are all plain (a plain subtree
  // below such a path holds only tokens the table above has decided).
  plain_path_.assign(size_t(trie.max_depth()) + 1, 0);
  plain_path_[0] = root_plain;
  uint8_t* plain_path = plain_path_.data();
  for (int node = 1; node < end;) {
    const TokenTrie::Node& n = nodes[node];
    const int32_t from = level[n.depth - 1];
    const bool on_plain_path = plain_path[n.depth - 1] && TokenTrie::IsPlain(n.byte);
    if (on_plain_path && n.plain) {  // ... and so are its plain siblings
      node = n.next_impure;
      continue;
    }
    if (n.plain) {
      const int run = PlainRun(from);
      if (run == kAnyPlainRun || run >= n.height) {  // every token below is allowed
        allow(n.first, nodes[n.end].first);
        node = n.end;
        continue;
      }
      if (run > 0 && plain_exact_[size_t(from)]) {  // the tokens of `run` bytes or fewer
        const int deepest = n.depth + run - 1;
        for (int k = node; k < n.end;) {
          if (nodes[k].depth > deepest) {
            k = nodes[k].end;
            continue;
          }
          allow(nodes[k].first, nodes[k + 1].first);
          ++k;
        }
        node = n.end;
        continue;
      }
    }
    int32_t s = transitions_[size_t(from) * 256 + n.byte];
    if (s == kUnknown) s = Step(from, n.byte);
    if (s == kDead) {
      node = n.end;
      continue;
    }
    allow(n.first, nodes[node + 1].first);
    if (!continues_[size_t(s)]) {  // complete: no byte may follow
      node = n.end;
      continue;
    }
    level[n.depth] = s;
    plain_path[n.depth] = on_plain_path;
    ++node;
  }
  if (masks_.size() >= kMaxMasks) masks_.clear();
  masks_[state].assign(mask.begin(), mask.end());
}

}  // namespace kvcast::grammar
