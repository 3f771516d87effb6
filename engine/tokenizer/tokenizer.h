// Text <-> token id conversion for LLM inference.
//
// A Tokenizer is immutable after construction: Encode, Decode and every
// accessor are const and safe to call concurrently from many threads
// without external synchronization. A StreamingDecoder is single-threaded
// state for one generated sequence.
#ifndef KVCAST_ENGINE_TOKENIZER_TOKENIZER_H_
#define KVCAST_ENGINE_TOKENIZER_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace kvcast {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Token ids of `text`, preceded by bos_id() when `add_bos` and a BOS token
  // is configured. Special-token strings inside `text` (e.g.
  // "<|end_of_text|>") are matched as those tokens, as HF does for added
  // tokens. InvalidArgument when `text` is not valid UTF-8.
  virtual absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                                      bool add_bos) const = 0;

  // Text of `ids`, special tokens omitted when `skip_special`. Byte sequences
  // that do not form valid UTF-8 (e.g. a multi-byte character cut between
  // tokens) become U+FFFD, as HF does; ids out of range are skipped.
  virtual std::string Decode(absl::Span<const int32_t> ids, bool skip_special = false) const = 0;

  // The bytes token `id` adds to generated text, before any UTF-8 repair
  // (a byte token's one byte; a byte-level token's own bytes), for
  // constrained decoding (engine/grammar); nullopt for special tokens and
  // ids out of range, which add no text of the model's own. The default
  // decodes the token alone, so a token holding part of a multi-byte
  // character reads as U+FFFD there; tokenizers override it with the exact
  // bytes.
  // (Inline: the interface keeps no key function, so its type information
  // does not tie every implementation to tokenizer.cc.)
  virtual std::optional<std::string> TokenBytes(int32_t id) const {
    if (id < 0 || id >= vocab_size()) return std::nullopt;
    std::string text = Decode({&id, 1}, /*skip_special=*/true);
    if (text.empty()) return std::nullopt;
    return text;
  }

  // One more than the largest id this tokenizer can produce or decode.
  virtual int32_t vocab_size() const = 0;
  virtual std::optional<int32_t> bos_id() const = 0;
  virtual std::optional<int32_t> eos_id() const = 0;
  // Id of the token whose vocabulary string is exactly `token` (model vocab
  // or added/special tokens), if any.
  virtual std::optional<int32_t> TokenId(std::string_view token) const = 0;
};

// Names of the BOS/EOS tokens, as tokenizer_config.json gives them.
struct SpecialTokenNames {
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
};

// Loads the tokenizer of a GGUF file (gguf_tokenizer.h) when `model_dir`
// is a regular file, else of a Hugging Face style model directory:
// `tokenizer.json` (byte-level BPE) if present, else `tokenizer.model`
// (SentencePiece), else NotFound naming `model_dir`. BOS/EOS come from
// `tokenizer_config.json` ("bos_token"/"eos_token", a string or an object
// with "content") when present. For tokenizer.json without that file there
// is no BOS/EOS; a SentencePiece model falls back to its own bos/eos ids.
// InvalidArgument (naming the file and field) for malformed files or a named
// BOS/EOS token that is not in the vocabulary.
//
// SentencePiece models load only in binaries that link
// //engine/tokenizer:sentencepiece (it installs the loader below at start-up);
// elsewhere a directory with only tokenizer.model is FailedPrecondition.
// Debian's libsentencepiece embeds its own protobuf, which cannot share a
// process with gRPC's libprotobuf, so the gRPC services leave it out.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& model_dir);

using SentencePieceLoader = absl::StatusOr<std::unique_ptr<Tokenizer>> (*)(
    const std::string& path, const SpecialTokenNames& names);
void SetSentencePieceLoader(SentencePieceLoader loader);

// Turns generated ids into text pieces ready to print, one id at a time.
// Text is released only once it is final: incomplete UTF-8 sequences (e.g.
// byte-fallback pieces of one character) are held back until completed.
// The concatenation of all Push() results plus Flush() equals
// tokenizer->Decode(all ids, skip_special).
// Not thread-safe; `tokenizer` is borrowed and must outlive this object.
class StreamingDecoder {
 public:
  explicit StreamingDecoder(const Tokenizer* tokenizer, bool skip_special = false)
      : tokenizer_(tokenizer), skip_special_(skip_special) {}

  // Returns the text newly completed by `id` (possibly empty).
  std::string Push(int32_t id);
  // Returns whatever is held back (incomplete sequences as U+FFFD) and
  // resets the decoder for a new sequence.
  std::string Flush();

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  // ids_[0, read_) was printed and is kept as context, so that the decoder
  // sees the same neighbourhood as a full decode (e.g. SentencePiece leading
  // spaces); ids_[read_, end) is pending.
  std::vector<int32_t> ids_;
  size_t read_ = 0;
};

}  // namespace kvcast

#endif  // KVCAST_ENGINE_TOKENIZER_TOKENIZER_H_
