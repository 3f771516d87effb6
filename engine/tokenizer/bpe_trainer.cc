#include "engine/tokenizer/bpe_trainer.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <queue>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/tokenizer/internal/byte_level.h"
#include "engine/tokenizer/internal/split_regex.h"
#include "engine/tokenizer/internal/utf8.h"
#include "nlohmann/json.hpp"

namespace kvcast {
namespace {

using tokenizer_internal::BytesToByteLevel;
using tokenizer_internal::Gpt2ByteOrder;

using Pair = std::pair<int32_t, int32_t>;

struct Word {
  std::vector<int32_t> symbols;
  int64_t count;
};

class Trainer {
 public:
  explicit Trainer(std::vector<Word> words) : words_(std::move(words)) {
    const auto& order = Gpt2ByteOrder();
    std::array<int32_t, 256> id_of_byte;
    for (int i = 0; i < 256; ++i) {
      id_of_byte[order[i]] = i;
      AddToken(BytesToByteLevel(std::string(1, static_cast<char>(order[i]))));
    }
    for (Word& w : words_) {
      for (int32_t& s : w.symbols) s = id_of_byte[s];
    }
    for (size_t w = 0; w < words_.size(); ++w) AddWordPairs(w, +1);
    for (const auto& [pair, count] : pair_counts_) Push(pair, count);
  }

  void Run(size_t max_tokens) {
    while (tokens_.size() < max_tokens && !heap_.empty()) {
      const HeapEntry top = heap_.top();
      heap_.pop();
      auto it = pair_counts_.find(top.pair);
      if (it == pair_counts_.end() || it->second != top.count || top.count <= 0) continue;
      Merge(top.pair);
    }
  }

  const std::vector<std::string>& tokens() const { return tokens_; }
  const std::vector<Pair>& merges() const { return merges_; }

 private:
  struct HeapEntry {
    int64_t count;
    Pair pair;
  };
  // Orders the heap: highest count on top, ties to the bytewise-smallest
  // (left, right) token strings.
  struct HeapLess {
    const Trainer* t;
    bool operator()(const HeapEntry& x, const HeapEntry& y) const {
      if (x.count != y.count) return x.count < y.count;
      const std::string& xl = t->tokens_[x.pair.first];
      const std::string& yl = t->tokens_[y.pair.first];
      if (xl != yl) return xl > yl;
      return t->tokens_[x.pair.second] > t->tokens_[y.pair.second];
    }
  };

  int32_t AddToken(std::string token) {
    auto [it, inserted] = id_of_token_.emplace(token, static_cast<int32_t>(tokens_.size()));
    if (inserted) tokens_.push_back(std::move(token));
    return it->second;
  }

  void Push(Pair pair, int64_t count) {
    if (count > 0) heap_.push(HeapEntry{count, pair});
  }

  // Adds (sign=+1) or removes (sign=-1) the pair occurrences of word `w`.
  void AddWordPairs(size_t w, int sign) {
    const Word& word = words_[w];
    for (size_t i = 0; i + 1 < word.symbols.size(); ++i) {
      const Pair p{word.symbols[i], word.symbols[i + 1]};
      pair_counts_[p] += sign * word.count;
      if (sign > 0) words_with_pair_[p].push_back(static_cast<int32_t>(w));
      touched_.push_back(p);
    }
  }

  void Merge(Pair pair) {
    const int32_t merged = AddToken(tokens_[pair.first] + tokens_[pair.second]);
    merges_.push_back(pair);
    std::vector<int32_t> candidates = std::move(words_with_pair_[pair]);
    words_with_pair_.erase(pair);
    std::sort(candidates.begin(), candidates.end());
    candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
    touched_.clear();
    for (int32_t w : candidates) {
      std::vector<int32_t>& s = words_[w].symbols;
      bool present = false;
      for (size_t i = 0; i + 1 < s.size() && !present; ++i) {
        present = s[i] == pair.first && s[i + 1] == pair.second;
      }
      if (!present) continue;
      AddWordPairs(w, -1);
      std::vector<int32_t> next;
      next.reserve(s.size());
      for (size_t i = 0; i < s.size(); ++i) {
        if (i + 1 < s.size() && s[i] == pair.first && s[i + 1] == pair.second) {
          next.push_back(merged);
          ++i;
        } else {
          next.push_back(s[i]);
        }
      }
      s = std::move(next);
      AddWordPairs(w, +1);
    }
    pair_counts_.erase(pair);
    std::sort(touched_.begin(), touched_.end());
    touched_.erase(std::unique(touched_.begin(), touched_.end()), touched_.end());
    for (const Pair& p : touched_) {
      auto it = pair_counts_.find(p);
      if (it != pair_counts_.end()) Push(p, it->second);
    }
  }

