// UTF-8 helpers shared by the tokenizers. Pure functions, thread-safe.
#ifndef KVCAST_ENGINE_TOKENIZER_INTERNAL_UTF8_H_
#define KVCAST_ENGINE_TOKENIZER_INTERNAL_UTF8_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace kvcast {
namespace tokenizer_internal {

// Length in bytes of the well-formed UTF-8 sequence starting at text[pos],
// or 0 when the bytes there are not a complete well-formed sequence.
size_t ValidUtf8SequenceLength(std::string_view text, size_t pos);

bool IsValidUtf8(std::string_view text);

// Replaces each maximal ill-formed subsequence with U+FFFD, exactly as Rust's
// String::from_utf8_lossy (which HF tokenizers uses when decoding).
std::string Utf8Lossy(std::string_view bytes);

void AppendUtf8(char32_t cp, std::string* out);

// Decodes the code point at text[*pos] (which must be valid UTF-8) and
// advances *pos past it.
char32_t NextCodePoint(std::string_view text, size_t* pos);

}  // namespace tokenizer_internal
}  // namespace kvcast

#endif  // KVCAST_ENGINE_TOKENIZER_INTERNAL_UTF8_H_
