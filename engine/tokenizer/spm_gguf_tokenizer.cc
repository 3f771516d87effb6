#include "engine/tokenizer/spm_gguf_tokenizer.h"

#include <array>
#include <cstdio>
#include <queue>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/tokenizer/internal/added_tokens.h"
#include "engine/tokenizer/internal/utf8.h"

namespace kvcast {
namespace {

constexpr char kSpace[] = "\xE2\x96\x81";  // U+2581
enum TokenType { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

class SpmGgufTokenizer : public Tokenizer {
 public:
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool add_bos) const override {
    if (!tokenizer_internal::IsValidUtf8(text)) {
      return absl::InvalidArgumentError("text is not valid UTF-8");
    }
    std::vector<int32_t> ids;
    if (add_bos && bos_) ids.push_back(*bos_);
    bool first = true;
    for (const auto& segment : added_->Split(text)) {
      if (segment.id >= 0) {
        ids.push_back(segment.id);
      } else {
        std::string piece;
        if (add_space_prefix_ && first) piece = kSpace;
        for (char c : segment.text) piece += c == ' ' ? std::string(kSpace) : std::string(1, c);
        EncodePlain(piece, &ids);
      }
      first = false;
    }
    return ids;
  }

  std::string Decode(absl::Span<const int32_t> ids, bool skip_special) const override {
    std::string text = DecodeBytes(ids, skip_special);
    if (add_space_prefix_ && !text.empty() && text[0] == ' ') text.erase(0, 1);
    return tokenizer_internal::Utf8Lossy(text);
  }

  // Mid-text bytes: the leading space of a word-start piece is kept.
  std::optional<std::string> TokenBytes(int32_t id) const override {
    if (id < 0 || id >= int32_t(tokens_.size())) return std::nullopt;
    const int type = types_[id];
    if (type == kControl || type == kUnknown || type == kUnused) return std::nullopt;
    std::string bytes = DecodeBytes({&id, 1}, /*skip_special=*/true);
    if (bytes.empty()) return std::nullopt;
    return bytes;
  }

  int32_t vocab_size() const override { return int32_t(tokens_.size()); }
  std::optional<int32_t> bos_id() const override { return bos_; }
  std::optional<int32_t> eos_id() const override { return eos_; }
  std::optional<int32_t> TokenId(std::string_view token) const override {
    auto it = vocab_.find(absl::string_view(token.data(), token.size()));
    if (it == vocab_.end()) return std::nullopt;
    return it->second;
  }

  std::vector<std::string> tokens_;
  std::vector<float> scores_;
  std::vector<int> types_;
  absl::flat_hash_map<std::string, int32_t> vocab_;
  std::array<int32_t, 256> byte_ids_;
  std::unique_ptr<tokenizer_internal::AddedTokenMatcher> added_;
  std::optional<int32_t> bos_, eos_, unk_;
  bool add_space_prefix_ = true;

 private:
  // The bytes of `ids` before UTF-8 repair, spaces restored.
  std::string DecodeBytes(absl::Span<const int32_t> ids, bool skip_special) const {
    std::string bytes;
    for (int32_t id : ids) {
      if (id < 0 || id >= int32_t(tokens_.size())) continue;
      const int type = types_[id];
      if (type == kByte) {
        unsigned value = 0;
        if (std::sscanf(tokens_[id].c_str(), "<0x%02X>", &value) == 1) bytes += char(value);
      } else if (type == kControl || type == kUnknown || type == kUnused) {
        if (!skip_special && type != kUnused) bytes += tokens_[id];
      } else {
        bytes += tokens_[id];
      }
    }
    std::string text;
    for (size_t pos = 0; pos < bytes.size();) {
      if (bytes.compare(pos, 3, kSpace) == 0) {
        text += ' ';
        pos += 3;
      } else {
        text += bytes[pos++];
      }
    }
    return text;
  }

