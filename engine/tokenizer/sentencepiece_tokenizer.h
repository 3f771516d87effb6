// Tokenizer over a SentencePiece `tokenizer.model` (Llama-2, Mistral, T5
// family), backed by Debian's libsentencepiece.
//
// Encode matches control-piece strings in the text (e.g. "<s>", "</s>") as
// those tokens and hands the text between them to SentencePiece; everything
// else (normalization, dummy prefix, byte fallback, user-defined symbols) is
// SentencePiece's own behaviour. Decode omits control pieces whether or not
// `skip_special` is set (SentencePiece renders them as nothing).
//
// Immutable after construction; all methods are const and thread-safe.
#ifndef KVCAST_ENGINE_TOKENIZER_SENTENCEPIECE_TOKENIZER_H_
#define KVCAST_ENGINE_TOKENIZER_SENTENCEPIECE_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/tokenizer/internal/added_tokens.h"
#include "engine/tokenizer/internal/sentencepiece_shim.h"
#include "engine/tokenizer/tokenizer.h"

namespace kvcast {

class SentencePieceTokenizer : public Tokenizer {
 public:
  // Loads the model at `path`. BOS/EOS are the pieces `names` gives
  // (InvalidArgument when absent from the vocabulary), else the model's own
  // bos/eos ids when it defines them. Errors from SentencePiece keep their
  // canonical code with `path` in the message.
  static absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> FromFile(
      const std::string& path, const SpecialTokenNames& names = {});

  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                              bool add_bos) const override;
  std::string Decode(absl::Span<const int32_t> ids, bool skip_special = false) const override;
  int32_t vocab_size() const override { return shim_.PieceSize(); }
  std::optional<int32_t> bos_id() const override { return bos_id_; }
  std::optional<int32_t> eos_id() const override { return eos_id_; }
  std::optional<int32_t> TokenId(std::string_view token) const override;

 private:
  SentencePieceTokenizer() = default;

  tokenizer_internal::SentencePieceShim shim_;
  std::unique_ptr<tokenizer_internal::AddedTokenMatcher> control_matcher_;
  std::optional<int32_t> bos_id_;
  std::optional<int32_t> eos_id_;
};

}  // namespace kvcast

#endif  // KVCAST_ENGINE_TOKENIZER_SENTENCEPIECE_TOKENIZER_H_
