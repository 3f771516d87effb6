// The SentencePiece-style tokenizer of a GGUF file (tokenizer.ggml.model
// "llama": Llama-2, Mistral, ...), as llama.cpp and sentencepiece's BPE
// models run it: spaces become U+2581, a U+2581 is prepended when
// tokenizer.ggml.add_space_prefix (default true), the text starts as one
// symbol per UTF-8 character, and adjacent symbols are merged while their
// concatenation is a vocabulary piece, highest tokenizer.ggml.scores first
// (leftmost on ties); a final symbol that is no piece becomes its bytes'
// <0xXX> tokens (byte fallback), else the unknown token. Control and
// user-defined tokens are matched in the text as whole tokens.
//
// Thread safety: immutable after construction; every method is const and
// thread-safe.
#ifndef KVCAST_ENGINE_TOKENIZER_SPM_GGUF_TOKENIZER_H_
#define KVCAST_ENGINE_TOKENIZER_SPM_GGUF_TOKENIZER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "engine/model/gguf.h"
#include "engine/tokenizer/tokenizer.h"

namespace kvcast {

// InvalidArgument (naming the file and key) for missing or inconsistent
// tokens / scores / token_type arrays or special ids out of range.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadSpmGgufTokenizer(const GgufFile& file);

}  // namespace kvcast

#endif  // KVCAST_ENGINE_TOKENIZER_SPM_GGUF_TOKENIZER_H_
