#include "engine/model/gguf.h"

#include <cstring>
#include <string>
#include <vector>

#include "engine/model/gguf_model.h"
#include "engine/model/internal/file_util.h"
#include "engine/model/internal/gguf_writer.h"
#include "engine/model/internal/test_dir.h"
#include "gtest/gtest.h"

namespace kvcast {
namespace {

using model_internal::GgufWriter;

std::string Floats(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

GgufWriter SmallFile() {
  GgufWriter w;
  w.AddString("general.architecture", "llama");
  w.AddUint32("llama.block_count", 2);
  w.AddFloat32("llama.rope.freq_base", 100000.0f);
  w.AddBool("tokenizer.ggml.add_bos_token", false);
  w.AddStringArray("tokenizer.ggml.tokens", {"a", "b", "<s>"});
  w.AddInt32Array("tokenizer.ggml.token_type", {1, 1, 3});
  GgufValue i64;
  i64.type = GgufType::kI64;
  i64.i = -5;
  w.Add("test.i64", i64);
  GgufValue f64;
  f64.type = GgufType::kF64;
  f64.f = 0.25;
  w.Add("test.f64", f64);
  w.AddTensor("a.weight", 0, {4, 2}, Floats({1, 2, 3, 4, 5, 6, 7, 8}));
  // 32 bytes: the file ends with the last tensor, no alignment padding.
  w.AddTensor("norm.weight", 0, {8}, Floats({9, 10, 11, 12, 13, 14, 15, 16}));
  return w;
}

TEST(GgufFileTest, ReadsMetadataAndTensors) {
  for (uint32_t version : {2u, 3u}) {
    const std::string bytes = SmallFile().Build(version);
    auto file = GgufFile::FromBytes(bytes, "small.gguf");
    ASSERT_TRUE(file.ok()) << file.status();
    GgufFile& f = **file;
    EXPECT_EQ(f.version(), version);
    EXPECT_EQ(*f.GetString("general.architecture"), "llama");
    EXPECT_EQ(*f.GetUint("llama.block_count"), 2u);
    EXPECT_EQ(*f.GetFloat("llama.rope.freq_base"), 100000.0);
    EXPECT_EQ(*f.GetFloat("test.f64"), 0.25);
    EXPECT_FALSE(*f.GetBool("tokenizer.ggml.add_bos_token"));
    auto tokens = f.GetArray("tokenizer.ggml.tokens", GgufType::kString);
    ASSERT_TRUE(tokens.ok());
    ASSERT_EQ((*tokens)->elements.size(), 3u);
    EXPECT_EQ((*tokens)->elements[2].s, "<s>");
    EXPECT_EQ((*f.GetArray("tokenizer.ggml.token_type", GgufType::kI32))->elements[2].i, 3);
    EXPECT_EQ(f.GetUint("test.i64").status().code(), absl::StatusCode::kInvalidArgument);
    ASSERT_EQ(f.tensors().size(), 2u);
    const GgufTensor* a = f.FindTensor("a.weight");
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->dims, (std::vector<int64_t>{4, 2}));
    EXPECT_EQ(a->nbytes, 32u);
    // The data section starts at a multiple of the alignment.
    EXPECT_EQ((static_cast<const char*>(a->data) - bytes.data()) % 32, 0);
    float v[3];
    std::memcpy(v, f.FindTensor("norm.weight")->data, 12);
    EXPECT_EQ(v[2], 11.0f);
  }
}

TEST(GgufFileTest, TypedGettersNameFileKeyAndTypes) {
  const std::string bytes = SmallFile().Build();
  auto f = *GgufFile::FromBytes(bytes, "small.gguf");
  absl::Status s = f->GetUint("general.architecture").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "small.gguf: metadata 'general.architecture' is STRING, expected an integer");
  s = f->GetArray("tokenizer.ggml.tokens", GgufType::kI32).status();
  EXPECT_EQ(s.message(),
            "small.gguf: metadata 'tokenizer.ggml.tokens' is ARRAY of STRING, expected ARRAY of INT32");
  s = f->GetString("no.such.key").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "small.gguf: no metadata key 'no.such.key'");
}

TEST(GgufFileTest, EveryTruncationIsAnErrorNeverACrash) {
  const std::string bytes = SmallFile().Build();
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto f = GgufFile::FromBytes(std::string_view(bytes.data(), n), "cut.gguf");
    ASSERT_FALSE(f.ok()) << "accepted a file cut to " << n << " of " << bytes.size() << " bytes";
    EXPECT_TRUE(f.status().code() == absl::StatusCode::kDataLoss ||
                f.status().code() == absl::StatusCode::kInvalidArgument)
        << f.status();
  }
}

absl::Status Parse(const std::string& bytes) {
  return GgufFile::FromBytes(bytes, "bad.gguf").status();
}

