#include "tools/tiny_model/tiny_model.h"

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "engine/model/checkpoint.h"
#include "engine/model/internal/file_util.h"

namespace kvcast {
namespace {

using ::testing::HasSubstr;
using model_internal::ReadFile;

std::string TestDir(const std::string& suffix) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp ? tmp : "/tmp") + "/" +
         ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" + suffix;
}

std::vector<std::string> FilesOf(const TinyModelOptions& o) {
  std::vector<std::string> files = {"config.json", "generation_config.json", "tokenizer.json",
                                    "tokenizer_config.json"};
  if (o.shards == 1) {
    files.push_back("model.safetensors");
  } else {
    files.push_back("model.safetensors.index.json");
    for (int s = 1; s <= o.shards; ++s) {
      char name[64];
      std::snprintf(name, sizeof(name), "model-%05d-of-%05d.safetensors", s, o.shards);
      files.push_back(name);
    }
  }
  return files;
}

std::vector<TinyModelOptions> Variants() {
  TinyModelOptions llama;
  TinyModelOptions qwen;
  qwen.arch = "qwen2";
  qwen.dtype = "f16";
  qwen.shards = 3;
  qwen.tie_embeddings = true;
  TinyModelOptions mistral;
  mistral.arch = "mistral";
  mistral.dtype = "f32";
  mistral.llama3_rope_scaling = true;
  mistral.num_kv_heads = 1;
  return {llama, qwen, mistral};
}

// FNV-1a of a file, to pin the generator's output.
uint64_t Fingerprint(const std::string& bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

TEST(TinyModel, OutputIsByteIdenticalAcrossRuns) {
  for (const TinyModelOptions& o : Variants()) {
    const std::string a = TestDir(o.arch + "_a"), b = TestDir(o.arch + "_b");
    ASSERT_TRUE(WriteTinyModel(o, a).ok());
    ASSERT_TRUE(WriteTinyModel(o, b).ok());
    for (const std::string& file : FilesOf(o)) {
      absl::StatusOr<std::string> x = ReadFile(a + "/" + file);
      absl::StatusOr<std::string> y = ReadFile(b + "/" + file);
      ASSERT_TRUE(x.ok()) << x.status();
      ASSERT_TRUE(y.ok()) << y.status();
      EXPECT_TRUE(*x == *y) << o.arch << " " << file;
    }
  }
}

// Golden logits elsewhere are recorded against these exact bytes; a change
// here means regenerating them.
TEST(TinyModel, DefaultWeightsArePinned) {
  const std::string dir = TestDir("default");
  ASSERT_TRUE(WriteTinyModel(TinyModelOptions(), dir).ok());
  absl::StatusOr<std::string> weights = ReadFile(dir + "/model.safetensors");
  ASSERT_TRUE(weights.ok());
  EXPECT_EQ(Fingerprint(*weights), 0x7bd0c84ce55163f5ull) << std::hex << Fingerprint(*weights);
}

TEST(TinyModel, LoadsAsCheckpointWithHfNamesAndShapes) {
  for (const TinyModelOptions& o : Variants()) {
    const std::string dir = TestDir(o.arch);
    ASSERT_TRUE(WriteTinyModel(o, dir).ok());
    absl::StatusOr<std::unique_ptr<Checkpoint>> ckpt = Checkpoint::Open(dir);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    const ModelConfig& c = (*ckpt)->config();
    EXPECT_EQ(c.vocab_size, o.vocab_size);
    EXPECT_EQ(c.num_hidden_layers, o.num_layers);
    EXPECT_EQ(c.num_key_value_heads, o.num_kv_heads);
    EXPECT_EQ(c.tie_word_embeddings, o.tie_embeddings);
    EXPECT_EQ(c.rope_scaling.has_value(), o.llama3_rope_scaling);
    EXPECT_EQ(c.bos_token_id, o.vocab_size - 2);  // The corpus supports > 512 tokens.
    EXPECT_EQ(c.eos_token_ids, std::vector<int>{o.vocab_size - 1});
    const int64_t V = o.vocab_size, H = o.hidden_size, I = o.intermediate_size;
    const int64_t hd = H / o.num_heads, q = o.num_heads * hd, kv = o.num_kv_heads * hd;
    std::vector<std::pair<std::string, std::vector<int64_t>>> expected = {
        {"model.embed_tokens.weight", {V, H}}, {"model.norm.weight", {H}}};
    for (int l = 0; l < o.num_layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      expected.push_back({p + "input_layernorm.weight", {H}});
      expected.push_back({p + "self_attn.q_proj.weight", {q, H}});
      expected.push_back({p + "self_attn.k_proj.weight", {kv, H}});
      expected.push_back({p + "self_attn.v_proj.weight", {kv, H}});
      expected.push_back({p + "self_attn.o_proj.weight", {H, q}});
      expected.push_back({p + "post_attention_layernorm.weight", {H}});
      expected.push_back({p + "mlp.gate_proj.weight", {I, H}});
      expected.push_back({p + "mlp.up_proj.weight", {I, H}});
      expected.push_back({p + "mlp.down_proj.weight", {H, I}});
      if (o.arch == "qwen2") {
        expected.push_back({p + "self_attn.q_proj.bias", {q}});
        expected.push_back({p + "self_attn.k_proj.bias", {kv}});
        expected.push_back({p + "self_attn.v_proj.bias", {kv}});
      }
    }
    if (!o.tie_embeddings) expected.push_back({"lm_head.weight", {V, H}});
    EXPECT_EQ((*ckpt)->names().size(), expected.size()) << o.arch;
    for (const auto& [name, shape] : expected) {
      EXPECT_TRUE((*ckpt)->Get(name, shape).ok()) << o.arch << " " << name;
    }
  }
}

TEST(TinyModel, WeightStatisticsFollowTheContract) {
  TinyModelOptions o;
  o.dtype = "f32";
  const std::string dir = TestDir("stats");
  ASSERT_TRUE(WriteTinyModel(o, dir).ok());
  absl::StatusOr<std::unique_ptr<Checkpoint>> ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok());
  auto moments = [&](const std::string& name, std::vector<int64_t> shape) {
    absl::StatusOr<TensorView> t = (*ckpt)->Get(name, shape);
    EXPECT_TRUE(t.ok()) << name;
    std::vector<float> v(t->numel());
    ConvertToFloat(*t, v.data());
    double sum = 0, sq = 0;
    for (float x : v) sum += x;
    const double mean = sum / v.size();
    for (float x : v) sq += (x - mean) * (x - mean);
    return std::make_pair(mean, std::sqrt(sq / v.size()));
  };
  auto [embed_mean, embed_std] = moments("model.embed_tokens.weight", {512, 64});
  EXPECT_NEAR(embed_mean, 0.0, 0.02);
  EXPECT_NEAR(embed_std, 1.0, 0.02);
  auto [q_mean, q_std] = moments("model.layers.0.self_attn.q_proj.weight", {64, 64});
  EXPECT_NEAR(q_mean, 0.0, 0.01);
  EXPECT_NEAR(q_std, 0.125, 0.005);
  auto [down_mean, down_std] = moments("model.layers.1.mlp.down_proj.weight", {64, 176});
  EXPECT_NEAR(down_std, 1.0 / std::sqrt(176.0), 0.005);
  auto [head_mean, head_std] = moments("lm_head.weight", {512, 64});
  EXPECT_NEAR(head_std, 3.0 / 8.0, 0.01);
  auto [norm_mean, norm_std] = moments("model.norm.weight", {64});
  EXPECT_NEAR(norm_mean, 1.0, 0.05);
  EXPECT_NEAR(norm_std, 0.1, 0.04);
}

