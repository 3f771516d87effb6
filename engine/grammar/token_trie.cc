#include "engine/grammar/token_trie.h"

#include <algorithm>
#include <numeric>

namespace kvcast::grammar {

TokenTrie::TokenTrie(const std::vector<std::optional<std::string>>& token_bytes)
    : vocab_size_(int(token_bytes.size())), bytes_(token_bytes) {
  std::vector<int32_t> order;
  for (int32_t id = 0; id < vocab_size_; ++id) {
    if (token_bytes[size_t(id)].has_value() && !token_bytes[size_t(id)]->empty()) order.push_back(id);
  }
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return *token_bytes[size_t(a)] < *token_bytes[size_t(b)];
  });
  // Nodes are made in preorder while walking the sorted tokens; `path`
  // holds the nodes of the previous token's bytes.
  byte_.push_back(0);
  depth_.push_back(0);
  end_.push_back(0);
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
      end_[size_t(path.back())] = int32_t(byte_.size());
      path.pop_back();
    }
    for (size_t d = common; d < s.size(); ++d) {
      byte_.push_back(uint8_t(s[d]));
      depth_.push_back(int32_t(d + 1));
      end_.push_back(0);
      path.push_back(int32_t(byte_.size() - 1));
    }
    max_depth_ = std::max(max_depth_, int(s.size()));
    owner.push_back(path.back());
    prev = &s;
  }
  while (!path.empty()) {
    end_[size_t(path.back())] = int32_t(byte_.size());
    path.pop_back();
  }
  // Tokens grouped by node: `order` visits nodes in preorder already.
  first_.assign(byte_.size() + 1, 0);
  for (int32_t node : owner) ++first_[size_t(node) + 1];
  std::partial_sum(first_.begin(), first_.end(), first_.begin());
  ids_.resize(order.size());
  std::vector<int32_t> next(first_.begin(), first_.end() - 1);
  for (size_t i = 0; i < order.size(); ++i) ids_[size_t(next[size_t(owner[i])]++)] = order[i];
}

TokenTrie TokenTrie::FromTokenizer(const Tokenizer& tokenizer) {
  std::vector<std::optional<std::string>> bytes(size_t(tokenizer.vocab_size()));
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) bytes[size_t(id)] = tokenizer.TokenBytes(id);
  return TokenTrie(bytes);
}

}  // namespace kvcast::grammar
