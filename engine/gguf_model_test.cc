// A model read from GGUF computes what the same model read from its HF
// directory computes: the tiny checkpoint written both ways
// (tools/tiny_model/tiny_gguf.h lays the GGUF out as llama.cpp's converter
// does, rotary rows interleaved). F32 GGUF: bit-identical logits; Q8_0
// GGUF: within the quantization's tolerance; tokenizer: the same ids.
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "engine/kv/kv_page_pool.h"
#include "engine/model/checkpoint.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/transformer.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "tools/tiny_model/tiny_gguf.h"
#include "tools/tiny_model/tiny_model.h"

namespace kvcast {
namespace {

std::string TempPath(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp ? tmp : "/tmp") + "/" + name;
}

// All-position logits of `tokens` for the model at `path`, on float32
// weights or those of `weights`; `weight_bytes` gets what the backend holds.
std::vector<float> Logits(const std::string& path, const std::vector<int32_t>& tokens,
                          CpuWeights weights = CpuWeights::kF32, size_t* weight_bytes = nullptr) {
  auto ckpt = Checkpoint::Open(path);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  if (!ckpt.ok()) return {};
  auto backend = NewCpuBackend(weights);
  auto model = Transformer::Load(**ckpt, backend.get());
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return {};
  if (weight_bytes != nullptr) *weight_bytes = (*model)->weight_bytes();
  auto pool = *KvPagePool::Create(backend.get(), (*model)->kv_layout(16), 8);
  std::vector<int32_t> pages(8);
  std::iota(pages.begin(), pages.end(), 0);
  ForwardItem item{tokens, 0, pages};
  std::vector<float> logits;
  EXPECT_TRUE((*model)->Forward({&item, 1}, pool.get(), true, &logits).ok());
  return logits;
}

const std::vector<int32_t> kPrompt = {510, 17, 300, 42, 99, 5, 250, 401, 33, 7, 128, 64, 1, 2, 3};

class GgufModelTest : public ::testing::TestWithParam<const char*> {};

TEST_P(GgufModelTest, F32GgufLogitsEqualHfDirectory) {
  TinyModelOptions o;
  o.arch = GetParam();
  o.dtype = "f32";
  o.intermediate_size = 192;
  const std::string path = TempPath(std::string(GetParam()) + "-f32.gguf");
  ASSERT_TRUE(WriteTinyGguf(o, GgmlType::kF32, path).ok());
  const auto hf = Logits(path + ".hf", kPrompt), gguf = Logits(path, kPrompt);
  ASSERT_EQ(hf.size(), kPrompt.size() * 512);
  ASSERT_EQ(gguf, hf);
}

TEST_P(GgufModelTest, Q8_0GgufLogitsCloseToHfDirectory) {
  TinyModelOptions o;
  o.arch = GetParam();
  o.dtype = "f32";
  o.intermediate_size = 192;
  o.tie_embeddings = true;
  const std::string path = TempPath(std::string(GetParam()) + "-q8.gguf");
  ASSERT_TRUE(WriteTinyGguf(o, GgmlType::kQ8_0, path).ok());
  const auto hf = Logits(path + ".hf", kPrompt), gguf = Logits(path, kPrompt);
  ASSERT_EQ(gguf.size(), hf.size());
  double worst = 0, spread = 0;
  for (size_t i = 0; i < hf.size(); ++i) {
    worst = std::max(worst, double(std::fabs(gguf[i] - hf[i])));
    spread = std::max(spread, double(std::fabs(hf[i])));
  }
  // Q8_0 weights (no activation quantization on cpu-f32): logits move by
  // under 2% of their range; a wrong row order would move them by ~100%.
  EXPECT_LT(worst, 0.02 * spread) << "worst " << worst << " of " << spread;
  EXPECT_GT(worst, 0.0);  // Really quantized.
}

// Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q4_K / Q5_K / Q6_K matrices stay 4-, 5- or 6-bit on
// the default backend ("cpu": Q4 panels, 0.625-0.875 bytes a weight against Q8's
// 1.125) and compute what the same blocks widened to float32 compute, up to its Q8
// activations.
TEST_P(GgufModelTest, Q4GgufStaysQ4OnTheCpuBackend) {
  for (GgmlType type : {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1,
                        GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K}) {
    const std::string name = GgmlTypeName(uint32_t(type));
    SCOPED_TRACE(name);
    TinyModelOptions o;
    o.arch = GetParam();
    o.dtype = "f32";
    o.intermediate_size = 192;
    o.tie_embeddings = true;
    const bool k_quant =
        type == GgmlType::kQ4_K || type == GgmlType::kQ5_K || type == GgmlType::kQ6_K;
    if (k_quant) {  // rows of whole 256-value blocks
      o.hidden_size = 256;
      o.intermediate_size = 512;
    }
    const std::string q8_path = TempPath(std::string(GetParam()) + "-q8-for-" + name + ".gguf");
    ASSERT_TRUE(WriteTinyGguf(o, GgmlType::kQ8_0, q8_path).ok());
    size_t q8_bytes = 0;
    const auto q8_f32 = Logits(q8_path, kPrompt),
               q8 = Logits(q8_path, kPrompt, CpuWeights::kQ8, &q8_bytes);
    const std::string path = TempPath(std::string(GetParam()) + "-" + name + ".gguf");
    ASSERT_TRUE(WriteTinyGguf(o, type, path).ok());
    size_t q4_bytes = 0;
    const auto f32 = Logits(path, kPrompt), q4 = Logits(path, kPrompt, CpuWeights::kQ8, &q4_bytes);
    ASSERT_EQ(q4.size(), f32.size());
    ASSERT_FALSE(q4.empty());
    // 0.625-0.75 (Q5_K, Q6_K: 0.875) bytes a weight against 1.125; widened
    // they would be equal.
    const double bound = type == GgmlType::kQ5_K || type == GgmlType::kQ6_K ? 0.82 : 0.75;
    EXPECT_LT(double(q4_bytes), bound * double(q8_bytes))
        << "Q4 weights " << q4_bytes << ", Q8 " << q8_bytes;
    ASSERT_EQ(q8.size(), f32.size());
    double worst = 0, q8_worst = 0, spread = 0;
    for (size_t i = 0; i < f32.size(); ++i) {
      worst = std::max(worst, double(std::fabs(q4[i] - f32[i])));
      q8_worst = std::max(q8_worst, double(std::fabs(q8[i] - q8_f32[i])));
      spread = std::max(spread, double(std::fabs(f32[i])));
    }
    // On both files the backends differ only by the Q8 activations (the
    // weights are the same values), so the gaps are alike (measured: 0.80x to
    // 1.16x); a wrong nibble, scale or row order moves logits by a large part
    // of their range.
    EXPECT_LT(worst, 2 * q8_worst) << "Q4 file's gap " << worst << ", Q8 file's " << q8_worst
                                   << ", logits up to " << spread;
    // The Q8_0 file's own blocks, kept as they are: the gap of activations
    // alone (measured 1.8-2.3% of the logits' range).
    EXPECT_LT(q8_worst, 0.05 * spread);
  }
}

TEST_P(GgufModelTest, TokenizerFromGgufEqualsTokenizerJson) {
  TinyModelOptions o;
  o.arch = GetParam();
  const std::string path = TempPath(std::string(GetParam()) + "-tok.gguf");
  ASSERT_TRUE(WriteTinyGguf(o, GgmlType::kF32, path).ok());
  auto from_gguf = LoadTokenizer(path);
  auto from_json = LoadTokenizer(path + ".hf");
  ASSERT_TRUE(from_gguf.ok()) << from_gguf.status();
  ASSERT_TRUE(from_json.ok());
  EXPECT_EQ((*from_gguf)->vocab_size(), (*from_json)->vocab_size());
  EXPECT_EQ((*from_gguf)->eos_id(), (*from_json)->eos_id());
  for (const char* text : {"The quick brown fox jumps over the lazy dog.", "  It's 12345!\n\n",
                           "<|end_of_text|>tail", "naïve café — 東京 🙂", ""}) {
    auto a = (*from_gguf)->Encode(text, false), b = (*from_json)->Encode(text, false);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(*a, *b) << text;
    EXPECT_EQ((*from_gguf)->Decode(*a), (*from_json)->Decode(*b));
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, GgufModelTest, ::testing::Values("llama", "qwen2"));

// Llama-3.1 RoPE scaling travels as a rope_freqs tensor of divisors; the
// engine's frequencies then equal HF's rope_scaling formula up to the float32
// rounding of the divisors (plain RoPE would move the logits by ~1).
TEST(GgufModelRopeTest, RopeFreqsTensorEqualsHfLlama3Scaling) {
  TinyModelOptions o;
  o.dtype = "f32";
  o.intermediate_size = 192;
  o.llama3_rope_scaling = true;
  const std::string path = TempPath("llama3-rope.gguf");
  ASSERT_TRUE(WriteTinyGguf(o, GgmlType::kF32, path).ok());
  auto ckpt = Checkpoint::Open(path);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ((*ckpt)->config().rope_freq_factors.size(), 8u);  // head_dim 16
  const auto hf = Logits(path + ".hf", kPrompt), gguf = Logits(path, kPrompt);
  ASSERT_EQ(gguf.size(), hf.size());
  double worst = 0;
  for (size_t i = 0; i < hf.size(); ++i) worst = std::max(worst, double(std::fabs(gguf[i] - hf[i])));
  EXPECT_LT(worst, 1e-4);
  // Without the divisors: plain RoPE, far off.
  o.llama3_rope_scaling = false;
  const std::string plain = TempPath("llama-plain.gguf");
  ASSERT_TRUE(WriteTinyGguf(o, GgmlType::kF32, plain).ok());
  const auto off = Logits(plain, kPrompt);
  double moved = 0;
  for (size_t i = 0; i < hf.size(); ++i) moved = std::max(moved, double(std::fabs(off[i] - hf[i])));
  EXPECT_GT(moved, 100 * 1e-4);
}

}  // namespace
}  // namespace kvcast
