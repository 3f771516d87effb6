#include "engine/model/model_config.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace kvcast {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using nlohmann::json;

json LlamaJson() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 128256,
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "tie_word_embeddings": false,
    "torch_dtype": "bfloat16",
    "bos_token_id": 128000,
    "eos_token_id": [128001, 128008, 128009]
  })");
}

absl::StatusOr<ModelConfig> Parse(const json& j) { return ModelConfig::FromJson(j.dump(), "config.json"); }

void ExpectInvalid(const json& j, const std::string& field) {
  absl::StatusOr<ModelConfig> config = Parse(j);
  ASSERT_FALSE(config.ok()) << field;
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << config.status();
  EXPECT_THAT(std::string(config.status().message()),
              AllOf(HasSubstr("config.json"), HasSubstr(field)));
}

TEST(ModelConfig, ParsesLlama31) {
  absl::StatusOr<ModelConfig> config = Parse(LlamaJson());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->architecture, "LlamaForCausalLM");
  EXPECT_EQ(config->vocab_size, 128256);
  EXPECT_EQ(config->num_key_value_heads, 8);
  EXPECT_EQ(config->head_dim, 128);
  EXPECT_EQ(config->rope_theta, 500000.0);
  EXPECT_EQ(config->rms_norm_eps, 1e-5);
  ASSERT_TRUE(config->rope_scaling.has_value());
  EXPECT_EQ(config->rope_scaling->rope_type, "llama3");
  EXPECT_EQ(config->rope_scaling->factor, 8.0);
  EXPECT_EQ(config->rope_scaling->high_freq_factor, 4.0);
  EXPECT_EQ(config->rope_scaling->original_max_position_embeddings, 8192);
  EXPECT_FALSE(config->attention_bias);
  EXPECT_EQ(config->torch_dtype, "bfloat16");
  EXPECT_EQ(config->bos_token_id, 128000);
  EXPECT_EQ(config->eos_token_ids, (std::vector<int>{128001, 128008, 128009}));
  EXPECT_FALSE(config->sliding_window.has_value());
}

// transformers >= 5 writes rope_theta and the scaling in "rope_parameters"
// and the dtype as "dtype": the same configuration as the 4.x layout.
TEST(ModelConfig, ParsesTransformers5RopeParameters) {
  json j = LlamaJson();
  j["rope_parameters"] = j["rope_scaling"];
  j["rope_parameters"]["rope_theta"] = 500000.0;
  j["dtype"] = "bfloat16";
  for (const char* key : {"rope_theta", "rope_scaling", "torch_dtype"}) j.erase(key);
  absl::StatusOr<ModelConfig> config = Parse(j);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->rope_theta, 500000.0);
  ASSERT_TRUE(config->rope_scaling.has_value());
  EXPECT_EQ(config->rope_scaling->rope_type, "llama3");
  EXPECT_EQ(config->rope_scaling->factor, 8.0);
  EXPECT_EQ(config->rope_scaling->original_max_position_embeddings, 8192);
  EXPECT_EQ(config->torch_dtype, "bfloat16");

  j["rope_parameters"] = {{"rope_theta", 100000.0}, {"rope_type", "default"}};
  config = Parse(j);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->rope_theta, 100000.0);
  EXPECT_FALSE(config->rope_scaling.has_value());

  j["rope_parameters"] = {{"rope_theta", 100000.0}, {"rope_type", "yarn"}, {"factor", 4.0}};
  ExpectInvalid(j, "rope_parameters.rope_type");
}

TEST(ModelConfig, AppliesDefaults) {
  json j = LlamaJson();
  for (const char* key : {"num_key_value_heads", "rope_theta", "rope_scaling", "tie_word_embeddings",
                          "torch_dtype", "bos_token_id", "eos_token_id"}) {
    j.erase(key);
  }
  absl::StatusOr<ModelConfig> config = Parse(j);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->num_key_value_heads, 32);
  EXPECT_EQ(config->rope_theta, 10000.0);
  EXPECT_FALSE(config->rope_scaling.has_value());
  EXPECT_FALSE(config->tie_word_embeddings);
  EXPECT_EQ(config->torch_dtype, "");
  EXPECT_EQ(config->bos_token_id, -1);
  EXPECT_TRUE(config->eos_token_ids.empty());
}

