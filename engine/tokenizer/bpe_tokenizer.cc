#include "engine/tokenizer/bpe_tokenizer.h"

#include <cstdio>
#include <fstream>
#include <queue>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/tokenizer/internal/byte_level.h"
#include "engine/tokenizer/internal/nfc.h"
#include "engine/tokenizer/internal/utf8.h"
#include "nlohmann/json.hpp"

namespace kvcast {
namespace {

using nlohmann::json;
using tokenizer_internal::SplitRegex;

// Largest id accepted from a file; guards allocations against garbage.
constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;

absl::Status Invalid(const std::string& field, const std::string& problem) {
  return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: ", field, " ", problem));
}

// Quotes `s` for an error message, shortened.
std::string Quote(const std::string& s) {
  return absl::StrCat("\"", s.size() > 60 ? s.substr(0, 60) + "..." : s, "\"");
}

const json* Find(const json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

// Reads an optional boolean field; absent or null means `fallback`.
absl::Status GetBool(const json& object, const char* key, const std::string& field,
                     bool fallback, bool* out) {
  const json* v = Find(object, key);
  if (v == nullptr || v->is_null()) {
    *out = fallback;
    return absl::OkStatus();
  }
  if (!v->is_boolean()) return Invalid(absl::StrCat(field, ".", key), "is not a boolean");
  *out = v->get<bool>();
  return absl::OkStatus();
}

absl::StatusOr<std::string> GetType(const json& object, const std::string& field) {
  const json* type = Find(object, "type");
  if (type == nullptr || !type->is_string()) return Invalid(field, "has no string \"type\"");
  return type->get<std::string>();
}

// Parses "<0xAB>" into its byte value.
std::optional<uint8_t> ByteFallbackValue(const std::string& token) {
  unsigned value = 0;
  char tail = 0;
  if (token.size() != 6 || token.compare(0, 3, "<0x") != 0 || token[5] != '>') return std::nullopt;
  if (std::sscanf(token.c_str() + 3, "%2X%c", &value, &tail) != 2 || tail != '>') {
    return std::nullopt;
  }
  return static_cast<uint8_t>(value);
}

}  // namespace

absl::StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::FromFile(
    const std::string& path, const SpecialTokenNames& names) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  auto tokenizer = FromJson(buffer.str(), names);
  if (!tokenizer.ok()) {
    return absl::Status(tokenizer.status().code(),
                        absl::StrCat(path, ": ", tokenizer.status().message()));
  }
  return tokenizer;
}

absl::StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::FromJson(
    std::string_view json_text, const SpecialTokenNames& names) {
  const json root = json::parse(json_text.begin(), json_text.end(), nullptr, false);
  if (root.is_discarded()) return Invalid("text", "is not valid JSON");
  return FromJsonValue(root, names);
}

absl::StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::FromJsonValue(
    const nlohmann::json& root, const SpecialTokenNames& names) {
  if (!root.is_object()) return Invalid("root", "is not a JSON object");
  std::unique_ptr<BpeTokenizer> t(new BpeTokenizer());
  const json* model = Find(root, "model");
  if (model == nullptr) return Invalid("model", "is missing");
  RETURN_IF_ERROR(t->ParseModel(*model));
  if (const json* added = Find(root, "added_tokens"); added != nullptr && !added->is_null()) {
    RETURN_IF_ERROR(t->ParseAddedTokens(*added));
  } else {
    t->added_matcher_ = std::make_unique<tokenizer_internal::AddedTokenMatcher>(
        std::vector<std::pair<std::string, int32_t>>{});
    t->is_special_.resize(t->id_to_token_.size(), false);
    t->is_byte_fallback_.resize(t->id_to_token_.size(), false);
  }
  if (const json* n = Find(root, "normalizer"); n != nullptr && !n->is_null()) {
    ASSIGN_OR_RETURN(std::string type, GetType(*n, "normalizer"));
    if (type != "NFC") {
      return Invalid("normalizer.type", absl::StrCat(Quote(type), " is not supported (only null or NFC)"));
    }
    t->nfc_ = true;
  }
  if (const json* p = Find(root, "pre_tokenizer"); p != nullptr && !p->is_null()) {
    RETURN_IF_ERROR(t->ParsePreTokenizer(*p, "pre_tokenizer"));
  }
  if (const json* d = Find(root, "decoder"); d != nullptr && !d->is_null()) {
    RETURN_IF_ERROR(t->ParseDecoder(*d, "decoder"));
  }
  const auto resolve = [&](const std::optional<std::string>& name, const char* what,
                           std::optional<int32_t>* id) -> absl::Status {
    if (!name.has_value()) return absl::OkStatus();
    *id = t->TokenId(*name);
    if (!id->has_value()) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer_config.json: ", what, " ",
                                                     Quote(*name), " is not in the vocabulary"));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(resolve(names.bos_token, "bos_token", &t->bos_id_));
  RETURN_IF_ERROR(resolve(names.eos_token, "eos_token", &t->eos_id_));
  return t;
}

