#include "engine/model/checkpoint.h"

#include <cstdlib>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "engine/model/internal/file_util.h"
#include "engine/model/internal/test_dir.h"

namespace kvcast {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using model_internal::WriteFile;

using model_internal::TestDir;

ModelConfig TinyConfig() {
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.vocab_size = 8;
  c.hidden_size = 4;
  c.intermediate_size = 6;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.head_dim = 2;
  c.max_position_embeddings = 16;
  c.rms_norm_eps = 1e-5;
  return c;
}

TensorToWrite Tensor(const std::string& name, std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::string bytes;
  for (int64_t i = 0; i < n; ++i) {
    const float v = static_cast<float>(i);
    bytes.append(reinterpret_cast<const char*>(&v), 4);
  }
  return {name, DType::kF32, std::move(shape), bytes};
}

void ExpectError(const absl::Status& status, absl::StatusCode code,
                 const std::vector<std::string>& substrings) {
  EXPECT_EQ(status.code(), code) << status;
  for (const std::string& s : substrings) EXPECT_THAT(std::string(status.message()), HasSubstr(s));
}

// config.json plus two shards: embed in shard 1, norm + up_proj in shard 2.
std::string WriteShardedModel(const std::string& dir) {
  EXPECT_TRUE(WriteFile(dir + "/config.json", TinyConfig().ToJson()).ok());
  EXPECT_TRUE(WriteSafetensors(dir + "/model-00001-of-00002.safetensors",
                               {Tensor("model.embed_tokens.weight", {8, 4})}).ok());
  EXPECT_TRUE(WriteSafetensors(dir + "/model-00002-of-00002.safetensors",
                               {Tensor("model.norm.weight", {4}),
                                Tensor("model.layers.0.mlp.up_proj.weight", {6, 4})}).ok());
  const std::string index = R"({"metadata": {"total_size": 240}, "weight_map": {
      "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
      "model.norm.weight": "model-00002-of-00002.safetensors",
      "model.layers.0.mlp.up_proj.weight": "model-00002-of-00002.safetensors"}})";
  EXPECT_TRUE(WriteFile(dir + "/model.safetensors.index.json", index).ok());
  return dir + "/model.safetensors.index.json";
}

