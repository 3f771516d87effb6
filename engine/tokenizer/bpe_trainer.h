// Deterministic byte-level BPE training that emits a complete HF
// `tokenizer.json`, for tiny test models.
//
// The result has: a BPE model whose first 256 ids are the single bytes in
// GPT-2 byte order ("!" is id 0), then one id per learned merge; a
// Sequence[Split(Llama-3 regex, Isolated), ByteLevel(use_regex=false)]
// pre-tokenizer; a ByteLevel decoder; and the added special tokens
// "<|begin_of_text|>" and "<|end_of_text|>" as the last two ids.
//
// Training pre-tokenizes `corpus` with the Llama-3 split regex, then
// repeatedly merges the most frequent adjacent pair (ties: the pair whose
// (left, right) token strings sort first bytewise) until the vocabulary
// holds `vocab_size` ids or no pair remains; the output is a pure function
// of the arguments. Thread-safe (no shared state).
#ifndef KVCAST_ENGINE_TOKENIZER_BPE_TRAINER_H_
#define KVCAST_ENGINE_TOKENIZER_BPE_TRAINER_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace kvcast {

// Returns the tokenizer.json text. InvalidArgument when `vocab_size` < 258
// (256 bytes + 2 special tokens) or `corpus` is not valid UTF-8. The
// vocabulary is smaller than `vocab_size` only when the corpus runs out of
// pairs to merge.
absl::StatusOr<std::string> TrainByteLevelBpeTokenizerJson(std::string_view corpus,
                                                          int vocab_size);

}  // namespace kvcast

#endif  // KVCAST_ENGINE_TOKENIZER_BPE_TRAINER_H_