TEST(ModelConfig, RopeScalingVariants) {
  json j = LlamaJson();
  j["rope_scaling"] = nullptr;
  ASSERT_TRUE(Parse(j).ok());
  EXPECT_FALSE(Parse(j)->rope_scaling.has_value());

  j["rope_scaling"] = {{"type", "llama3"}, {"factor", 32}, {"low_freq_factor", 1},
                       {"high_freq_factor", 4}, {"original_max_position_embeddings", 8192}};
  ASSERT_TRUE(Parse(j).ok()) << Parse(j).status();
  EXPECT_EQ(Parse(j)->rope_scaling->factor, 32.0);

  j["rope_scaling"] = {{"type", "linear"}, {"factor", 4.0}};
  ASSERT_TRUE(Parse(j).ok()) << Parse(j).status();
  EXPECT_EQ(Parse(j)->rope_scaling->rope_type, "linear");
  EXPECT_EQ(Parse(j)->rope_scaling->factor, 4.0);
  EXPECT_EQ(ModelConfig::FromJson(Parse(j)->ToJson(), "round trip")->rope_scaling->factor, 4.0);
  j["rope_scaling"] = {{"rope_type", "linear"}};
  ExpectInvalid(j, "rope_scaling.factor");

  for (const char* type : {"yarn", "dynamic"}) {
    j["rope_scaling"] = {{"rope_type", type}, {"factor", 4.0}};
    ExpectInvalid(j, "rope_scaling.rope_type");
    EXPECT_THAT(std::string(Parse(j).status().message()), HasSubstr(type));
  }
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  ExpectInvalid(j, "rope_scaling.low_freq_factor");
}

TEST(ModelConfig, Qwen2AlwaysHasAttentionBiasAndIgnoresUnusedWindow) {
  json j = LlamaJson();
  j["architectures"] = {"Qwen2ForCausalLM"};
  j["sliding_window"] = 4096;
  j["use_sliding_window"] = false;
  absl::StatusOr<ModelConfig> config = Parse(j);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->attention_bias);
  EXPECT_FALSE(config->sliding_window.has_value());
  j["use_sliding_window"] = true;
  EXPECT_EQ(Parse(j)->sliding_window, 4096);
}

TEST(ModelConfig, MistralSlidingWindowAndLlamaAttentionBias) {
  json j = LlamaJson();
  j["architectures"] = {"MistralForCausalLM"};
  j["sliding_window"] = nullptr;
  EXPECT_FALSE(Parse(j)->sliding_window.has_value());
  j["sliding_window"] = 4096;
  EXPECT_EQ(Parse(j)->sliding_window, 4096);

  json llama = LlamaJson();
  llama["attention_bias"] = true;
  EXPECT_TRUE(Parse(llama)->attention_bias);
  llama["eos_token_id"] = 2;
  EXPECT_EQ(Parse(llama)->eos_token_ids, std::vector<int>{2});
}

TEST(ModelConfig, HeadDimMayDisagreeWithHiddenSize) {
  json j = LlamaJson();
  j["hidden_size"] = 5120;
  j["num_attention_heads"] = 32;
  j["head_dim"] = 128;  // Mistral-Nemo style: 32 * 128 != 5120.
  EXPECT_EQ(Parse(j)->head_dim, 128);
}

TEST(ModelConfig, RejectsUnsupportedArchitecture) {
  json j = LlamaJson();
  j["architectures"] = {"GPT2LMHeadModel"};
  ExpectInvalid(j, "architectures");
  EXPECT_THAT(std::string(Parse(j).status().message()),
              AllOf(HasSubstr("unsupported architecture 'GPT2LMHeadModel'"),
                    HasSubstr("LlamaForCausalLM"), HasSubstr("Qwen2ForCausalLM")));
  j["architectures"] = json::array();
  ExpectInvalid(j, "architectures");
  j["architectures"] = "LlamaForCausalLM";
  ExpectInvalid(j, "architectures");
}