TEST(GgufFileTest, RefusesBadFilesNamingWhatIsWrong) {
  std::string bytes = SmallFile().Build();
  std::string bad = bytes;
  bad[0] = 'X';
  EXPECT_EQ(Parse(bad).message(), "bad.gguf: not a GGUF file (the first 4 bytes are not \"GGUF\")");
  EXPECT_NE(Parse(SmallFile().Build(1)).message().find("GGUF version 1 is not supported"),
            std::string::npos);

  GgufWriter w = SmallFile();
  w.AddTensor("q2k.weight", 10, {256}, std::string(84, '\0'));
  EXPECT_NE(Parse(w.Build()).message().find("tensor 'q2k.weight' has tensor type Q2_K"),
            std::string::npos);

  GgufWriter rows = SmallFile();
  rows.AddTensor("odd.weight", 8, {48, 1}, std::string(51, '\0'));  // Q8_0, 48 not /32.
  EXPECT_NE(Parse(rows.Build()).message().find("not a whole number of Q8_0 blocks of 32"),
            std::string::npos);

  GgufWriter dup = SmallFile();
  dup.AddUint32("llama.block_count", 3);
  EXPECT_NE(Parse(dup.Build()).message().find("'llama.block_count' appears twice"),
            std::string::npos);

  GgufWriter align = SmallFile();
  align.AddUint32("general.alignment", 24);
  EXPECT_NE(Parse(align.Build()).message().find("not a power of two"), std::string::npos);

  // Tensor data that is cut off: the last tensor's bytes are missing.
  bytes.resize(bytes.size() - 16);
  absl::Status s = Parse(bytes);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("tensor 'norm.weight'"), std::string::npos) << s;

  // An unknown metadata value type (type field of the first key = 99).
  std::string unknown = SmallFile().Build();
  const size_t type_at = 24 + 8 + std::string("general.architecture").size();
  unknown[type_at] = 99;
  EXPECT_NE(Parse(unknown).message().find("'general.architecture' has unknown value type 99"),
            std::string::npos);

  // A string length far past the end of the file.
  std::string huge = SmallFile().Build();
  huge[24 + 8 + 20 + 4 + 7] = 0x7f;  // Top byte of the value's length.
  EXPECT_FALSE(Parse(huge).ok());
}

TEST(GgufFileTest, OpenMapsAFileAndNamesMissingOnes) {
  const std::string path = model_internal::TestDir() + "/small.gguf";
  ASSERT_TRUE(model_internal::WriteFile(path, SmallFile().Build()).ok());
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->tensors().size(), 2u);
  absl::Status missing = GgufFile::Open(path + ".nope").status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.message().find("small.gguf.nope"), std::string::npos);
}

// A llama file with 2 heads of head_dim 4, 1 KV head, hidden 8.
GgufWriter LlamaFile(bool with_output) {
  GgufWriter w;
  w.AddString("general.architecture", "llama");
  w.AddUint32("llama.block_count", 1);
  w.AddUint32("llama.embedding_length", 8);
  w.AddUint32("llama.feed_forward_length", 16);
  w.AddUint32("llama.attention.head_count", 2);
  w.AddUint32("llama.attention.head_count_kv", 1);
  w.AddUint32("llama.context_length", 256);
  w.AddFloat32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.AddFloat32("llama.rope.freq_base", 50000.0f);
  w.AddUint32("tokenizer.ggml.bos_token_id", 1);
  w.AddUint32("tokenizer.ggml.eos_token_id", 2);
  std::vector<float> q(64), k(32);
  for (int i = 0; i < 64; ++i) q[i] = float(i / 8);  // Row r holds r.
  for (int i = 0; i < 32; ++i) k[i] = float(i / 8);
  w.AddTensor("token_embd.weight", 0, {8, 10}, Floats(std::vector<float>(80, 0.5f)));
  w.AddTensor("blk.0.attn_q.weight", 0, {8, 8}, Floats(q));
  w.AddTensor("blk.0.attn_k.weight", 0, {8, 4}, Floats(k));
  w.AddTensor("blk.0.ffn_norm.weight", 0, {8}, Floats(std::vector<float>(8, 1.0f)));
  w.AddTensor("rope_something_unused", 0, {8}, Floats(std::vector<float>(8, 1.0f)));
  if (with_output) w.AddTensor("output.weight", 0, {8, 10}, Floats(std::vector<float>(80, 1)));
  return w;
}

TEST(GgufModelTest, ConfigFromMetadata) {
  const std::string bytes = LlamaFile(false).Build();
  auto f = *GgufFile::FromBytes(bytes, "llama.gguf");
  auto config = GgufModelConfig(*f);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->architecture, "LlamaForCausalLM");
  EXPECT_EQ(config->vocab_size, 10);
  EXPECT_EQ(config->hidden_size, 8);
  EXPECT_EQ(config->intermediate_size, 16);
  EXPECT_EQ(config->num_hidden_layers, 1);
  EXPECT_EQ(config->num_attention_heads, 2);
  EXPECT_EQ(config->num_key_value_heads, 1);
  EXPECT_EQ(config->head_dim, 4);
  EXPECT_EQ(config->max_position_embeddings, 256);
  EXPECT_EQ(config->rope_theta, 50000.0);
  EXPECT_FLOAT_EQ(float(config->rms_norm_eps), 1e-5f);
  EXPECT_TRUE(config->tie_word_embeddings);
  EXPECT_EQ(config->bos_token_id, 1);
  EXPECT_EQ(config->eos_token_ids, std::vector<int>{2});
  const std::string untied = LlamaFile(true).Build();
  EXPECT_FALSE(GgufModelConfig(**GgufFile::FromBytes(untied, "u.gguf"))->tie_word_embeddings);
}

