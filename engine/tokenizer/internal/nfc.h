// Unicode Normalization Form C, for HF "NFC" normalizers. Tables are
// generated from Unicode 14 (gen_nfc_tables.py). Pure function, thread-safe.
#ifndef KVCAST_ENGINE_TOKENIZER_INTERNAL_NFC_H_
#define KVCAST_ENGINE_TOKENIZER_INTERNAL_NFC_H_

#include <string>
#include <string_view>

namespace kvcast {
namespace tokenizer_internal {

// `text` must be valid UTF-8.
std::string ToNfc(std::string_view text);

}  // namespace tokenizer_internal
}  // namespace kvcast

#endif  // KVCAST_ENGINE_TOKENIZER_INTERNAL_NFC_H_
