#include "engine/model/gguf_model.h"

#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "engine/model/internal/absl_view.h"
#include "nlohmann/json.hpp"

namespace kvcast {

using model_internal::AV;

namespace {

struct ArchInfo {
  const char* gguf;
  const char* hf;
  bool permuted_qk;  // llama.cpp's converter interleaved the rotary halves.
};
constexpr ArchInfo kArchitectures[] = {
    {"llama", "LlamaForCausalLM", true},
    {"qwen2", "Qwen2ForCausalLM", false},
};

absl::StatusOr<ArchInfo> Architecture(const GgufFile& file) {
  ASSIGN_OR_RETURN(std::string arch, file.GetString("general.architecture"));
  for (const ArchInfo& a : kArchitectures) {
    if (arch == a.gguf) return a;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      file.path(), ": architecture '", arch, "' is not supported (supported: llama, qwen2)"));
}

// `key`'s value as an int, or `fallback` when absent and a fallback is given.
absl::StatusOr<int> IntKey(const GgufFile& file, const std::string& key,
                           std::optional<int> fallback = std::nullopt) {
  if (fallback && file.Find(key) == nullptr) return *fallback;
  ASSIGN_OR_RETURN(uint64_t v, file.GetUint(key));
  if (v == 0 || v > (1u << 30)) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.path(), ": metadata '", key, "' is ", v, ", not a plausible size"));
  }
  return int(v);
}

// Rows of one head are [half 0 | half 1] in HF; llama.cpp stores them
// interleaved (row 2i + s of a head is HF row s*D/2 + i).
// Rows of `row_bytes` each: within each head, row 2i + s moves to s * half + i.
void UnpermuteRows(const uint8_t* in, int heads, int64_t head_dim, size_t row_bytes,
                   uint8_t* out) {
  const int64_t half = head_dim / 2;
  for (int h = 0; h < heads; ++h) {
    for (int s = 0; s < 2; ++s) {
      for (int64_t i = 0; i < half; ++i) {
        const uint8_t* src = in + (h * head_dim + 2 * i + s) * row_bytes;
        std::memcpy(out + (h * head_dim + s * half + i) * row_bytes, src, row_bytes);
      }
    }
  }
}

// The block types a backend may keep as stored (Backend::TakesWeightType).
bool KeptAsBlocks(GgmlType type) {
  return type == GgmlType::kQ4_0 || type == GgmlType::kQ4_1 || type == GgmlType::kQ4_K ||
         type == GgmlType::kQ5_K || type == GgmlType::kQ5_0 || type == GgmlType::kQ5_1 ||
         type == GgmlType::kQ6_K || type == GgmlType::kQ8_0;
}

}  // namespace

absl::StatusOr<ModelConfig> GgufModelConfig(const GgufFile& file) {
  ASSIGN_OR_RETURN(ArchInfo arch, Architecture(file));
  const std::string a = arch.gguf;
  std::string rope_scaling = "none";
  if (file.Find(a + ".rope.scaling.type") != nullptr) {
    ASSIGN_OR_RETURN(rope_scaling, file.GetString(a + ".rope.scaling.type"));
    if (rope_scaling != "none" && rope_scaling != "linear") {
      return absl::InvalidArgumentError(absl::StrCat(
          file.path(), ": RoPE scaling '", rope_scaling, "' (", a,
          ".rope.scaling.type) is not supported (supported: none, linear)"));
    }
  }
  const GgufTensor* embed = file.FindTensor("token_embd.weight");
  if (embed == nullptr || embed->dims.size() != 2) {
    return absl::NotFoundError(
        absl::StrCat(file.path(), ": no 2-D tensor 'token_embd.weight' (the token embeddings)"));
  }
  nlohmann::json j;
  j["architectures"] = {arch.hf};
  j["vocab_size"] = embed->dims[1];
  ASSIGN_OR_RETURN(int hidden, IntKey(file, a + ".embedding_length"));
  ASSIGN_OR_RETURN(int heads, IntKey(file, a + ".attention.head_count"));
  j["hidden_size"] = hidden;
  j["num_attention_heads"] = heads;
  ASSIGN_OR_RETURN(j["intermediate_size"], IntKey(file, a + ".feed_forward_length"));
  ASSIGN_OR_RETURN(j["num_hidden_layers"], IntKey(file, a + ".block_count"));
  ASSIGN_OR_RETURN(j["num_key_value_heads"], IntKey(file, a + ".attention.head_count_kv", heads));
  ASSIGN_OR_RETURN(j["head_dim"], IntKey(file, a + ".attention.key_length", hidden / heads));
  ASSIGN_OR_RETURN(j["max_position_embeddings"], IntKey(file, a + ".context_length"));
  ASSIGN_OR_RETURN(j["rms_norm_eps"], file.GetFloat(a + ".attention.layer_norm_rms_epsilon"));
  if (file.Find(a + ".rope.freq_base") != nullptr) {
    ASSIGN_OR_RETURN(j["rope_theta"], file.GetFloat(a + ".rope.freq_base"));
  }
  if (rope_scaling == "linear") {  // positions divided by the factor
    ASSIGN_OR_RETURN(double factor, file.GetFloat(a + ".rope.scaling.factor"));
    j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", factor}};
  }
  j["tie_word_embeddings"] = file.FindTensor("output.weight") == nullptr;
  j["attention_bias"] = file.FindTensor("blk.0.attn_q.bias") != nullptr;
  j["torch_dtype"] = "float32";
  for (const char* key : {"bos_token_id", "eos_token_id"}) {
    const std::string full = absl::StrCat("tokenizer.ggml.", key);
    if (file.Find(full) == nullptr) continue;
    ASSIGN_OR_RETURN(uint64_t id, file.GetUint(full));
    j[key] = id;
  }
  ASSIGN_OR_RETURN(ModelConfig config,
                   ModelConfig::FromJson(j.dump(), absl::StrCat(file.path(), " (GGUF metadata)")));
  // Llama-3.1-style scaling: llama.cpp's converter stores the divisor of
  // each rotary frequency as a tensor.
  if (const GgufTensor* f = file.FindTensor("rope_freqs.weight")) {
    if (f->type.type != GgmlType::kF32 || f->dims.size() != 1 ||
        f->dims[0] != config.head_dim / 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          file.path(), ": tensor 'rope_freqs.weight' must be F32 [", config.head_dim / 2,
          "] (head_dim / 2)"));
    }
    config.rope_freq_factors.resize(size_t(f->dims[0]));
    std::memcpy(config.rope_freq_factors.data(), f->data, f->nbytes);
  }
  return config;
}

