// Byte-level BPE tokenizer loaded from a Hugging Face `tokenizer.json`
// (GPT-2, Llama-3, Qwen2 family).
//
// Supported tokenizer.json subset (anything else is rejected with
// InvalidArgument naming "tokenizer.json" and the field):
//   model:         {"type": "BPE", vocab, merges ("a b" strings or
//                  [["a", "b"]] pairs), byte_fallback, ignore_merges,
//                  unk_token, fuse_unk}; no dropout, subword prefix/suffix.
//   normalizer:    null or NFC.
//   pre_tokenizer: null, ByteLevel (use_regex -> GPT-2 pattern,
//                  add_prefix_space), Split{Regex, "Isolated", invert
//                  false}, or a Sequence of those with ByteLevel last.
//   decoder:       null, ByteLevel, ByteFallback, Fuse, or a Sequence of
//                  those.
//   added_tokens:  matched in text before pre-tokenization (leftmost,
//                  longest); those with "special": true are dropped by
//                  Decode(skip_special=true).
// post_processor and truncation/padding are ignored: Encode adds only BOS.
//
// Immutable after construction except for an internal memo of BPE results
// guarded by a mutex; all methods are const and thread-safe.
#ifndef KVCAST_ENGINE_TOKENIZER_BPE_TOKENIZER_H_
#define KVCAST_ENGINE_TOKENIZER_BPE_TOKENIZER_H_

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "engine/tokenizer/internal/added_tokens.h"
#include "engine/tokenizer/internal/split_regex.h"
#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json_fwd.hpp"

namespace kvcast {

class BpeTokenizer : public Tokenizer {
 public:
  // Parses tokenizer.json text. `names` picks BOS/EOS (InvalidArgument when a
  // named token is not in the vocabulary).
  static absl::StatusOr<std::unique_ptr<BpeTokenizer>> FromJson(
      std::string_view json_text, const SpecialTokenNames& names = {});
  // The same from an already parsed tokenizer.json document (built, for a
  // GGUF file, from its metadata: gguf_tokenizer.h).
  static absl::StatusOr<std::unique_ptr<BpeTokenizer>> FromJsonValue(
      const nlohmann::json& root, const SpecialTokenNames& names = {});
  // Reads and parses the file at `path`; NotFound when it cannot be read.
  static absl::StatusOr<std::unique_ptr<BpeTokenizer>> FromFile(
      const std::string& path, const SpecialTokenNames& names = {});

  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                              bool add_bos) const override;
  std::string Decode(absl::Span<const int32_t> ids, bool skip_special = false) const override;
  std::optional<std::string> TokenBytes(int32_t id) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(id_to_token_.size()); }
  std::optional<int32_t> bos_id() const override { return bos_id_; }
  std::optional<int32_t> eos_id() const override { return eos_id_; }
  std::optional<int32_t> TokenId(std::string_view token) const override;

 private:
  // One step of the pre-tokenizer pipeline.
  struct PreTokenizeStep {
    std::unique_ptr<tokenizer_internal::SplitRegex> split;  // Null: no split.
    bool add_prefix_space = false;                          // ByteLevel only.
  };
  struct Merge {
    int32_t rank;
    int32_t merged_id;
  };
  struct PairHash {
    size_t operator()(std::pair<int32_t, int32_t> p) const {
      return std::hash<uint64_t>()((uint64_t{static_cast<uint32_t>(p.first)} << 32) |
                                   static_cast<uint32_t>(p.second));
    }
  };

  BpeTokenizer() = default;
  absl::Status ParseModel(const nlohmann::json& model);
  absl::Status ParseAddedTokens(const nlohmann::json& added_tokens);
  absl::Status ParsePreTokenizer(const nlohmann::json& json, const std::string& field);
  absl::Status ParseDecoder(const nlohmann::json& json, const std::string& field);

  // The bytes of `ids` before UTF-8 repair.
  std::string DecodeBytes(absl::Span<const int32_t> ids, bool skip_special) const;
  absl::Status EncodePlain(std::string_view text, std::vector<int32_t>* ids) const;
  void EncodeWord(const std::string& word, std::vector<int32_t>* ids) const;
  std::vector<int32_t> RunBpe(const std::string& word) const;

  absl::flat_hash_map<std::string, int32_t> vocab_;
  absl::flat_hash_map<std::pair<int32_t, int32_t>, Merge, PairHash> merges_;
  std::vector<std::string> id_to_token_;  // Model and added tokens.
  std::vector<bool> is_special_;
  std::vector<bool> is_byte_fallback_;  // Id is a "<0xAB>" token.
  absl::flat_hash_map<std::string, int32_t> added_;
  std::unique_ptr<tokenizer_internal::AddedTokenMatcher> added_matcher_;
  std::array<int32_t, 256> byte_fallback_ids_;  // -1 where absent.

  std::vector<PreTokenizeStep> pre_tokenize_steps_;
  bool byte_level_ = false;          // Pre-tokenizer maps bytes to GPT-2 chars.
  bool byte_level_decoder_ = false;  // Decoder maps them back.
  bool nfc_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  bool fuse_unk_ = false;
  std::optional<int32_t> unk_id_;
  std::optional<int32_t> bos_id_;
  std::optional<int32_t> eos_id_;

  static constexpr size_t kMaxCacheEntries = 1 << 16;
  mutable absl::Mutex cache_mu_;
  mutable absl::flat_hash_map<std::string, std::vector<int32_t>> cache_
      ABSL_GUARDED_BY(cache_mu_);
};

}  // namespace kvcast

#endif  // KVCAST_ENGINE_TOKENIZER_BPE_TOKENIZER_H_
