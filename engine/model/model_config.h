// ModelConfig: the architecture hyper-parameters of a Hugging Face decoder
// checkpoint, parsed from its config.json.
//
// Contract: FromJson/Load either return a fully validated config (every size
// positive, heads consistent with hidden_size and with num_key_value_heads) or
// InvalidArgument whose message starts with the source name and names the
// offending field, e.g. "config.json: field 'hidden_size' must be a positive
// integer, got string". Load adds NotFound/PermissionDenied for an unreadable
// file. Supported architectures: LlamaForCausalLM, MistralForCausalLM,
// Qwen2ForCausalLM; supported rope_scaling: none or "llama3".
// Thread safety: a ModelConfig is a plain value; const use from many threads
// is safe.
#ifndef KVCAST_ENGINE_MODEL_MODEL_CONFIG_H_
#define KVCAST_ENGINE_MODEL_MODEL_CONFIG_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kvcast {

// RoPE scaling: "llama3" (Llama 3.1's frequency-dependent scaling) or
// "linear" (every frequency divided by `factor`: positions interpolated;
// the other fields unused).
struct RopeScaling {
  std::string rope_type;  // "llama3" or "linear"
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 1.0;
  int original_max_position_embeddings = 0;
};

struct ModelConfig {
  std::string architecture;  // "architectures"[0], e.g. "LlamaForCausalLM".
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;  // Defaults to num_attention_heads.
  int head_dim = 0;             // Defaults to hidden_size / num_attention_heads.
  int max_position_embeddings = 0;
  double rms_norm_eps = 0.0;
  double rope_theta = 10000.0;
  std::optional<RopeScaling> rope_scaling;
  // Per-frequency divisors of the RoPE inverse frequencies [head_dim / 2]
  // (a GGUF's rope_freqs tensor: how llama.cpp stores Llama-3.1 scaling);
  // empty for HF config.json, which ToJson/FromJson do not carry.
  std::vector<float> rope_freq_factors;
  bool tie_word_embeddings = false;
  // Bias on q/k/v projections: always for Qwen2, else the "attention_bias" key.
  bool attention_bias = false;
  std::string torch_dtype;  // "" when absent.
  int bos_token_id = -1;    // -1 when absent or null.
  std::vector<int> eos_token_ids;  // "eos_token_id" may be an int or a list.
  // Mistral's window; for Qwen2 only when "use_sliding_window" is true.
  std::optional<int> sliding_window;

  // Parses and validates config.json text; `source_name` prefixes every error.
  static absl::StatusOr<ModelConfig> FromJson(std::string_view json_text,
                                              std::string_view source_name);
  // Reads and parses the file at `path`; errors are prefixed with `path`.
  static absl::StatusOr<ModelConfig> Load(const std::string& path);

  // HF-compatible config.json text (2-space indented, stable key order) that
  // FromJson parses back to an equal config and transformers can load.
  std::string ToJson() const;

  bool operator==(const ModelConfig& other) const;
};

// The architectures FromJson accepts, in the order they are listed in errors.
const std::vector<std::string>& SupportedArchitectures();

}  // namespace kvcast

#endif  // KVCAST_ENGINE_MODEL_MODEL_CONFIG_H_
