// libFuzzer target for tokenizer.json (engine/tokenizer/bpe_tokenizer.h):
// any document is either refused with a Status or makes a tokenizer that
// encodes text to ids inside its vocabulary and decodes them again.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "engine/tokenizer/bpe_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto tok = kvcast::BpeTokenizer::FromJson(text);
  if (!tok.ok()) return 0;
  // The document itself is a handy, varied string to encode (JSON quotes,
  // digits, spaces, UTF-8 from the vocabulary).
  for (std::string_view s : {std::string_view("Hello, world! 123 \xc3\xa9t\xc3\xa9\n  x"),
                             text.substr(0, 512)}) {
    auto ids = (*tok)->Encode(s, /*add_bos=*/true);
    if (!ids.ok()) continue;
    for (int32_t id : *ids) {
      if (id < 0 || id >= (*tok)->vocab_size()) __builtin_trap();
    }
    (void)(*tok)->Decode(*ids);
  }
  return 0;
}
