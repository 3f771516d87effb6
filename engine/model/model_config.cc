#include "engine/model/model_config.h"

#include <climits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/model/internal/absl_view.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "engine/model/internal/file_util.h"
#include "engine/model/internal/json_util.h"
#include "nlohmann/json.hpp"

namespace kvcast {

using model_internal::AV;
namespace {

using nlohmann::json;

// Describes a rejected value without risking an exception from dump().
std::string Describe(const json& value) {
  if (value.is_number() || value.is_boolean()) return value.dump();
  return value.type_name();
}

// Typed, exception-free access to the fields of one JSON object. Every error
// is "<source>: field '<prefix><name>' ...".
class FieldReader {
 public:
  FieldReader(const json& object, std::string_view source, std::string prefix = "")
      : object_(object), source_(source), prefix_(std::move(prefix)) {}

  // nullptr when the field is absent or null.
  const json* Find(std::string_view name) const {
    auto it = object_.find(std::string(name));
    if (it == object_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  absl::Status Error(std::string_view name, std::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(AV(source_), ": field '", prefix_, AV(name), "' ", AV(what)));
  }

  absl::StatusOr<const json*> Required(std::string_view name) const {
    const json* value = Find(name);
    if (value == nullptr) return Error(name, "is missing");
    return value;
  }

  absl::StatusOr<int> PositiveInt(std::string_view name, const json& value) const {
    std::optional<int64_t> v = model_internal::JsonInteger(value, 1, INT_MAX);
    if (!v) return Error(name, absl::StrCat("must be a positive integer, got ", Describe(value)));
    return static_cast<int>(*v);
  }

  absl::StatusOr<int> RequiredPositiveInt(std::string_view name) const {
    ASSIGN_OR_RETURN(const json* value, Required(name));
    return PositiveInt(name, *value);
  }

  absl::StatusOr<std::optional<int>> OptionalPositiveInt(std::string_view name) const {
    const json* value = Find(name);
    if (value == nullptr) return std::optional<int>();
    ASSIGN_OR_RETURN(int v, PositiveInt(name, *value));
    return std::optional<int>(v);
  }

  absl::StatusOr<int> TokenId(std::string_view name, const json& value) const {
    std::optional<int64_t> v = model_internal::JsonInteger(value, 0, INT_MAX);
    if (!v) return Error(name, absl::StrCat("must be a token id (integer >= 0), got ", Describe(value)));
    return static_cast<int>(*v);
  }

  absl::StatusOr<double> PositiveNumber(std::string_view name, const json* value,
                                        double default_value) const {
    if (value == nullptr) return default_value;
    if (!value->is_number() || !(value->get<double>() > 0.0)) {
      return Error(name, absl::StrCat("must be a positive number, got ", Describe(*value)));
    }
    return value->get<double>();
  }

  absl::StatusOr<double> RequiredPositiveNumber(std::string_view name) const {
    ASSIGN_OR_RETURN(const json* value, Required(name));
    return PositiveNumber(name, value, 0.0);
  }

  absl::StatusOr<bool> OptionalBool(std::string_view name, bool default_value) const {
    const json* value = Find(name);
    if (value == nullptr) return default_value;
    if (!value->is_boolean()) return Error(name, absl::StrCat("must be a boolean, got ", Describe(*value)));
    return value->get<bool>();
  }

  absl::StatusOr<std::string> OptionalString(std::string_view name) const {
    const json* value = Find(name);
    if (value == nullptr) return std::string();
    if (!value->is_string()) return Error(name, absl::StrCat("must be a string, got ", Describe(*value)));
    return value->get<std::string>();
  }

 private:
  const json& object_;
  std::string_view source_;
  std::string prefix_;
};

// `key`: "rope_scaling" (transformers 4), or "rope_parameters" (transformers
// 5: rope_theta and the scaling in one object, rope_type "default" for none).
absl::StatusOr<std::optional<RopeScaling>> ParseRopeScaling(const FieldReader& top,
                                                            std::string_view source,
                                                            const std::string& key) {
  const json* value = top.Find(key);
  if (value == nullptr) return std::optional<RopeScaling>();
  if (!value->is_object()) {
    return top.Error(key, absl::StrCat("must be an object or null, got ", Describe(*value)));
  }
  FieldReader fields(*value, source, key + ".");
  // transformers accepts the legacy "type" key as well as "rope_type".
  std::string type_key = fields.Find("rope_type") != nullptr ? "rope_type" : "type";
  ASSIGN_OR_RETURN(std::string type, fields.OptionalString(type_key));
  if (type.empty()) return fields.Error("rope_type", "is missing");
  if (type == "default") return std::optional<RopeScaling>();
  if (type != "llama3" && type != "linear") {
    return fields.Error(type_key, absl::StrCat("names unsupported rope scaling type '", type,
                                              "' (supported: default, llama3, linear)"));
  }
  RopeScaling scaling;
  scaling.rope_type = type;
  ASSIGN_OR_RETURN(scaling.factor, fields.RequiredPositiveNumber("factor"));
  if (type == "linear") return std::optional<RopeScaling>(scaling);
  ASSIGN_OR_RETURN(scaling.low_freq_factor, fields.RequiredPositiveNumber("low_freq_factor"));
  ASSIGN_OR_RETURN(scaling.high_freq_factor, fields.RequiredPositiveNumber("high_freq_factor"));
  ASSIGN_OR_RETURN(scaling.original_max_position_embeddings,
                   fields.RequiredPositiveInt("original_max_position_embeddings"));
  if (scaling.high_freq_factor <= scaling.low_freq_factor) {
    return fields.Error("high_freq_factor", "must be greater than low_freq_factor");
  }
  return std::optional<RopeScaling>(scaling);
}

absl::StatusOr<std::string> ParseArchitecture(const FieldReader& fields) {
  ASSIGN_OR_RETURN(const json* value, fields.Required("architectures"));
  if (!value->is_array() || value->empty() || !(*value)[0].is_string()) {
    return fields.Error("architectures", "must be a non-empty list of strings");
  }
  std::string architecture = (*value)[0].get<std::string>();
  for (const std::string& supported : SupportedArchitectures()) {
    if (architecture == supported) return architecture;
  }
  return fields.Error("architectures",
                      absl::StrCat("names unsupported architecture '", architecture,
                                   "' (supported: ", absl::StrJoin(SupportedArchitectures(), ", "),
                                   ")"));
}

absl::Status ParseTokenIds(const FieldReader& fields, ModelConfig& config) {
  if (const json* bos = fields.Find("bos_token_id")) {
    ASSIGN_OR_RETURN(config.bos_token_id, fields.TokenId("bos_token_id", *bos));
  }
  const json* eos = fields.Find("eos_token_id");
  if (eos == nullptr) return absl::OkStatus();
  if (!eos->is_array()) {
    ASSIGN_OR_RETURN(int id, fields.TokenId("eos_token_id", *eos));
    config.eos_token_ids.push_back(id);
    return absl::OkStatus();
  }
  for (const json& element : *eos) {
    ASSIGN_OR_RETURN(int id, fields.TokenId("eos_token_id", element));
    config.eos_token_ids.push_back(id);
  }
  return absl::OkStatus();
}

std::string ModelType(const std::string& architecture) {
  if (architecture == "MistralForCausalLM") return "mistral";
  if (architecture == "Qwen2ForCausalLM") return "qwen2";
  return "llama";
}

}  // namespace

const std::vector<std::string>& SupportedArchitectures() {
  static const auto* const kArchitectures = new std::vector<std::string>{
      "LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM"};
  return *kArchitectures;
}

absl::StatusOr<ModelConfig> ModelConfig::FromJson(std::string_view json_text,
                                                  std::string_view source_name) {
  ASSIGN_OR_RETURN(json root, model_internal::ParseJson(json_text, source_name));
  if (!root.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(AV(source_name), ": top level must be a JSON object, got ", Describe(root)));
  }
  const FieldReader fields(root, source_name);
  ModelConfig config;
  ASSIGN_OR_RETURN(config.architecture, ParseArchitecture(fields));
  ASSIGN_OR_RETURN(config.vocab_size, fields.RequiredPositiveInt("vocab_size"));
  ASSIGN_OR_RETURN(config.hidden_size, fields.RequiredPositiveInt("hidden_size"));
  ASSIGN_OR_RETURN(config.intermediate_size, fields.RequiredPositiveInt("intermediate_size"));
  ASSIGN_OR_RETURN(config.num_hidden_layers, fields.RequiredPositiveInt("num_hidden_layers"));
  ASSIGN_OR_RETURN(config.num_attention_heads, fields.RequiredPositiveInt("num_attention_heads"));
  ASSIGN_OR_RETURN(std::optional<int> kv_heads, fields.OptionalPositiveInt("num_key_value_heads"));
  config.num_key_value_heads = kv_heads.value_or(config.num_attention_heads);
  if (config.num_attention_heads % config.num_key_value_heads != 0) {
    return fields.Error("num_key_value_heads",
                        absl::StrCat("(", config.num_key_value_heads,
                                     ") must divide num_attention_heads (",
                                     config.num_attention_heads, ")"));
  }
  ASSIGN_OR_RETURN(std::optional<int> head_dim, fields.OptionalPositiveInt("head_dim"));
  if (head_dim) {
    config.head_dim = *head_dim;
  } else if (config.hidden_size % config.num_attention_heads != 0) {
    return fields.Error("hidden_size", absl::StrCat("(", config.hidden_size,
                                                    ") is not divisible by num_attention_heads (",
                                                    config.num_attention_heads,
                                                    ") and no head_dim is given"));
  } else {
    config.head_dim = config.hidden_size / config.num_attention_heads;
  }
  ASSIGN_OR_RETURN(config.max_position_embeddings,
                   fields.RequiredPositiveInt("max_position_embeddings"));
  ASSIGN_OR_RETURN(config.rms_norm_eps, fields.RequiredPositiveNumber("rms_norm_eps"));
  // transformers >= 5 writes rope_theta and the scaling in rope_parameters.
  const json* params = fields.Find("rope_parameters");
  const bool v5 = params != nullptr && params->is_object() && fields.Find("rope_theta") == nullptr;
  const FieldReader rope = v5 ? FieldReader(*params, source_name, "rope_parameters.") : fields;
  ASSIGN_OR_RETURN(config.rope_theta,
                   rope.PositiveNumber("rope_theta", rope.Find("rope_theta"), 10000.0));
  ASSIGN_OR_RETURN(config.rope_scaling,
                   ParseRopeScaling(fields, source_name, v5 ? "rope_parameters" : "rope_scaling"));
  ASSIGN_OR_RETURN(config.tie_word_embeddings, fields.OptionalBool("tie_word_embeddings", false));
  ASSIGN_OR_RETURN(config.attention_bias, fields.OptionalBool("attention_bias", false));
  if (config.architecture == "Qwen2ForCausalLM") config.attention_bias = true;
  // transformers >= 5 names it "dtype".
  ASSIGN_OR_RETURN(config.torch_dtype, fields.OptionalString(
                                           fields.Find("torch_dtype") ? "torch_dtype" : "dtype"));
  RETURN_IF_ERROR(ParseTokenIds(fields, config));
  ASSIGN_OR_RETURN(config.sliding_window, fields.OptionalPositiveInt("sliding_window"));
  if (config.architecture == "Qwen2ForCausalLM") {
    ASSIGN_OR_RETURN(bool use_window, fields.OptionalBool("use_sliding_window", false));
    if (!use_window) config.sliding_window.reset();
  }
  return config;
}

absl::StatusOr<ModelConfig> ModelConfig::Load(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, model_internal::ReadFile(path));
  return FromJson(text, path);
}