TEST(ModelConfig, RejectsMissingRequiredFields) {
  for (const char* field : {"architectures", "vocab_size", "hidden_size", "intermediate_size",
                            "num_hidden_layers", "num_attention_heads", "max_position_embeddings",
                            "rms_norm_eps"}) {
    json j = LlamaJson();
    j.erase(field);
    ExpectInvalid(j, std::string("field '") + field + "' is missing");
    j[field] = nullptr;
    ExpectInvalid(j, std::string("field '") + field + "' is missing");
  }
}

TEST(ModelConfig, RejectsWrongTypesAndNonPositiveSizes) {
  const json bad_values[] = {"64", 0, -4, 1.5, true, json::array(), 1e20, 4294967296LL};
  for (const char* field : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                            "num_attention_heads", "num_key_value_heads", "head_dim",
                            "max_position_embeddings"}) {
    for (const json& bad : bad_values) {
      json j = LlamaJson();
      j[field] = bad;
      ExpectInvalid(j, field);
    }
  }
  for (const char* field : {"rms_norm_eps", "rope_theta"}) {
    for (const json& bad : {json("1e-5"), json(0.0), json(-1.0)}) {
      json j = LlamaJson();
      j[field] = bad;
      ExpectInvalid(j, field);
    }
  }
  json j = LlamaJson();
  j["tie_word_embeddings"] = "yes";
  ExpectInvalid(j, "tie_word_embeddings");
  j = LlamaJson();
  j["eos_token_id"] = {1, "2"};
  ExpectInvalid(j, "eos_token_id");
  j = LlamaJson();
  j["bos_token_id"] = -5;
  ExpectInvalid(j, "bos_token_id");
  j = LlamaJson();
  j["torch_dtype"] = 16;
  ExpectInvalid(j, "torch_dtype");
}

TEST(ModelConfig, RejectsInconsistentHeads) {
  json j = LlamaJson();
  j["num_key_value_heads"] = 5;
  ExpectInvalid(j, "num_key_value_heads");
  j = LlamaJson();
  j["hidden_size"] = 4001;  // Not divisible by 32 heads, and no head_dim.
  ExpectInvalid(j, "hidden_size");
}

TEST(ModelConfig, RejectsBadJsonWithOffset) {
  absl::StatusOr<ModelConfig> config = ModelConfig::FromJson("{\"vocab_size\": 12,, }", "config.json");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(config.status().message()),
              AllOf(HasSubstr("config.json"), HasSubstr("invalid JSON at byte 18")));
  for (const char* text : {"", "[1, 2]", "null", "{\"a\": tru}", "\xff\xfe"}) {
    EXPECT_EQ(ModelConfig::FromJson(text, "config.json").status().code(),
              absl::StatusCode::kInvalidArgument)
        << text;
  }
}

TEST(ModelConfig, ToJsonRoundTrips) {
  json qwen = LlamaJson();
  qwen["architectures"] = {"Qwen2ForCausalLM"};
  qwen["rope_scaling"] = nullptr;
  qwen["eos_token_id"] = 7;
  qwen["sliding_window"] = 128;
  qwen["use_sliding_window"] = true;
  json mistral = LlamaJson();
  mistral["architectures"] = {"MistralForCausalLM"};
  mistral["sliding_window"] = 4096;
  mistral["tie_word_embeddings"] = true;
  for (const json& j : {LlamaJson(), qwen, mistral}) {
    absl::StatusOr<ModelConfig> config = Parse(j);
    ASSERT_TRUE(config.ok()) << config.status();
    const std::string text = config->ToJson();
    absl::StatusOr<ModelConfig> again = ModelConfig::FromJson(text, "regenerated");
    ASSERT_TRUE(again.ok()) << again.status() << "\n" << text;
    EXPECT_TRUE(*again == *config) << text;
    EXPECT_EQ(again->ToJson(), text);
  }
}

TEST(ModelConfig, LoadNamesMissingFile) {
  absl::StatusOr<ModelConfig> config = ModelConfig::Load("/nonexistent/dir/config.json");
  EXPECT_EQ(config.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(config.status().message()), HasSubstr("/nonexistent/dir/config.json"));
}

}  // namespace
}  // namespace kvcast
