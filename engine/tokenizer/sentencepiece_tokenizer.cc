#include "engine/tokenizer/sentencepiece_tokenizer.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/tokenizer/internal/utf8.h"

namespace kvcast {
namespace {

absl::Status FromShimError(const tokenizer_internal::SentencePieceError& e,
                           const std::string& context) {
  return absl::Status(static_cast<absl::StatusCode>(e.code), absl::StrCat(context, ": ", e.message));
}

}  // namespace

absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::FromFile(
    const std::string& path, const SpecialTokenNames& names) {
  std::unique_ptr<SentencePieceTokenizer> t(new SentencePieceTokenizer());
  if (auto error = t->shim_.Load(path)) return FromShimError(*error, path);
  std::vector<std::pair<std::string, int32_t>> controls;
  for (int id = 0; id < t->shim_.PieceSize(); ++id) {
    if (t->shim_.IsControl(id)) controls.emplace_back(t->shim_.IdToPiece(id), id);
  }
  t->control_matcher_ = std::make_unique<tokenizer_internal::AddedTokenMatcher>(controls);
  const auto resolve = [&](const std::optional<std::string>& name, int model_id,
                           const char* what, std::optional<int32_t>* id) -> absl::Status {
    if (!name.has_value()) {
      if (model_id >= 0) *id = model_id;
      return absl::OkStatus();
    }
    *id = t->TokenId(*name);
    if (!id->has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tokenizer_config.json: ", what, " \"", *name, "\" is not a piece of ", path));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(resolve(names.bos_token, t->shim_.bos_id(), "bos_token", &t->bos_id_));
  RETURN_IF_ERROR(resolve(names.eos_token, t->shim_.eos_id(), "eos_token", &t->eos_id_));
  return t;
}

absl::StatusOr<std::vector<int32_t>> SentencePieceTokenizer::Encode(std::string_view text,
                                                                    bool add_bos) const {
  if (!tokenizer_internal::IsValidUtf8(text)) {
    return absl::InvalidArgumentError("Encode: text is not valid UTF-8");
  }
  std::vector<int32_t> ids;
  if (add_bos && bos_id_.has_value()) ids.push_back(*bos_id_);
  std::vector<int> piece_ids;
  for (const auto& segment : control_matcher_->Split(text)) {
    if (segment.id >= 0) {
      ids.push_back(segment.id);
      continue;
    }
    if (auto error = shim_.Encode(segment.text, &piece_ids)) {
      return FromShimError(*error, "SentencePiece Encode");
    }
    ids.insert(ids.end(), piece_ids.begin(), piece_ids.end());
  }
  return ids;
}

std::string SentencePieceTokenizer::Decode(absl::Span<const int32_t> ids,
                                           bool skip_special) const {
  std::vector<int> valid;
  valid.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || id >= shim_.PieceSize()) continue;
    if (skip_special && shim_.IsControl(id)) continue;
    valid.push_back(id);
  }
  std::string text;
  if (shim_.Decode(valid, &text).has_value()) return std::string();
  return tokenizer_internal::Utf8Lossy(text);
}

std::optional<int32_t> SentencePieceTokenizer::TokenId(std::string_view token) const {
  const int id = shim_.PieceToId(token);
  if (id < 0 || (shim_.IsUnknown(id) && shim_.IdToPiece(id) != token)) return std::nullopt;
  return id;
}

namespace {
// Makes LoadTokenizer read tokenizer.model in binaries linking this library.
const bool kRegistered = [] {
  SetSentencePieceLoader([](const std::string& path, const SpecialTokenNames& names)
                             -> absl::StatusOr<std::unique_ptr<Tokenizer>> {
    auto t = SentencePieceTokenizer::FromFile(path, names);
    if (!t.ok()) return t.status();
    return std::unique_ptr<Tokenizer>(std::move(*t));
  });
  return true;
}();
}  // namespace

}  // namespace kvcast
