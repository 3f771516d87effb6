// The GPT-2 byte <-> unicode mapping used by byte-level BPE ("ByteLevel" in
// HF tokenizers): every byte is shown as one printable code point so that
// vocabularies are valid UTF-8 strings. Pure functions over immutable
// tables, thread-safe.
#ifndef KVCAST_ENGINE_TOKENIZER_INTERNAL_BYTE_LEVEL_H_
#define KVCAST_ENGINE_TOKENIZER_INTERNAL_BYTE_LEVEL_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvcast {
namespace tokenizer_internal {

// The 256 byte values in GPT-2 order: the printable ones (which map to
// themselves) first, then the rest (which map to U+0100 onwards).
const std::array<uint8_t, 256>& Gpt2ByteOrder();

// Byte-level form of raw bytes: each byte replaced by its UTF-8 code point.
std::string BytesToByteLevel(std::string_view bytes);

// Reverse mapping. Returns false (leaving *out partially appended) when
// `token` holds a code point outside the byte-level alphabet.
bool ByteLevelToBytes(std::string_view token, std::string* out);

}  // namespace tokenizer_internal
}  // namespace kvcast

#endif  // KVCAST_ENGINE_TOKENIZER_INTERNAL_BYTE_LEVEL_H_