  // Score-ordered merges over a linked list of symbols.
  void EncodePlain(const std::string& text, std::vector<int32_t>* ids) const {
    struct Symbol {
      size_t begin, len;
      int prev, next;
    };
    std::vector<Symbol> sym;
    for (size_t pos = 0; pos < text.size();) {
      const size_t len = std::max<size_t>(1, tokenizer_internal::ValidUtf8SequenceLength(text, pos));
      sym.push_back({pos, len, int(sym.size()) - 1, int(sym.size()) + 1});
      pos += len;
    }
    if (sym.empty()) return;
    sym.back().next = -1;
    struct Bigram {
      float score;
      int left;
      size_t len;  // merged byte length, to detect stale entries
      bool operator<(const Bigram& o) const {
        return score < o.score || (score == o.score && left > o.left);
      }
    };
    std::priority_queue<Bigram> queue;
    auto try_add = [&](int left) {
      if (left < 0 || sym[left].next < 0) return;
      const Symbol& a = sym[left];
      const Symbol& b = sym[a.next];
      auto it = vocab_.find(absl::string_view(text).substr(a.begin, a.len + b.len));
      if (it == vocab_.end()) return;
      queue.push({scores_[it->second], left, a.len + b.len});
    };
    for (int i = 0; i + 1 < int(sym.size()); ++i) try_add(i);
    while (!queue.empty()) {
      const Bigram top = queue.top();
      queue.pop();
      Symbol& a = sym[top.left];
      if (a.len == 0 || a.next < 0 || a.len + sym[a.next].len != top.len) continue;  // stale
      Symbol& b = sym[a.next];
      a.len += b.len;
      b.len = 0;
      a.next = b.next;
      if (a.next >= 0) sym[a.next].prev = top.left;
      try_add(a.prev);
      try_add(top.left);
    }
    for (int i = 0; i >= 0; i = sym[i].next) {
      const std::string_view piece = std::string_view(text).substr(sym[i].begin, sym[i].len);
      auto it = vocab_.find(absl::string_view(piece.data(), piece.size()));
      if (it != vocab_.end()) {
        ids->push_back(it->second);
        continue;
      }
      for (unsigned char c : piece) {
        if (byte_ids_[c] >= 0) {
          ids->push_back(byte_ids_[c]);
        } else if (unk_) {
          ids->push_back(*unk_);
        }
      }
    }
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadSpmGgufTokenizer(const GgufFile& file) {
  auto t = std::make_unique<SpmGgufTokenizer>();
  ASSIGN_OR_RETURN(const GgufValue* tokens, file.GetArray("tokenizer.ggml.tokens", GgufType::kString));
  ASSIGN_OR_RETURN(const GgufValue* scores, file.GetArray("tokenizer.ggml.scores", GgufType::kF32));
  ASSIGN_OR_RETURN(const GgufValue* types, file.GetArray("tokenizer.ggml.token_type", GgufType::kI32));
  const size_t n = tokens->elements.size();
  if (scores->elements.size() != n || types->elements.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        file.path(), ": tokenizer.ggml.tokens, .scores and .token_type have ", n, ", ",
        scores->elements.size(), " and ", types->elements.size(), " entries"));
  }
  t->byte_ids_.fill(-1);
  std::vector<std::pair<std::string, int32_t>> added;
  for (size_t i = 0; i < n; ++i) {
    t->tokens_.push_back(tokens->elements[i].s);
    t->scores_.push_back(float(scores->elements[i].f));
    t->types_.push_back(int(types->elements[i].i));
    t->vocab_.emplace(t->tokens_[i], int32_t(i));
    const int type = t->types_[i];
    unsigned value = 0;
    if (type == kByte && std::sscanf(t->tokens_[i].c_str(), "<0x%02X>", &value) == 1 && value < 256) {
      t->byte_ids_[value] = int32_t(i);
    }
    if (type == kUnknown && !t->unk_) t->unk_ = int32_t(i);
    if (type == kControl || type == kUserDefined) added.emplace_back(t->tokens_[i], int32_t(i));
  }
  t->added_ = std::make_unique<tokenizer_internal::AddedTokenMatcher>(added);
  for (auto [key, out] : {std::make_pair("tokenizer.ggml.bos_token_id", &t->bos_),
                          std::make_pair("tokenizer.ggml.eos_token_id", &t->eos_),
                          std::make_pair("tokenizer.ggml.unknown_token_id", &t->unk_)}) {
    if (file.Find(key) == nullptr) continue;
    ASSIGN_OR_RETURN(uint64_t id, file.GetUint(key));
    if (id >= n) {
      return absl::InvalidArgumentError(absl::StrCat(file.path(), ": metadata '", key, "' is ",
                                                     id, ", past the ", n, " tokens"));
    }
    *out = int32_t(id);
  }
  bool add_bos = true;  // llama.cpp's default for this model type.
  if (file.Find("tokenizer.ggml.add_bos_token") != nullptr) {
    ASSIGN_OR_RETURN(add_bos, file.GetBool("tokenizer.ggml.add_bos_token"));
  }
  if (!add_bos) t->bos_.reset();
  if (file.Find("tokenizer.ggml.add_space_prefix") != nullptr) {
    ASSIGN_OR_RETURN(t->add_space_prefix_, file.GetBool("tokenizer.ggml.add_space_prefix"));
  }
  return std::unique_ptr<Tokenizer>(std::move(t));
}

}  // namespace kvcast
