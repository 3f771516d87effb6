// No Abseil headers here; see sentencepiece_shim.h.
#include "engine/tokenizer/internal/sentencepiece_shim.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

namespace kvcast {
namespace tokenizer_internal {
namespace {

std::optional<SentencePieceError> ToError(const sentencepiece::util::Status& status) {
  if (status.ok()) return std::nullopt;
  return SentencePieceError{static_cast<int>(status.code()), status.ToString()};
}

}  // namespace

SentencePieceShim::SentencePieceShim()
    : processor_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {}
SentencePieceShim::~SentencePieceShim() = default;

std::optional<SentencePieceError> SentencePieceShim::Load(const std::string& model_path) {
  return ToError(processor_->Load(model_path));
}

std::optional<SentencePieceError> SentencePieceShim::Encode(std::string_view text,
                                                            std::vector<int>* ids) const {
  return ToError(processor_->Encode(text, ids));
}

std::optional<SentencePieceError> SentencePieceShim::Decode(const std::vector<int>& ids,
                                                            std::string* text) const {
  return ToError(processor_->Decode(ids, text));
}

int SentencePieceShim::PieceSize() const { return processor_->GetPieceSize(); }
int SentencePieceShim::PieceToId(std::string_view piece) const {
  return processor_->PieceToId(piece);
}
const std::string& SentencePieceShim::IdToPiece(int id) const { return processor_->IdToPiece(id); }
bool SentencePieceShim::IsControl(int id) const { return processor_->IsControl(id); }
bool SentencePieceShim::IsUnknown(int id) const { return processor_->IsUnknown(id); }
bool SentencePieceShim::IsByte(int id) const { return processor_->IsByte(id); }
bool SentencePieceShim::IsUnused(int id) const { return processor_->IsUnused(id); }
float SentencePieceShim::GetScore(int id) const { return processor_->GetScore(id); }
int SentencePieceShim::bos_id() const { return processor_->bos_id(); }
int SentencePieceShim::eos_id() const { return processor_->eos_id(); }

std::optional<SentencePieceError> TrainSentencePiece(const std::string& args) {
  return ToError(sentencepiece::SentencePieceTrainer::Train(args));
}

}  // namespace tokenizer_internal
}  // namespace kvcast
