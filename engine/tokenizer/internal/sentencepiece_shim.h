// A thin wrapper over sentencepiece::SentencePieceProcessor that keeps
// sentencepiece's headers in one translation unit: they declare
// `absl::string_view` as std::string_view, which clashes with Debian's
// Abseil (its own string_view class), so no file may include both.
// Errors are therefore returned as (canonical code, message) and turned into
// absl::Status by the caller.
//
// After Load, all methods are const and thread-safe (SentencePieceProcessor
// is immutable once loaded).
#ifndef KVCAST_ENGINE_TOKENIZER_INTERNAL_SENTENCEPIECE_SHIM_H_
#define KVCAST_ENGINE_TOKENIZER_INTERNAL_SENTENCEPIECE_SHIM_H_

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}  // namespace sentencepiece

namespace kvcast {
namespace tokenizer_internal {

struct SentencePieceError {
  int code;  // An absl::StatusCode value (sentencepiece uses the same codes).
  std::string message;
};

class SentencePieceShim {
 public:
  SentencePieceShim();
  ~SentencePieceShim();

  std::optional<SentencePieceError> Load(const std::string& model_path);
  std::optional<SentencePieceError> Encode(std::string_view text, std::vector<int>* ids) const;
  std::optional<SentencePieceError> Decode(const std::vector<int>& ids, std::string* text) const;

  int PieceSize() const;
  int PieceToId(std::string_view piece) const;  // unk_id() when absent.
  const std::string& IdToPiece(int id) const;
  bool IsControl(int id) const;
  bool IsUnknown(int id) const;
  bool IsByte(int id) const;
  bool IsUnused(int id) const;
  float GetScore(int id) const;
  int bos_id() const;  // -1 when the model has none.
  int eos_id() const;

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
};

// Runs sentencepiece::SentencePieceTrainer::Train with a flag string such as
// "--input=... --model_prefix=... --vocab_size=...". For tests and tools.
std::optional<SentencePieceError> TrainSentencePiece(const std::string& args);

}  // namespace tokenizer_internal
}  // namespace kvcast

#endif  // KVCAST_ENGINE_TOKENIZER_INTERNAL_SENTENCEPIECE_SHIM_H_
