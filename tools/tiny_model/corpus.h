// The built-in English prose the tiny model's tokenizer is trained on.
// Changing a single byte changes every tiny checkpoint's tokenizer (and the
// golden outputs recorded against it).
#ifndef KVCAST_TOOLS_TINY_MODEL_CORPUS_H_
#define KVCAST_TOOLS_TINY_MODEL_CORPUS_H_

#include <string_view>

namespace kvcast {

std::string_view TinyModelCorpus();

}  // namespace kvcast

#endif  // KVCAST_TOOLS_TINY_MODEL_CORPUS_H_