absl::Status BpeTokenizer::ParseModel(const json& model) {
  ASSIGN_OR_RETURN(std::string type, GetType(model, "model"));
  if (type != "BPE") {
    return Invalid("model.type", absl::StrCat(Quote(type), " is not supported (only BPE)"));
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const json* v = Find(model, key);
    if (v != nullptr && !v->is_null() && !(v->is_string() && v->get<std::string>().empty())) {
      return Invalid(absl::StrCat("model.", key), "is not supported");
    }
  }
  if (const json* v = Find(model, "dropout"); v != nullptr && !v->is_null()) {
    if (!v->is_number() || v->get<double>() != 0.0) {
      return Invalid("model.dropout", "is not supported");
    }
  }
  RETURN_IF_ERROR(GetBool(model, "byte_fallback", "model", false, &byte_fallback_));
  RETURN_IF_ERROR(GetBool(model, "ignore_merges", "model", false, &ignore_merges_));
  RETURN_IF_ERROR(GetBool(model, "fuse_unk", "model", false, &fuse_unk_));

  const json* vocab = Find(model, "vocab");
  if (vocab == nullptr || !vocab->is_object()) return Invalid("model.vocab", "is not an object");
  int64_t max_id = -1;
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() > kMaxTokenId) {
      return Invalid(absl::StrCat("model.vocab[", Quote(it.key()), "]"),
                     "is not a token id in [0, 2^24)");
    }
    const int64_t id = it.value().get<int64_t>();
    vocab_[it.key()] = static_cast<int32_t>(id);
    max_id = std::max(max_id, id);
  }
  id_to_token_.assign(max_id + 1, std::string());
  for (const auto& [token, id] : vocab_) id_to_token_[id] = token;

  byte_fallback_ids_.fill(-1);
  is_byte_fallback_.assign(id_to_token_.size(), false);
  if (byte_fallback_) {
    for (const auto& [token, id] : vocab_) {
      if (auto byte = ByteFallbackValue(token)) {
        byte_fallback_ids_[*byte] = id;
        is_byte_fallback_[id] = true;
      }
    }
  }

  if (const json* unk = Find(model, "unk_token"); unk != nullptr && !unk->is_null()) {
    if (!unk->is_string()) return Invalid("model.unk_token", "is not a string");
    auto it = vocab_.find(unk->get<std::string>());
    if (it == vocab_.end()) {
      return Invalid("model.unk_token", absl::StrCat(Quote(unk->get<std::string>()),
                                                     " is not in model.vocab"));
    }
    unk_id_ = it->second;
  }

  const json* merges = Find(model, "merges");
  if (merges == nullptr || !merges->is_array()) return Invalid("model.merges", "is not an array");
  for (size_t rank = 0; rank < merges->size(); ++rank) {
    const json& m = (*merges)[rank];
    const std::string field = absl::StrCat("model.merges[", rank, "]");
    std::string left, right;
    if (m.is_string()) {
      const std::string& s = m.get_ref<const std::string&>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        return Invalid(field, absl::StrCat(Quote(s), " is not two tokens separated by one space"));
      }
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      return Invalid(field, "is neither \"a b\" nor [\"a\", \"b\"]");
    }
    auto l = vocab_.find(left), r = vocab_.find(right), merged = vocab_.find(left + right);
    for (const auto& [it, name] : {std::make_pair(l, &left), std::make_pair(r, &right)}) {
      if (it == vocab_.end()) {
        return Invalid(field, absl::StrCat("names token ", Quote(*name), " not in model.vocab"));
      }
    }
    if (merged == vocab_.end()) {
      return Invalid(field, absl::StrCat("merges into ", Quote(left + right),
                                         " which is not in model.vocab"));
    }
    merges_.try_emplace({l->second, r->second},
                        Merge{static_cast<int32_t>(rank), merged->second});
  }
  return absl::OkStatus();
}

