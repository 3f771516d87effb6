#include "tools/tiny_model/tiny_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "common/dtype.h"
#include "engine/model/internal/file_util.h"
#include "engine/model/internal/json_util.h"
#include "engine/model/model_config.h"
#include "engine/model/safetensors.h"
#include "engine/tokenizer/bpe_trainer.h"
#include "nlohmann/json.hpp"
#include "tools/tiny_model/corpus.h"

namespace kvcast {
namespace {

using model_internal::JoinPath;

constexpr char kBosToken[] = "<|begin_of_text|>";
constexpr char kEosToken[] = "<|end_of_text|>";
constexpr int kMinVocab = 258;  // 256 byte tokens + the two special tokens.

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t Fnv1a(std::string_view text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// Approximately standard normal values from integer arithmetic only: the sum
// of twelve 16-bit uniforms has variance ~1 (Irwin-Hall), and every step
// below is exact or a single correctly rounded IEEE operation.
class NormalSource {
 public:
  NormalSource(uint64_t seed, std::string_view stream) : state_(seed ^ Fnv1a(stream)) {
    SplitMix64(state_);
  }

  // A sample of N(mean, stddev), rounded to float.
  float Next(double mean, double stddev) {
    int64_t sum = 0;
    for (int word = 0; word < 3; ++word) {
      const uint64_t bits = SplitMix64(state_);
      for (int i = 0; i < 4; ++i) sum += static_cast<int64_t>((bits >> (16 * i)) & 0xffff);
    }
    // 2*sum - 12*65535 is centred on zero in units of 2^-17.
    const double z = static_cast<double>(2 * sum - 12 * 65535) * (1.0 / 131072.0);
    const double scaled = z * stddev;
    return static_cast<float>(mean + scaled);
  }

 private:
  uint64_t state_;
};

absl::StatusOr<DType> ParseDType(const std::string& name) {
  if (name == "f32") return DType::kF32;
  if (name == "f16") return DType::kF16;
  if (name == "bf16") return DType::kBF16;
  return absl::InvalidArgumentError(absl::StrCat("dtype '", name, "' is not one of f32, f16, bf16"));
}

std::string TorchDtype(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "float32";
    case DType::kF16:
      return "float16";
    case DType::kBF16:
      return "bfloat16";
  }
  return "";
}

std::string Architecture(const std::string& arch) {
  if (arch == "llama") return "LlamaForCausalLM";
  if (arch == "mistral") return "MistralForCausalLM";
  if (arch == "qwen2") return "Qwen2ForCausalLM";
  return "";
}

absl::Status Validate(const TinyModelOptions& o) {
  if (Architecture(o.arch).empty()) {
    return absl::InvalidArgumentError(absl::StrCat("arch '", o.arch, "' is not one of llama, mistral, qwen2"));
  }
  if (o.vocab_size < kMinVocab) {
    return absl::InvalidArgumentError(absl::StrCat("vocab_size ", o.vocab_size, " is below ", kMinVocab,
                                                   " (256 byte tokens + 2 special tokens)"));
  }
  const std::pair<const char*, int> sizes[] = {
      {"hidden_size", o.hidden_size}, {"intermediate_size", o.intermediate_size},
      {"num_layers", o.num_layers}, {"num_heads", o.num_heads}, {"num_kv_heads", o.num_kv_heads},
      {"max_position_embeddings", o.max_position_embeddings}, {"shards", o.shards}};
  for (const auto& [name, value] : sizes) {
    if (value <= 0) return absl::InvalidArgumentError(absl::StrCat(name, " must be positive, got ", value));
  }
  if (o.hidden_size % o.num_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("hidden_size ", o.hidden_size,
                                                   " is not divisible by num_heads ", o.num_heads));
  }
  if (o.num_heads % o.num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_heads ", o.num_heads,
                                                   " is not divisible by num_kv_heads ", o.num_kv_heads));
  }
  if (!(o.rope_theta > 0)) return absl::InvalidArgumentError("rope_theta must be positive");
  return absl::OkStatus();
}

// The id of added token `content` in a tokenizer.json document.
absl::StatusOr<int> AddedTokenId(const nlohmann::json& tokenizer, const std::string& content) {
  auto added = tokenizer.is_object() ? tokenizer.find("added_tokens") : tokenizer.end();
  if (added != tokenizer.end() && added->is_array()) {
    for (const nlohmann::json& token : *added) {
      if (!token.is_object()) continue;
      auto c = token.find("content");
      auto id = token.find("id");
      if (c == token.end() || id == token.end() || !c->is_string() || *c != content) continue;
      std::optional<int64_t> value = model_internal::JsonInteger(*id, 0, INT32_MAX);
      if (value) return static_cast<int>(*value);
    }
  }
  return absl::InternalError(absl::StrCat("trained tokenizer.json has no added token ", content));
}

struct TokenizerFiles {
  std::string tokenizer_json;
  int bos_id = -1;
  int eos_id = -1;
};