TEST(Checkpoint, OpensSingleFile) {
  const std::string dir = TestDir();
  ASSERT_TRUE(WriteFile(dir + "/config.json", TinyConfig().ToJson()).ok());
  ASSERT_TRUE(WriteSafetensors(dir + "/model.safetensors",
                               {Tensor("model.embed_tokens.weight", {8, 4}),
                                Tensor("model.norm.weight", {4})}).ok());
  absl::StatusOr<std::unique_ptr<Checkpoint>> checkpoint = Checkpoint::Open(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_TRUE((*checkpoint)->config() == TinyConfig());
  EXPECT_THAT((*checkpoint)->names(), ElementsAre("model.embed_tokens.weight", "model.norm.weight"));
  absl::StatusOr<TensorView> norm = (*checkpoint)->Get("model.norm.weight", {4});
  ASSERT_TRUE(norm.ok()) << norm.status();
  std::vector<float> values(4);
  ConvertToFloat(*norm, values.data());
  EXPECT_THAT(values, ElementsAre(0, 1, 2, 3));
  EXPECT_TRUE((*checkpoint)->Has("model.norm.weight"));
  EXPECT_FALSE((*checkpoint)->Has("lm_head.weight"));

  ExpectError((*checkpoint)->Get("model.layers.3.mlp.up_proj.weight", {6, 4}).status(),
              absl::StatusCode::kNotFound,
              {"model.safetensors: missing tensor 'model.layers.3.mlp.up_proj.weight'"});
  ExpectError((*checkpoint)->Get("model.embed_tokens.weight", {4, 8}).status(),
              absl::StatusCode::kInvalidArgument,
              {dir + "/model.safetensors: tensor 'model.embed_tokens.weight' has shape [8, 4], "
                     "expected [4, 8]"});
}

TEST(Checkpoint, OpensShardedIndex) {
  const std::string dir = TestDir();
  const std::string index = WriteShardedModel(dir);
  absl::StatusOr<std::unique_ptr<Checkpoint>> checkpoint = Checkpoint::Open(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  absl::StatusOr<TensorView> up = (*checkpoint)->Get("model.layers.0.mlp.up_proj.weight", {6, 4});
  ASSERT_TRUE(up.ok()) << up.status();
  EXPECT_THAT(up->file, HasSubstr("model-00002-of-00002.safetensors"));
  absl::StatusOr<TensorView> embed = (*checkpoint)->Get("model.embed_tokens.weight", {8, 4});
  ASSERT_TRUE(embed.ok());
  EXPECT_THAT(embed->file, HasSubstr("model-00001-of-00002.safetensors"));
  ExpectError((*checkpoint)->Get("lm_head.weight", {8, 4}).status(), absl::StatusCode::kNotFound,
              {index, "missing tensor 'lm_head.weight'"});
}

TEST(Checkpoint, IndexEntryMissingFromShard) {
  const std::string dir = TestDir();
  WriteShardedModel(dir);
  ASSERT_TRUE(WriteSafetensors(dir + "/model-00002-of-00002.safetensors",
                               {Tensor("model.norm.weight", {4})}).ok());
  ExpectError(Checkpoint::Open(dir).status(), absl::StatusCode::kDataLoss,
              {"model.layers.0.mlp.up_proj.weight", "model-00002-of-00002.safetensors"});
}

TEST(Checkpoint, BadIndex) {
  const std::string dir = TestDir();
  const std::string index = WriteShardedModel(dir);
  ASSERT_TRUE(WriteFile(index, "{\"weight_map\": ").ok());
  ExpectError(Checkpoint::Open(dir).status(), absl::StatusCode::kInvalidArgument, {index, "invalid JSON"});
  ASSERT_TRUE(WriteFile(index, "{\"metadata\": {}}").ok());
  ExpectError(Checkpoint::Open(dir).status(), absl::StatusCode::kInvalidArgument, {index, "weight_map"});
  ASSERT_TRUE(WriteFile(index, R"({"weight_map": {"x": "../evil.safetensors"}})").ok());
  ExpectError(Checkpoint::Open(dir).status(), absl::StatusCode::kInvalidArgument, {index, "'x'"});
  ASSERT_TRUE(WriteFile(index, R"({"weight_map": {"x": "absent.safetensors"}})").ok());
  ExpectError(Checkpoint::Open(dir).status(), absl::StatusCode::kNotFound, {"absent.safetensors"});
}

TEST(Checkpoint, TruncatedShard) {
  const std::string dir = TestDir();
  WriteShardedModel(dir);
  const std::string shard = dir + "/model-00002-of-00002.safetensors";
  absl::StatusOr<std::string> bytes = model_internal::ReadFile(shard);
  ASSERT_TRUE(bytes.ok());
  ASSERT_TRUE(WriteFile(shard, bytes->substr(0, bytes->size() - 10)).ok());
  ExpectError(Checkpoint::Open(dir).status(), absl::StatusCode::kDataLoss,
              {shard, "model.layers.0.mlp.up_proj.weight"});
}

TEST(Checkpoint, MissingFiles) {
  const std::string dir = TestDir();
  ExpectError(Checkpoint::Open(dir).status(), absl::StatusCode::kNotFound, {dir + "/config.json"});
  ASSERT_TRUE(WriteFile(dir + "/config.json", TinyConfig().ToJson()).ok());
  ExpectError(Checkpoint::Open(dir).status(), absl::StatusCode::kNotFound,
              {dir, "neither model.safetensors nor model.safetensors.index.json"});
}

TEST(Checkpoint, BadConfig) {
  const std::string dir = TestDir();
  ASSERT_TRUE(WriteSafetensors(dir + "/model.safetensors", {Tensor("model.norm.weight", {4})}).ok());
  ModelConfig config = TinyConfig();
  config.architecture = "FalconForCausalLM";
  ASSERT_TRUE(WriteFile(dir + "/config.json", config.ToJson()).ok());
  ExpectError(Checkpoint::Open(dir).status(), absl::StatusCode::kInvalidArgument,
              {dir + "/config.json", "unsupported architecture 'FalconForCausalLM'"});
}

}  // namespace
}  // namespace kvcast