std::string ModelConfig::ToJson() const {
  nlohmann::ordered_json out;
  out["architectures"] = {architecture};
  out["model_type"] = ModelType(architecture);
  out["vocab_size"] = vocab_size;
  out["hidden_size"] = hidden_size;
  out["intermediate_size"] = intermediate_size;
  out["num_hidden_layers"] = num_hidden_layers;
  out["num_attention_heads"] = num_attention_heads;
  out["num_key_value_heads"] = num_key_value_heads;
  out["head_dim"] = head_dim;
  out["hidden_act"] = "silu";
  out["max_position_embeddings"] = max_position_embeddings;
  out["rms_norm_eps"] = rms_norm_eps;
  out["rope_theta"] = rope_theta;
  if (rope_scaling && rope_scaling->rope_type == "linear") {
    out["rope_scaling"] = {{"rope_type", "linear"}, {"factor", rope_scaling->factor}};
  } else if (rope_scaling) {
    out["rope_scaling"] = {
        {"rope_type", rope_scaling->rope_type},
        {"factor", rope_scaling->factor},
        {"low_freq_factor", rope_scaling->low_freq_factor},
        {"high_freq_factor", rope_scaling->high_freq_factor},
        {"original_max_position_embeddings", rope_scaling->original_max_position_embeddings}};
  } else {
    out["rope_scaling"] = nullptr;
  }
  out["tie_word_embeddings"] = tie_word_embeddings;
  if (architecture == "Qwen2ForCausalLM") {
    out["use_sliding_window"] = sliding_window.has_value();
  } else {
    out["attention_bias"] = attention_bias;
    if (architecture == "LlamaForCausalLM") out["mlp_bias"] = false;
  }
  if (sliding_window) {
    out["sliding_window"] = *sliding_window;
  } else {
    out["sliding_window"] = nullptr;
  }
  out["attention_dropout"] = 0.0;
  out["initializer_range"] = 0.02;
  out["use_cache"] = true;
  if (!torch_dtype.empty()) out["torch_dtype"] = torch_dtype;
  if (bos_token_id >= 0) out["bos_token_id"] = bos_token_id;
  if (eos_token_ids.size() == 1) {
    out["eos_token_id"] = eos_token_ids[0];
  } else if (!eos_token_ids.empty()) {
    out["eos_token_id"] = eos_token_ids;
  }
  return out.dump(2) + "\n";
}