absl::StatusOr<TokenizerFiles> TrainTokenizer(int vocab_size) {
  TokenizerFiles files;
  ASSIGN_OR_RETURN(files.tokenizer_json, TrainByteLevelBpeTokenizerJson(TinyModelCorpus(), vocab_size));
  ASSIGN_OR_RETURN(nlohmann::json parsed, model_internal::ParseJson(files.tokenizer_json, "tokenizer.json"));
  ASSIGN_OR_RETURN(files.bos_id, AddedTokenId(parsed, kBosToken));
  ASSIGN_OR_RETURN(files.eos_id, AddedTokenId(parsed, kEosToken));
  return files;
}

std::string TokenizerConfigJson(const TokenizerFiles& tokenizer, int max_length) {
  nlohmann::ordered_json out;
  out["tokenizer_class"] = "PreTrainedTokenizerFast";
  out["bos_token"] = kBosToken;
  out["eos_token"] = kEosToken;
  out["clean_up_tokenization_spaces"] = false;
  out["model_max_length"] = max_length;
  nlohmann::ordered_json decoder;
  for (const auto& [id, content] : {std::make_pair(tokenizer.bos_id, kBosToken),
                                    std::make_pair(tokenizer.eos_id, kEosToken)}) {
    decoder[std::to_string(id)] = {{"content", content}, {"lstrip", false}, {"normalized", false},
                                   {"rstrip", false},    {"single_word", false}, {"special", true}};
  }
  out["added_tokens_decoder"] = decoder;
  return out.dump(2) + "\n";
}

std::string GenerationConfigJson(const ModelConfig& config) {
  nlohmann::ordered_json out;
  out["_from_model_config"] = true;
  out["bos_token_id"] = config.bos_token_id;
  out["eos_token_id"] = config.eos_token_ids.at(0);
  return out.dump(2) + "\n";
}

ModelConfig MakeConfig(const TinyModelOptions& o, DType dtype, const TokenizerFiles& tokenizer) {
  ModelConfig c;
  c.architecture = Architecture(o.arch);
  c.vocab_size = o.vocab_size;
  c.hidden_size = o.hidden_size;
  c.intermediate_size = o.intermediate_size;
  c.num_hidden_layers = o.num_layers;
  c.num_attention_heads = o.num_heads;
  c.num_key_value_heads = o.num_kv_heads;
  c.head_dim = o.hidden_size / o.num_heads;
  c.max_position_embeddings = o.max_position_embeddings;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = o.rope_theta;
  if (o.llama3_rope_scaling) {
    c.rope_scaling = RopeScaling{"llama3", 8.0, 1.0, 4.0, 512};
  } else if (o.linear_rope_factor > 0) {
    c.rope_scaling = RopeScaling{"linear", o.linear_rope_factor};
  }
  c.tie_word_embeddings = o.tie_embeddings;
  c.attention_bias = o.arch == "qwen2";
  c.torch_dtype = TorchDtype(dtype);
  c.bos_token_id = tokenizer.bos_id;
  c.eos_token_ids = {tokenizer.eos_id};
  return c;
}

// Appends `name` with `shape`, each element drawn from N(mean, stddev).
void AddTensor(uint64_t seed, DType dtype, std::string name, std::vector<int64_t> shape,
               double mean, double stddev, std::vector<TensorToWrite>& out) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  NormalSource normal(seed, absl::StrCat(name, "|", ShapeString(shape)));
  std::string bytes(numel * DTypeSize(dtype), '\0');
  char* p = bytes.data();
  for (int64_t i = 0; i < numel; ++i) {
    const float v = normal.Next(mean, stddev);
    if (dtype == DType::kF32) {
      std::memcpy(p + 4 * i, &v, 4);
    } else {
      const uint16_t h = dtype == DType::kF16 ? FloatToHalf(v) : FloatToBFloat16(v);
      std::memcpy(p + 2 * i, &h, 2);
    }
  }
  out.push_back({std::move(name), dtype, std::move(shape), std::move(bytes)});
}

