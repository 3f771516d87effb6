// The vocabulary's token bytes as a trie laid out in preorder, so a grammar
// can find every token it allows next in one pass that shares the work of
// common prefixes and skips a whole subtree at the first byte it refuses
// (matcher.h).
#ifndef KVCAST_ENGINE_GRAMMAR_TOKEN_TRIE_H_
#define KVCAST_ENGINE_GRAMMAR_TOKEN_TRIE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "engine/tokenizer/tokenizer.h"

namespace kvcast::grammar {

class TokenTrie {
 public:
  // `token_bytes[id]`: the text token `id` adds; nullopt or empty for tokens
  // that add none (special tokens), which the trie leaves out.
  explicit TokenTrie(const std::vector<std::optional<std::string>>& token_bytes);
  // Tokenizer::TokenBytes of every id.
  static TokenTrie FromTokenizer(const Tokenizer& tokenizer);

  int vocab_size() const { return vocab_size_; }
  // Node 0 is the root (no byte); nodes 1.. in preorder.
  int num_nodes() const { return int(byte_.size()); }
  uint8_t byte(int node) const { return byte_[size_t(node)]; }
  int depth(int node) const { return depth_[size_t(node)]; }
  // One past the last node of `node`'s subtree.
  int subtree_end(int node) const { return end_[size_t(node)]; }
  // The tokens whose bytes end at `node`.
  absl::Span<const int32_t> tokens(int node) const {
    return absl::MakeConstSpan(ids_).subspan(size_t(first_[size_t(node)]),
                                             size_t(first_[size_t(node) + 1] - first_[size_t(node)]));
  }
  int max_depth() const { return max_depth_; }
  const std::optional<std::string>& bytes_of(int32_t token) const { return bytes_[size_t(token)]; }

 private:
  int vocab_size_ = 0;
  int max_depth_ = 0;
  std::vector<std::optional<std::string>> bytes_;
  std::vector<uint8_t> byte_;
  std::vector<int32_t> depth_, end_;
  std::vector<int32_t> first_;  // num_nodes + 1 offsets into ids_
  std::vector<int32_t> ids_;
};

}  // namespace kvcast::grammar

#endif  // KVCAST_ENGINE_GRAMMAR_TOKEN_TRIE_H_