std::optional<std::string> GgufToHfTensorName(std::string_view name) {
  static constexpr std::pair<std::string_view, std::string_view> kTop[] = {
      {"token_embd.weight", "model.embed_tokens.weight"},
      {"output_norm.weight", "model.norm.weight"},
      {"output.weight", "lm_head.weight"},
  };
  for (const auto& [gguf, hf] : kTop) {
    if (name == gguf) return std::string(hf);
  }
  static constexpr std::pair<std::string_view, std::string_view> kLayer[] = {
      {"attn_norm", "input_layernorm"},       {"ffn_norm", "post_attention_layernorm"},
      {"attn_q", "self_attn.q_proj"},         {"attn_k", "self_attn.k_proj"},
      {"attn_v", "self_attn.v_proj"},         {"attn_output", "self_attn.o_proj"},
      {"ffn_gate", "mlp.gate_proj"},          {"ffn_up", "mlp.up_proj"},
      {"ffn_down", "mlp.down_proj"},
  };
  // blk.<n>.<part>.<weight|bias>
  std::vector<absl::string_view> parts = absl::StrSplit(AV(name), '.');
  int layer;
  if (parts.size() != 4 || parts[0] != "blk" || !absl::SimpleAtoi(parts[1], &layer) ||
      (parts[3] != "weight" && parts[3] != "bias")) {
    return std::nullopt;
  }
  for (const auto& [gguf, hf] : kLayer) {
    if (parts[2] == AV(gguf)) {
      return absl::StrCat("model.layers.", layer, ".", AV(hf), ".", parts[3]);
    }
  }
  return std::nullopt;
}

absl::StatusOr<std::vector<TensorView>> GgufTensorsAsHf(
    const GgufFile& file, const ModelConfig& config, std::vector<std::vector<uint8_t>>* storage) {
  ASSIGN_OR_RETURN(ArchInfo arch, Architecture(file));
  std::vector<TensorView> views;
  for (const GgufTensor& t : file.tensors()) {
    std::optional<std::string> hf_name = GgufToHfTensorName(t.name);
    if (!hf_name) continue;
    TensorView view;
    view.name = *hf_name;
    view.file = file.path();
    view.shape.assign(t.dims.rbegin(), t.dims.rend());
    int permute_heads = 0;
    if (arch.permuted_qk && (absl::StrContains(t.name, ".attn_q.") ||
                             absl::StrContains(t.name, ".attn_k."))) {
      permute_heads = absl::StrContains(t.name, ".attn_q.") ? config.num_attention_heads
                                                            : config.num_key_value_heads;
      if (view.shape[0] != int64_t(permute_heads) * config.head_dim) {
        return absl::InvalidArgumentError(absl::StrCat(
            file.path(), ": tensor '", t.name, "' has ", view.shape[0], " rows, expected ",
            permute_heads, " heads x ", config.head_dim));
      }
    }
    const GgmlType type = t.type.type;
    const bool plain = type == GgmlType::kF32 || type == GgmlType::kF16 || type == GgmlType::kBF16;
    const int64_t cols = view.shape.size() == 2 ? view.shape[1] : 1;
    if (plain && permute_heads == 0) {
      view.dtype = type == GgmlType::kF32 ? DType::kF32
                   : type == GgmlType::kF16 ? DType::kF16 : DType::kBF16;
      view.data = t.data;
      view.nbytes = t.nbytes;
    } else if (KeptAsBlocks(type)) {
      view.dtype = DType::kF32;
      view.gguf_blocks = type;
      view.data = t.data;
      view.nbytes = t.nbytes;
      if (permute_heads > 0) {
        std::vector<uint8_t> rows(t.nbytes);
        UnpermuteRows(static_cast<const uint8_t*>(t.data), permute_heads, config.head_dim,
                      GgmlRowBytes(t.type, cols), rows.data());
        view.data = rows.data();
        storage->push_back(std::move(rows));
      }
    } else {
      std::vector<uint8_t> bytes(size_t(t.numel()) * sizeof(float));
      auto* values = reinterpret_cast<float*>(bytes.data());
      DequantizeGgml(type, t.data, t.numel(), values);
      if (permute_heads > 0) {
        std::vector<uint8_t> rows(bytes.size());
        UnpermuteRows(bytes.data(), permute_heads, config.head_dim, cols * sizeof(float),
                      rows.data());
        bytes.swap(rows);
      }
      view.dtype = DType::kF32;
      view.data = bytes.data();
      view.nbytes = bytes.size();
      storage->push_back(std::move(bytes));
    }
    views.push_back(std::move(view));
  }
  return views;
}

}  // namespace kvcast