std::vector<TensorToWrite> MakeTensors(const ModelConfig& c, uint64_t seed, DType dtype) {
  const int64_t V = c.vocab_size, H = c.hidden_size, I = c.intermediate_size;
  const int64_t q_dim = int64_t{c.num_attention_heads} * c.head_dim;
  const int64_t kv_dim = int64_t{c.num_key_value_heads} * c.head_dim;
  // Tied embeddings are smaller: the output head then also sees the input
  // token's own embedding in the residual stream, which with a larger scale
  // makes greedy decoding repeat the last token.
  const double output_std = 3.0 / std::sqrt(static_cast<double>(H));
  const double tied_std = 2.0 / std::sqrt(static_cast<double>(H));
  auto inv_sqrt = [](int64_t n) { return 1.0 / std::sqrt(static_cast<double>(n)); };
  std::vector<TensorToWrite> t;
  AddTensor(seed, dtype, "model.embed_tokens.weight", {V, H}, 0.0,
            c.tie_word_embeddings ? tied_std : 1.0, t);
  for (int layer = 0; layer < c.num_hidden_layers; ++layer) {
    const std::string p = absl::StrCat("model.layers.", layer, ".");
    AddTensor(seed, dtype, p + "input_layernorm.weight", {H}, 1.0, 0.1, t);
    const std::pair<const char*, int64_t> qkv[] = {{"q", q_dim}, {"k", kv_dim}, {"v", kv_dim}};
    for (const auto& [name, rows] : qkv) {
      AddTensor(seed, dtype, absl::StrCat(p, "self_attn.", name, "_proj.weight"), {rows, H}, 0.0,
                inv_sqrt(H), t);
      if (c.attention_bias) {
        AddTensor(seed, dtype, absl::StrCat(p, "self_attn.", name, "_proj.bias"), {rows}, 0.0, 0.1, t);
      }
    }
    AddTensor(seed, dtype, p + "self_attn.o_proj.weight", {H, q_dim}, 0.0, inv_sqrt(q_dim), t);
    AddTensor(seed, dtype, p + "post_attention_layernorm.weight", {H}, 1.0, 0.1, t);
    AddTensor(seed, dtype, p + "mlp.gate_proj.weight", {I, H}, 0.0, inv_sqrt(H), t);
    AddTensor(seed, dtype, p + "mlp.up_proj.weight", {I, H}, 0.0, inv_sqrt(H), t);
    AddTensor(seed, dtype, p + "mlp.down_proj.weight", {H, I}, 0.0, inv_sqrt(I), t);
  }
  AddTensor(seed, dtype, "model.norm.weight", {H}, 1.0, 0.1, t);
  if (!c.tie_word_embeddings) AddTensor(seed, dtype, "lm_head.weight", {V, H}, 0.0, output_std, t);
  return t;
}

// Splits `tensors` (in order) into `shards` non-empty groups of similar size
// and writes them with an HF index.
absl::Status WriteSharded(std::vector<TensorToWrite> tensors, int shards, const std::string& dir) {
  const int count = static_cast<int>(tensors.size());
  if (shards > count) {
    return absl::InvalidArgumentError(
        absl::StrCat("shards ", shards, " exceeds the number of tensors ", count));
  }
  uint64_t total = 0;
  for (const TensorToWrite& t : tensors) total += t.bytes.size();
  const uint64_t target = (total + shards - 1) / shards;
  std::vector<std::vector<TensorToWrite>> groups(shards);
  uint64_t group_bytes = 0;
  int g = 0;
  for (int i = 0; i < count; ++i) {
    const int later_groups = shards - g - 1;
    // Advance when full, or when every remaining tensor is needed to keep
    // the later groups non-empty.
    if (later_groups > 0 && !groups[g].empty() &&
        (group_bytes >= target || count - i == later_groups)) {
      ++g;
      group_bytes = 0;
    }
    group_bytes += tensors[i].bytes.size();
    groups[g].push_back(std::move(tensors[i]));
  }
  nlohmann::json weight_map = nlohmann::json::object();
  for (int s = 0; s < shards; ++s) {
    const std::string file = absl::StrFormat("model-%05d-of-%05d.safetensors", s + 1, shards);
    for (const TensorToWrite& t : groups[s]) weight_map[t.name] = file;
    RETURN_IF_ERROR(WriteSafetensors(JoinPath(dir, file), groups[s]));
  }
  nlohmann::ordered_json index;
  index["metadata"] = {{"total_size", total}};
  index["weight_map"] = weight_map;
  return model_internal::WriteFile(JoinPath(dir, "model.safetensors.index.json"), index.dump(2) + "\n");
}

}  // namespace

absl::Status WriteTinyModel(const TinyModelOptions& options, const std::string& out_dir) {
  RETURN_IF_ERROR(Validate(options));
  ASSIGN_OR_RETURN(DType dtype, ParseDType(options.dtype));
  ASSIGN_OR_RETURN(TokenizerFiles tokenizer, TrainTokenizer(options.vocab_size));
  const ModelConfig config = MakeConfig(options, dtype, tokenizer);
  RETURN_IF_ERROR(model_internal::MakeDirectories(out_dir));
  RETURN_IF_ERROR(model_internal::WriteFile(JoinPath(out_dir, "config.json"), config.ToJson()));
  RETURN_IF_ERROR(model_internal::WriteFile(JoinPath(out_dir, "generation_config.json"),
                                            GenerationConfigJson(config)));
  RETURN_IF_ERROR(model_internal::WriteFile(JoinPath(out_dir, "tokenizer.json"), tokenizer.tokenizer_json));
  RETURN_IF_ERROR(model_internal::WriteFile(JoinPath(out_dir, "tokenizer_config.json"),
                                            TokenizerConfigJson(tokenizer, options.max_position_embeddings)));
  std::vector<TensorToWrite> tensors = MakeTensors(config, options.seed, dtype);
  if (options.shards == 1) return WriteSafetensors(JoinPath(out_dir, "model.safetensors"), tensors);
  return WriteSharded(std::move(tensors), options.shards, out_dir);
}

}  // namespace kvcast