TEST(GgufModelTest, LinearRopeScalingIsReadFromMetadata) {
  GgufWriter w = LlamaFile(false);
  w.AddString("llama.rope.scaling.type", "linear");
  w.AddFloat32("llama.rope.scaling.factor", 4.0f);
  const std::string bytes = w.Build();
  absl::StatusOr<ModelConfig> config = GgufModelConfig(**GgufFile::FromBytes(bytes, "l.gguf"));
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_TRUE(config->rope_scaling.has_value());
  EXPECT_EQ(config->rope_scaling->rope_type, "linear");
  EXPECT_EQ(config->rope_scaling->factor, 4.0);
  GgufWriter no_factor = LlamaFile(false);
  no_factor.AddString("llama.rope.scaling.type", "linear");
  const std::string missing = no_factor.Build();
  EXPECT_FALSE(GgufModelConfig(**GgufFile::FromBytes(missing, "m.gguf")).ok());
}

TEST(GgufModelTest, ConfigErrorsNameFileAndKey) {
  GgufWriter w = LlamaFile(false);
  w.AddString("llama.rope.scaling.type", "yarn");
  const std::string yarn = w.Build();
  EXPECT_NE(GgufModelConfig(**GgufFile::FromBytes(yarn, "y.gguf")).status().message().find(
                "RoPE scaling 'yarn'"),
            std::string::npos);
  GgufWriter arch;
  arch.AddString("general.architecture", "mamba");
  const std::string mamba = arch.Build();
  EXPECT_EQ(GgufModelConfig(**GgufFile::FromBytes(mamba, "m.gguf")).status().message(),
            "m.gguf: architecture 'mamba' is not supported (supported: llama, qwen2)");
  GgufWriter typed;
  typed.AddString("general.architecture", "llama");
  typed.AddTensor("token_embd.weight", 0, {8, 10}, Floats(std::vector<float>(80)));
  typed.AddString("llama.embedding_length", "576");
  const std::string bytes = typed.Build();
  EXPECT_EQ(GgufModelConfig(**GgufFile::FromBytes(bytes, "t.gguf")).status().message(),
            "t.gguf: metadata 'llama.embedding_length' is STRING, expected an integer");
}

TEST(GgufModelTest, HfNamesShapesAndRotaryRowOrder) {
  EXPECT_EQ(*GgufToHfTensorName("blk.12.ffn_down.weight"), "model.layers.12.mlp.down_proj.weight");
  EXPECT_EQ(*GgufToHfTensorName("blk.0.attn_q.bias"), "model.layers.0.self_attn.q_proj.bias");
  EXPECT_EQ(*GgufToHfTensorName("output_norm.weight"), "model.norm.weight");
  EXPECT_FALSE(GgufToHfTensorName("rope_freqs.weight").has_value());
  EXPECT_FALSE(GgufToHfTensorName("blk.x.attn_q.weight").has_value());

  const std::string bytes = LlamaFile(false).Build();
  auto f = *GgufFile::FromBytes(bytes, "llama.gguf");
  ModelConfig config = *GgufModelConfig(*f);
  std::vector<std::vector<uint8_t>> storage;
  auto views = GgufTensorsAsHf(*f, config, &storage);
  ASSERT_TRUE(views.ok()) << views.status();
  ASSERT_EQ(views->size(), 4u);  // The unused tensor is left out.
  std::map<std::string, TensorView> by_name;
  for (const TensorView& v : *views) by_name[v.name] = v;
  const TensorView& embed = by_name.at("model.embed_tokens.weight");
  EXPECT_EQ(embed.shape, (std::vector<int64_t>{10, 8}));
  EXPECT_EQ(embed.data, f->FindTensor("token_embd.weight")->data);  // Mapped, not copied.
  // GGUF row 2i+s of a head is HF row s*2+i (head_dim 4): GGUF rows 0..3
  // (values 0,1,2,3) are HF rows 0,2,1,3.
  const auto* q = static_cast<const float*>(by_name.at("model.layers.0.self_attn.q_proj.weight").data);
  std::vector<float> q_rows, k_rows;
  for (int r = 0; r < 8; ++r) q_rows.push_back(q[r * 8]);
  EXPECT_EQ(q_rows, (std::vector<float>{0, 2, 1, 3, 4, 6, 5, 7}));
  const auto* k = static_cast<const float*>(by_name.at("model.layers.0.self_attn.k_proj.weight").data);
  for (int r = 0; r < 4; ++r) k_rows.push_back(k[r * 8]);
  EXPECT_EQ(k_rows, (std::vector<float>{0, 2, 1, 3}));
}

}  // namespace
}  // namespace kvcast