  std::vector<Word> words_;
  std::vector<std::string> tokens_;
  absl::flat_hash_map<std::string, int32_t> id_of_token_;
  std::vector<Pair> merges_;
  std::map<Pair, int64_t> pair_counts_;
  absl::flat_hash_map<Pair, std::vector<int32_t>> words_with_pair_;
  std::vector<Pair> touched_;
  std::priority_queue<HeapEntry, std::vector<HeapEntry>, HeapLess> heap_{HeapLess{this}};
};

nlohmann::json AddedToken(int32_t id, const char* content) {
  return {{"id", id},          {"content", content}, {"single_word", false},
          {"lstrip", false},   {"rstrip", false},    {"normalized", false},
          {"special", true}};
}

nlohmann::json BuildTokenizerJson(const std::vector<std::string>& tokens,
                                  const std::vector<Pair>& merges) {
  nlohmann::json vocab = nlohmann::json::object();
  for (size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = i;
  nlohmann::json merge_list = nlohmann::json::array();
  for (const Pair& m : merges) merge_list.push_back(tokens[m.first] + " " + tokens[m.second]);
  const auto n = static_cast<int32_t>(tokens.size());
  nlohmann::json byte_level = {{"type", "ByteLevel"},
                               {"add_prefix_space", false},
                               {"trim_offsets", true},
                               {"use_regex", false}};
  nlohmann::json split = {{"type", "Split"},
                          {"pattern", {{"Regex", tokenizer_internal::kLlama3SplitPattern}}},
                          {"behavior", "Isolated"},
                          {"invert", false}};
  nlohmann::json decoder = {{"type", "ByteLevel"},
                            {"add_prefix_space", true},
                            {"trim_offsets", true},
                            {"use_regex", true}};
  nlohmann::json model = {{"type", "BPE"},
                          {"dropout", nullptr},
                          {"unk_token", nullptr},
                          {"continuing_subword_prefix", nullptr},
                          {"end_of_word_suffix", nullptr},
                          {"fuse_unk", false},
                          {"byte_fallback", false},
                          {"ignore_merges", false},
                          {"vocab", std::move(vocab)},
                          {"merges", std::move(merge_list)}};
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens",
           {AddedToken(n, "<|begin_of_text|>"), AddedToken(n + 1, "<|end_of_text|>")}},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", {split, byte_level}}}},
          {"post_processor", nullptr},
          {"decoder", std::move(decoder)},
          {"model", std::move(model)}};
}

}  // namespace

absl::StatusOr<std::string> TrainByteLevelBpeTokenizerJson(std::string_view corpus,
                                                          int vocab_size) {
  if (vocab_size < 258) {
    return absl::InvalidArgumentError(
        absl::StrCat("vocab_size ", vocab_size, " < 258 (256 bytes + 2 special tokens)"));
  }
  if (!tokenizer_internal::IsValidUtf8(corpus)) {
    return absl::InvalidArgumentError("BPE training corpus is not valid UTF-8");
  }
  ASSIGN_OR_RETURN(auto regex,
                   tokenizer_internal::SplitRegex::Compile(tokenizer_internal::kLlama3SplitPattern));
  std::vector<std::string_view> pieces;
  RETURN_IF_ERROR(regex->Split(corpus, &pieces));
  std::map<std::string_view, int64_t> counts;  // Ordered: deterministic word ids.
  for (std::string_view p : pieces) ++counts[p];
  std::vector<Word> words;
  words.reserve(counts.size());
  for (const auto& [piece, count] : counts) {
    words.push_back(Word{std::vector<int32_t>(piece.begin(), piece.end()), count});
    for (int32_t& b : words.back().symbols) b = static_cast<uint8_t>(b);
  }
  Trainer trainer(std::move(words));
  trainer.Run(static_cast<size_t>(vocab_size) - 2);
  return BuildTokenizerJson(trainer.tokens(), trainer.merges())
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace kvcast
