// The tokenizer stored in a GGUF file's metadata (tokenizer.ggml.*).
//
// Supported: tokenizer.ggml.model "gpt2" (byte-level BPE: `tokens`,
// `merges`, `token_type`) with the pre-tokenizers that
// tokenizer.ggml.pre names: "gpt2", "smollm" (digits split one by one, then
// GPT-2's pattern), "llama-bpe" (Llama 3) and "qwen2" (with NFC). Tokens of
// type control (3) or user-defined (4) are matched in text as whole tokens,
// as HF's added tokens are; control tokens are special (dropped by
// Decode(skip_special)). BOS is tokenizer.ggml.bos_token_id when
// tokenizer.ggml.add_bos_token is true (absent: false for gpt2), EOS
// tokenizer.ggml.eos_token_id.
//
// tokenizer.ggml.model "llama" (SentencePiece-style, scores and byte
// fallback) is read by spm_gguf_tokenizer.h.
//
// Errors name the file and key: NotFound for missing keys; InvalidArgument
// for wrong value types, an unsupported model or pre-tokenizer, ids out of
// range, or token arrays of different lengths.
// Thread safety: a stateless function; the Tokenizer it returns is as
// thread-safe as any (tokenizer.h).
#ifndef KVCAST_ENGINE_TOKENIZER_GGUF_TOKENIZER_H_
#define KVCAST_ENGINE_TOKENIZER_GGUF_TOKENIZER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "engine/model/gguf.h"
#include "engine/tokenizer/tokenizer.h"

namespace kvcast {

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadGgufTokenizer(const GgufFile& file);

}  // namespace kvcast

#endif  // KVCAST_ENGINE_TOKENIZER_GGUF_TOKENIZER_H_