absl::Status BpeTokenizer::ParseAddedTokens(const json& added_tokens) {
  if (!added_tokens.is_array()) return Invalid("added_tokens", "is not an array");
  std::vector<std::pair<std::string, int32_t>> tokens;
  for (size_t i = 0; i < added_tokens.size(); ++i) {
    const json& a = added_tokens[i];
    const std::string field = absl::StrCat("added_tokens[", i, "]");
    const json* id = Find(a, "id");
    const json* content = Find(a, "content");
    if (id == nullptr || !id->is_number_integer() || id->get<int64_t>() < 0 ||
        id->get<int64_t>() > kMaxTokenId) {
      return Invalid(field + ".id", "is not a token id in [0, 2^24)");
    }
    if (content == nullptr || !content->is_string() || content->get<std::string>().empty()) {
      return Invalid(field + ".content", "is not a non-empty string");
    }
    bool special = false;
    RETURN_IF_ERROR(GetBool(a, "special", field, false, &special));
    const auto token_id = static_cast<int32_t>(id->get<int64_t>());
    const std::string& text = content->get_ref<const std::string&>();
    if (static_cast<size_t>(token_id) >= id_to_token_.size()) {
      id_to_token_.resize(token_id + 1);
    }
    id_to_token_[token_id] = text;
    if (is_special_.size() < id_to_token_.size()) is_special_.resize(id_to_token_.size(), false);
    is_special_[token_id] = special;
    added_[text] = token_id;
    tokens.emplace_back(text, token_id);
  }
  is_special_.resize(id_to_token_.size(), false);
  is_byte_fallback_.resize(id_to_token_.size(), false);
  added_matcher_ = std::make_unique<tokenizer_internal::AddedTokenMatcher>(tokens);
  return absl::OkStatus();
}

absl::Status BpeTokenizer::ParsePreTokenizer(const json& p, const std::string& field) {
  ASSIGN_OR_RETURN(std::string type, GetType(p, field));
  if (byte_level_) return Invalid(field, "follows a ByteLevel step (ByteLevel must be last)");
  if (type == "Sequence") {
    const json* steps = Find(p, "pretokenizers");
    if (steps == nullptr || !steps->is_array()) {
      return Invalid(field + ".pretokenizers", "is not an array");
    }
    for (size_t i = 0; i < steps->size(); ++i) {
      RETURN_IF_ERROR(
          ParsePreTokenizer((*steps)[i], absl::StrCat(field, ".pretokenizers[", i, "]")));
    }
    return absl::OkStatus();
  }
  PreTokenizeStep step;
  if (type == "ByteLevel") {
    bool use_regex = true;
    RETURN_IF_ERROR(GetBool(p, "use_regex", field, true, &use_regex));
    RETURN_IF_ERROR(GetBool(p, "add_prefix_space", field, false, &step.add_prefix_space));
    if (use_regex) {
      ASSIGN_OR_RETURN(step.split, SplitRegex::Compile(tokenizer_internal::kGpt2SplitPattern));
    }
    byte_level_ = true;
  } else if (type == "Split") {
    const json* pattern = Find(p, "pattern");
    const json* regex = pattern == nullptr ? nullptr : Find(*pattern, "Regex");
    if (regex == nullptr || !regex->is_string()) {
      return Invalid(field + ".pattern", "is not {\"Regex\": string}");
    }
    const json* behavior = Find(p, "behavior");
    if (behavior == nullptr || !behavior->is_string() || behavior->get<std::string>() != "Isolated") {
      return Invalid(field + ".behavior", "is not \"Isolated\" (the only behavior supported)");
    }
    bool invert = false;
    RETURN_IF_ERROR(GetBool(p, "invert", field, false, &invert));
    if (invert) return Invalid(field + ".invert", "true is not supported");
    auto compiled = SplitRegex::Compile(regex->get<std::string>());
    if (!compiled.ok()) return Invalid(field + ".pattern", std::string(compiled.status().message()));
    step.split = *std::move(compiled);
  } else {
    return Invalid(field + ".type", absl::StrCat(Quote(type), " is not supported"));
  }
  pre_tokenize_steps_.push_back(std::move(step));
  return absl::OkStatus();
}

