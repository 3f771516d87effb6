// Writes the tiny checkpoint of tiny_model.h as a GGUF file, laid out the
// way llama.cpp's HF -> GGUF converter lays a model out: llama.cpp tensor
// names, ggml dimension order, the rows of each attn_q / attn_k head
// interleaved for llama.cpp's RoPE (llama architecture), metadata keys for
// the config, Llama-3.1 RoPE scaling as a rope_freqs tensor, and a
// `llama-bpe` byte-level BPE tokenizer. Matrices are F32, Q8_0, Q4_0, Q4_1,
// Q5_0, Q5_1, Q4_K, Q5_K or Q6_K (`matrix_type`, quantized as ggml's
// reference quantizers do, without their search for the best scale; a
// matrix whose rows do not fill its blocks stays F32); norms and biases F32. The engine reading this file
// must compute what it computes from the HF directory: the test of the GGUF
// path that needs no downloaded model.
//
// Errors: InvalidArgument for an arch other than llama/qwen2 or another
// matrix type; I/O errors name the path. Thread safety:
// stateless; distinct paths may be written concurrently.
#ifndef KVCAST_TOOLS_TINY_MODEL_TINY_GGUF_H_
#define KVCAST_TOOLS_TINY_MODEL_TINY_GGUF_H_

#include <string>

#include "absl/status/status.h"
#include "engine/model/ggml_types.h"
#include "tools/tiny_model/tiny_model.h"

namespace kvcast {

absl::Status WriteTinyGguf(const TinyModelOptions& options, GgmlType matrix_type,
                           const std::string& path);
// Whether WriteTinyGguf writes matrices of this type.
bool TinyGgufMatrixType(GgmlType type);

}  // namespace kvcast

#endif  // KVCAST_TOOLS_TINY_MODEL_TINY_GGUF_H_