TEST(TinyModel, TensorValuesDoNotDependOnShardingButOnSeed) {
  TinyModelOptions one;
  TinyModelOptions three;
  three.shards = 3;
  TinyModelOptions reseeded;
  reseeded.seed = 2;
  std::vector<std::string> embeddings;
  for (const auto& [tag, o] : {std::make_pair("one", one), std::make_pair("three", three),
                               std::make_pair("reseeded", reseeded)}) {
    const std::string dir = TestDir(tag);
    ASSERT_TRUE(WriteTinyModel(o, dir).ok());
    absl::StatusOr<std::unique_ptr<Checkpoint>> ckpt = Checkpoint::Open(dir);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    absl::StatusOr<TensorView> t = (*ckpt)->Get("model.layers.1.mlp.up_proj.weight", {176, 64});
    ASSERT_TRUE(t.ok());
    embeddings.emplace_back(static_cast<const char*>(t->data), t->nbytes);
  }
  EXPECT_TRUE(embeddings[0] == embeddings[1]);
  EXPECT_FALSE(embeddings[0] == embeddings[2]);
}

TEST(TinyModel, RejectsBadOptions) {
  const std::string dir = TestDir("bad");
  auto expect_invalid = [&](TinyModelOptions o, const std::string& field) {
    absl::Status status = WriteTinyModel(o, dir);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << field << ": " << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr(field));
  };
  TinyModelOptions o;
  o.arch = "gpt2";
  expect_invalid(o, "arch");
  o = TinyModelOptions();
  o.dtype = "f8";
  expect_invalid(o, "dtype");
  o = TinyModelOptions();
  o.vocab_size = 100;
  expect_invalid(o, "vocab_size");
  o = TinyModelOptions();
  o.num_kv_heads = 3;
  expect_invalid(o, "num_kv_heads");
  o = TinyModelOptions();
  o.hidden_size = 66;
  expect_invalid(o, "hidden_size");
  o = TinyModelOptions();
  o.shards = 1000;
  expect_invalid(o, "shards");
  o = TinyModelOptions();
  o.num_layers = 0;
  expect_invalid(o, "num_layers");
}

}  // namespace
}  // namespace kvcast