absl::Status BpeTokenizer::ParseDecoder(const json& d, const std::string& field) {
  ASSIGN_OR_RETURN(std::string type, GetType(d, field));
  if (type == "Sequence") {
    const json* steps = Find(d, "decoders");
    if (steps == nullptr || !steps->is_array()) return Invalid(field + ".decoders", "is not an array");
    for (size_t i = 0; i < steps->size(); ++i) {
      RETURN_IF_ERROR(ParseDecoder((*steps)[i], absl::StrCat(field, ".decoders[", i, "]")));
    }
  } else if (type == "ByteLevel") {
    byte_level_decoder_ = true;
  } else if (type != "ByteFallback" && type != "Fuse") {
    return Invalid(field + ".type", absl::StrCat(Quote(type), " is not supported"));
  }
  return absl::OkStatus();
}

std::optional<int32_t> BpeTokenizer::TokenId(std::string_view token) const {
  const std::string key(token);
  if (auto it = added_.find(key); it != added_.end()) return it->second;
  if (auto it = vocab_.find(key); it != vocab_.end()) return it->second;
  return std::nullopt;
}

absl::StatusOr<std::vector<int32_t>> BpeTokenizer::Encode(std::string_view text,
                                                          bool add_bos) const {
  if (!tokenizer_internal::IsValidUtf8(text)) {
    return absl::InvalidArgumentError("Encode: text is not valid UTF-8");
  }
  std::vector<int32_t> ids;
  if (add_bos && bos_id_.has_value()) ids.push_back(*bos_id_);
  for (const auto& segment : added_matcher_->Split(text)) {
    if (segment.id >= 0) {
      ids.push_back(segment.id);
    } else {
      RETURN_IF_ERROR(EncodePlain(segment.text, &ids));
    }
  }
  return ids;
}

absl::Status BpeTokenizer::EncodePlain(std::string_view text, std::vector<int32_t>* ids) const {
  std::string normalized;
  if (nfc_) {
    normalized = tokenizer_internal::ToNfc(text);
    text = normalized;
  }
  // Each step refines the pieces of the previous one; prefix spaces need
  // owned strings, so pieces are stored as strings.
  std::vector<std::string> pieces{std::string(text)};
  std::vector<std::string_view> split;
  for (const PreTokenizeStep& step : pre_tokenize_steps_) {
    std::vector<std::string> next;
    for (std::string& piece : pieces) {
      if (step.add_prefix_space && (piece.empty() || piece[0] != ' ')) piece.insert(0, " ");
      if (step.split == nullptr) {
        next.push_back(std::move(piece));
        continue;
      }
      split.clear();
      RETURN_IF_ERROR(step.split->Split(piece, &split));
      for (std::string_view s : split) next.emplace_back(s);
    }
    pieces = std::move(next);
  }
  for (const std::string& piece : pieces) {
    if (piece.empty()) continue;
    EncodeWord(byte_level_ ? tokenizer_internal::BytesToByteLevel(piece) : piece, ids);
  }
  return absl::OkStatus();
}

