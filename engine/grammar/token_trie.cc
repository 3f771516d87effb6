#include "engine/grammar/token_trie.h"

#include <algorithm>

namespace kvcast::grammar {

TokenTrie::TokenTrie(const std::vector<std::optional<std::string>>& token_bytes)
    : vocab_size_(int(token_bytes.size())), bytes_(token_bytes) {
  std::vector<int32_t> order;
  for (int32_t id = 0; id < vocab_size_; ++id) {
    const std::optional<std::string>& b = token_bytes[size_t(id)];
    if (b.has_value() && !b->empty() && b->size() <= kMaxTokenBytes) order.push_back(id);
  }
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return *token_bytes[size_t(a)] < *token_bytes[size_t(b)];
  });
  // Nodes are made in preorder while walking the sorted tokens; `path`
  // holds the nodes of the previous token's bytes.
  nodes_.emplace_back();
  std::vector<int32_t> path = {0};
  std::vector<int32_t> owner;  // per token of `order`: its node
  const std::string* prev = nullptr;
  for (int32_t id : order) {
    const std::string& s = *token_bytes[size_t(id)];
    size_t common = 0;
    if (prev != nullptr) {
      while (common < s.size() && common < prev->size() && s[common] == (*prev)[common]) ++common;
    }
    while (path.size() > common + 1) {  // close the nodes past the shared prefix
      nodes_[size_t(path.back())].end = int32_t(nodes_.size());
      path.pop_back();
    }
    for (size_t d = common; d < s.size(); ++d) {
      Node node;
      node.byte = uint8_t(s[d]);
      node.depth = uint16_t(d + 1);
      nodes_.push_back(node);
      path.push_back(int32_t(nodes_.size() - 1));
    }
    max_depth_ = std::max(max_depth_, int(s.size()));
    owner.push_back(path.back());
    prev = &s;
  }
  while (!path.empty()) {
    nodes_[size_t(path.back())].end = int32_t(nodes_.size());
    path.pop_back();
  }
  // Sorted bytes visit the nodes in preorder, a node's tokens together.
  ids_ = order;
  const size_t n = nodes_.size();
  nodes_.emplace_back();  // the sentinel
  std::vector<int32_t> count(n + 1, 0), impure(n + 1, 0);
  for (int32_t node : owner) ++count[size_t(node)];
  for (size_t i = 0; i < n; ++i) {
    nodes_[i + 1].first = nodes_[i].first + count[i];
    impure[i + 1] = impure[i] + (i > 0 && !IsPlain(nodes_[i].byte));
  }
  for (size_t i = 1; i < n; ++i) {
    nodes_[i].plain = impure[size_t(nodes_[i].end)] == impure[i];
  }
  for (size_t i = n; i-- > 1;) {  // a node's next sibling, at its end, is done before it
    const int32_t sibling = nodes_[i].end;
    const bool is_sibling = nodes_[size_t(sibling)].depth == nodes_[i].depth;  // the sentinel's is 0
    nodes_[i].next_impure =
        is_sibling && nodes_[size_t(sibling)].plain ? nodes_[size_t(sibling)].next_impure : sibling;
  }
  // All-plain tokens by length, each length's mask including the shorter.
  mask_words_ = (size_t(vocab_size_) + 31) / 32;
  for (int32_t id : order) {
    const std::string& b = *token_bytes[size_t(id)];
    if (std::all_of(b.begin(), b.end(), [](char c) { return IsPlain(uint8_t(c)); })) {
      max_plain_length_ = std::max(max_plain_length_, int(b.size()));
    }
  }
  plain_masks_.assign(size_t(max_plain_length_ + 1) * mask_words_, 0);
  for (int32_t id : order) {
    const std::string& b = *token_bytes[size_t(id)];
    if (std::all_of(b.begin(), b.end(), [](char c) { return IsPlain(uint8_t(c)); })) {
      plain_masks_[b.size() * mask_words_ + (size_t(id) >> 5)] |= 1u << (id & 31);
    }
  }
  for (size_t len = 1; len <= size_t(max_plain_length_); ++len) {
    for (size_t w = 0; w < mask_words_; ++w) plain_masks_[len * mask_words_ + w] |= plain_masks_[(len - 1) * mask_words_ + w];
  }
  for (size_t i = n; i-- > 1;) {  // children before their parent
    int height = 1;
    for (int32_t c = int32_t(i) + 1; c < nodes_[i].end; c = nodes_[size_t(c)].end) {
      height = std::max(height, 1 + int(nodes_[size_t(c)].height));
    }
    nodes_[i].height = uint16_t(std::min(height, 65535));
  }
}

TokenTrie TokenTrie::FromTokenizer(const Tokenizer& tokenizer) {
  std::vector<std::optional<std::string>> bytes(size_t(tokenizer.vocab_size()));
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) bytes[size_t(id)] = tokenizer.TokenBytes(id);
  return TokenTrie(bytes);
}

}  // namespace kvcast::grammar
