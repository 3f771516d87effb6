// The vocabulary's token bytes as a trie laid out in preorder, so a grammar
// can find every token it allows next in one pass that shares the work of
// common prefixes and skips a whole subtree at the first byte it refuses
// (matcher.h).
#ifndef KVCAST_ENGINE_GRAMMAR_TOKEN_TRIE_H_
#define KVCAST_ENGINE_GRAMMAR_TOKEN_TRIE_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "engine/tokenizer/tokenizer.h"

namespace kvcast::grammar {

class TokenTrie {
 public:
  static constexpr size_t kMaxTokenBytes = 4096;

  // A node's fields together: the mask walk reads them all, node after node.
  // Node 0 is the root (no byte); nodes 1.. in preorder.
  // One past the last node, a sentinel gives the end of the last node's
  // tokens.
  struct Node {
    uint8_t byte = 0;
    uint8_t plain = 0;   // this node and all below it have IsPlain bytes
    uint16_t depth = 0;
    uint16_t height = 0;  // levels of the subtree, this node's included
    int32_t end = 0;     // one past the subtree
    int32_t first = 0;   // into ids(): the node's tokens, then its subtree's,
                         // up to the next node's `first` (its subtree's: up to
                         // nodes()[end].first)
    int32_t next_impure = 0;  // the first of the siblings after this node
                              // that is not `plain`, or where they end
  };
  // The bytes of plain JSON string text (printable ASCII but `"` and `\`):
  // a grammar state that takes any run of them (inside a string) allows a
  // whole subtree of plain bytes without walking it.
  static bool IsPlain(uint8_t b) { return b >= 0x20 && b < 0x7f && b != '"' && b != '\\'; }

  // `token_bytes[id]`: the text token `id` adds; nullopt or empty for tokens
  // that add none (special tokens), which the trie leaves out, as it does
  // tokens over kMaxTokenBytes (no vocabulary has those).
  explicit TokenTrie(const std::vector<std::optional<std::string>>& token_bytes);
  // Tokenizer::TokenBytes of every id.
  static TokenTrie FromTokenizer(const Tokenizer& tokenizer);

  int vocab_size() const { return vocab_size_; }
  int num_nodes() const { return int(nodes_.size()) - 1; }
  uint8_t byte(int node) const { return nodes_[size_t(node)].byte; }
  int depth(int node) const { return nodes_[size_t(node)].depth; }
  // One past the last node of `node`'s subtree.
  int subtree_end(int node) const { return nodes_[size_t(node)].end; }
  // The tokens whose bytes end at `node`.
  absl::Span<const int32_t> tokens(int node) const {
    const int32_t first = nodes_[size_t(node)].first;
    return absl::MakeConstSpan(ids_).subspan(size_t(first), size_t(nodes_[size_t(node) + 1].first - first));
  }
  int max_depth() const { return max_depth_; }
  // For the mask walk's inner loop: the nodes, and the ids Node::first
  // indexes.
  const Node* nodes() const { return nodes_.data(); }
  const int32_t* ids() const { return ids_.data(); }
  const std::optional<std::string>& bytes_of(int32_t token) const { return bytes_[size_t(token)]; }
  // The tokens all of whose bytes are plain and that have at most `length`
  // of them, as a mask (ceil(vocab_size / 32) words; see Matcher::FillMask);
  // `length` >= max_plain_length(): every all-plain token.
  const uint32_t* plain_tokens_up_to(int length) const {
    return plain_masks_.data() + size_t(std::min(length, max_plain_length_)) * mask_words_;
  }
  int max_plain_length() const { return max_plain_length_; }

 private:
  int vocab_size_ = 0;
  int max_depth_ = 0;
  std::vector<std::optional<std::string>> bytes_;
  std::vector<Node> nodes_;   // and the sentinel
  size_t mask_words_ = 0;
  int max_plain_length_ = 0;
  std::vector<uint32_t> plain_masks_;  // per length 0..max_plain_length_
  std::vector<int32_t> ids_;  // the tokens grouped by node, in preorder
};

}  // namespace kvcast::grammar

#endif  // KVCAST_ENGINE_GRAMMAR_TOKEN_TRIE_H_