void BpeTokenizer::EncodeWord(const std::string& word, std::vector<int32_t>* ids) const {
  if (ignore_merges_) {
    if (auto it = vocab_.find(word); it != vocab_.end()) {
      ids->push_back(it->second);
      return;
    }
  }
  {
    absl::MutexLock lock(&cache_mu_);
    if (auto it = cache_.find(word); it != cache_.end()) {
      ids->insert(ids->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> result = RunBpe(word);
  ids->insert(ids->end(), result.begin(), result.end());
  absl::MutexLock lock(&cache_mu_);
  if (cache_.size() < kMaxCacheEntries) cache_.emplace(word, std::move(result));
}

std::vector<int32_t> BpeTokenizer::RunBpe(const std::string& word) const {
  // Symbols form a linked list; merging marks the right one dead (len 0).
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    bool alive;
  };
  std::vector<Symbol> symbols;
  const auto append = [&](int32_t id) {
    const auto n = static_cast<int32_t>(symbols.size());
    symbols.push_back(Symbol{id, n - 1, n + 1, true});
  };
  bool last_was_unk = false;
  for (size_t pos = 0; pos < word.size();) {
    const size_t start = pos;
    tokenizer_internal::NextCodePoint(word, &pos);
    const std::string ch = word.substr(start, pos - start);
    if (auto it = vocab_.find(ch); it != vocab_.end()) {
      append(it->second);
      last_was_unk = false;
      continue;
    }
    if (byte_fallback_) {
      bool all_bytes = true;
      for (char c : ch) all_bytes &= byte_fallback_ids_[static_cast<uint8_t>(c)] >= 0;
      if (all_bytes) {
        for (char c : ch) append(byte_fallback_ids_[static_cast<uint8_t>(c)]);
        last_was_unk = false;
        continue;
      }
    }
    if (unk_id_.has_value() && !(fuse_unk_ && last_was_unk)) append(*unk_id_);
    last_was_unk = unk_id_.has_value();
  }
  if (symbols.empty()) return {};
  symbols.back().next = -1;

  struct Candidate {
    int32_t rank;
    int32_t pos;
    int32_t merged_id;
    bool operator<(const Candidate& o) const {  // Min-heap on (rank, pos).
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate> queue;
  const auto push_pair = [&](int32_t left) {
    if (left < 0 || symbols[left].next < 0) return;
    auto it = merges_.find({symbols[left].id, symbols[symbols[left].next].id});
    if (it != merges_.end()) queue.push(Candidate{it->second.rank, left, it->second.merged_id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) push_pair(i);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    auto it = merges_.find({left.id, right.id});
    if (it == merges_.end() || it->second.merged_id != top.merged_id) continue;
    left.id = top.merged_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    push_pair(left.prev);
    push_pair(top.pos);
  }
  std::vector<int32_t> out;
  for (int32_t i = 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
  return out;
}

std::string BpeTokenizer::Decode(absl::Span<const int32_t> ids, bool skip_special) const {
  return tokenizer_internal::Utf8Lossy(DecodeBytes(ids, skip_special));
}

std::optional<std::string> BpeTokenizer::TokenBytes(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || is_special_[id]) return std::nullopt;
  std::string bytes = DecodeBytes({&id, 1}, /*skip_special=*/true);
  if (bytes.empty()) return std::nullopt;
  return bytes;
}

std::string BpeTokenizer::DecodeBytes(absl::Span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  for (int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size()) continue;
    if (skip_special && is_special_[id]) continue;
    const std::string& token = id_to_token_[id];
    if (is_byte_fallback_[id]) {
      bytes.push_back(static_cast<char>(*ByteFallbackValue(token)));
      continue;
    }
    if (byte_level_decoder_) {
      // As HF: a token with a character outside the byte alphabet (e.g. an
      // added token containing a space) is emitted verbatim.
      const size_t mark = bytes.size();
      if (tokenizer_internal::ByteLevelToBytes(token, &bytes)) continue;
      bytes.resize(mark);
    }
    bytes += token;
  }
  return bytes;
}

}  // namespace kvcast