bool ModelConfig::operator==(const ModelConfig& o) const {
  auto scaling_equal = [](const std::optional<RopeScaling>& a, const std::optional<RopeScaling>& b) {
    if (a.has_value() != b.has_value()) return false;
    if (!a) return true;
    return a->rope_type == b->rope_type && a->factor == b->factor &&
           a->low_freq_factor == b->low_freq_factor && a->high_freq_factor == b->high_freq_factor &&
           a->original_max_position_embeddings == b->original_max_position_embeddings;
  };
  return architecture == o.architecture && vocab_size == o.vocab_size &&
         hidden_size == o.hidden_size && intermediate_size == o.intermediate_size &&
         num_hidden_layers == o.num_hidden_layers && num_attention_heads == o.num_attention_heads &&
         num_key_value_heads == o.num_key_value_heads && head_dim == o.head_dim &&
         max_position_embeddings == o.max_position_embeddings && rms_norm_eps == o.rms_norm_eps &&
         rope_theta == o.rope_theta && scaling_equal(rope_scaling, o.rope_scaling) &&
         rope_freq_factors == o.rope_freq_factors &&
         tie_word_embeddings == o.tie_word_embeddings && attention_bias == o.attention_bias &&
         torch_dtype == o.torch_dtype && bos_token_id == o.bos_token_id &&
         eos_token_ids == o.eos_token_ids && sliding_window == o.sliding_window;
}

}  // namespace kvcast
