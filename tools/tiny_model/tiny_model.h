// Writes a small, deterministic, randomly initialised Hugging Face decoder
// checkpoint (Llama, Mistral or Qwen2 layout) for tests and benchmarks.
//
// Contract: WriteTinyModel(options, out_dir) creates out_dir (and parents)
// and writes config.json, generation_config.json, tokenizer.json,
// tokenizer_config.json and either model.safetensors or `shards` files
// model-0000k-of-0000n.safetensors plus model.safetensors.index.json. Every
// byte written is a pure function of `options`: the weights come from an
// integer-only PRNG (splitmix64) and an integer sum-of-uniforms normal
// approximation, so no libm call or library distribution can change them
// across machines. Each tensor's values depend only on (seed, tensor name,
// tensor shape), not on sharding or on the other tensors.
//
// Initialisation (chosen so activations stay O(1) and next-token
// distributions are peaked but context dependent):
//   model.embed_tokens.weight   N(0, 1); if tied, N(0, 2/sqrt(H))
//   lm_head.weight              N(0, 3/sqrt(H))
//   linear projections          N(0, 1/sqrt(fan_in))
//   RMSNorm weights             1 + N(0, 0.1)
//   q/k/v biases (qwen2)        N(0, 0.1)
// The tokenizer is a byte-level BPE trained on a built-in English corpus
// (//engine/tokenizer:bpe_trainer); bos/eos are its <|begin_of_text|> and
// <|end_of_text|> ids, and the model's vocab_size must cover them.
//
// Errors: InvalidArgument for inconsistent options (named in the message);
// I/O errors name the path. Thread safety: stateless; concurrent calls with
// distinct out_dirs are safe.
#ifndef KVCAST_TOOLS_TINY_MODEL_TINY_MODEL_H_
#define KVCAST_TOOLS_TINY_MODEL_TINY_MODEL_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace kvcast {

struct TinyModelOptions {
  std::string arch = "llama";  // llama | mistral | qwen2
  int vocab_size = 512;        // >= 258 (256 bytes + 2 special tokens).
  int hidden_size = 64;
  int intermediate_size = 176;
  int num_layers = 2;
  int num_heads = 4;
  int num_kv_heads = 2;
  int max_position_embeddings = 2048;
  double rope_theta = 10000.0;
  // Adds {"rope_type": "llama3", "factor": 8, "low_freq_factor": 1,
  // "high_freq_factor": 4, "original_max_position_embeddings": 512}.
  bool llama3_rope_scaling = false;
  // > 0 (and llama3_rope_scaling off): {"rope_type": "linear", "factor": F}.
  double linear_rope_factor = 0.0;
  bool tie_embeddings = false;
  std::string dtype = "bf16";  // f32 | f16 | bf16
  int shards = 1;
  uint64_t seed = 1;
};

absl::Status WriteTinyModel(const TinyModelOptions& options, const std::string& out_dir);

}  // namespace kvcast

#endif  // KVCAST_TOOLS_TINY_MODEL_TINY_MODEL_H_
