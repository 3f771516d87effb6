// A GGUF file read as the engine's Hugging Face-shaped model: the config
// from its metadata, the tensors under their HF names and layouts.
//
// Architectures: `llama` (Llama, Mistral, SmolLM; read as LlamaForCausalLM)
// and `qwen2` (Qwen2ForCausalLM, q/k/v biases). Config keys, for `<a>` the
// architecture: <a>.block_count, .embedding_length, .feed_forward_length,
// .attention.head_count, .attention.head_count_kv (default: head_count),
// .attention.key_length (head_dim; default embedding/heads),
// .attention.layer_norm_rms_epsilon, .context_length, .rope.freq_base
// (default 10000); vocabulary size from token_embd.weight; tied embeddings
// when output.weight is absent; BOS/EOS from tokenizer.ggml.bos_token_id /
// eos_token_id. A rope_freqs tensor (Llama-3.1 scaling as llama.cpp stores
// it) becomes ModelConfig::rope_freq_factors; <a>.rope.scaling.type other
// than none (linear, yarn) is refused as unsupported.
//
// Tensors: llama.cpp names map to HF names (token_embd -> embed_tokens,
// blk.N.attn_q -> layers.N.self_attn.q_proj, ...); ggml dims are reversed
// into HF shapes. llama.cpp's converter interleaves the two rotary halves
// of every attn_q/attn_k head (it permutes rows for its RoPE layout) for the
// llama architecture; those rows are put back in HF order here, so the
// engine's RoPE and the HF model agree. F32/F16/BF16 tensors in HF order
// point into the file's mapping; Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K and
// Q8_0 tensors stay blocks (TensorView::gguf_blocks), which a backend may keep as they are
// (Backend::TakesWeightType) or have widened when it loads them; other
// quantized tensors and permuted float ones are widened to float32 here
// (exactly, see ggml_types.h). Converted or reordered bytes live in storage
// the caller keeps.
//
// Errors name the file and the key or tensor: NotFound for a missing key or
// tensor, InvalidArgument for a wrong value type, an unsupported
// architecture or scaling, or a shape that disagrees with the config.
// Thread safety: stateless functions over an immutable GgufFile.
#ifndef KVCAST_ENGINE_MODEL_GGUF_MODEL_H_
#define KVCAST_ENGINE_MODEL_GGUF_MODEL_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/gguf.h"
#include "engine/model/model_config.h"
#include "engine/model/safetensors.h"

namespace kvcast {

absl::StatusOr<ModelConfig> GgufModelConfig(const GgufFile& file);

// The HF name of llama.cpp tensor `gguf_name`, or nullopt for one the
// engine has no use for.
std::optional<std::string> GgufToHfTensorName(std::string_view gguf_name);

// Every tensor of `file` the engine uses, as HF-named views. Views of
// converted or reordered tensors point into `storage`, whose buffers must
// outlive them (the outer vector may grow; buffers never move).
absl::StatusOr<std::vector<TensorView>> GgufTensorsAsHf(
    const GgufFile& file, const ModelConfig& config, std::vector<std::vector<uint8_t>>* storage);

}  // namespace kvcast

#endif  // KVCAST_ENGINE_MODEL_GGUF_MODEL_H_
