// kvcast on a real model against Hugging Face transformers: SmolLM2-135M-
// Instruct's GGUF (Q4_1 matrices, Q8_0 embeddings), golden data from
// tools/golden/hf_gguf_golden.py and hf_gguf_tokens.py (transformers 4.45.2
// dequantizing the same file to float32; see tools/golden/README.md).
//
// The GGUF comes from tools/models/fetch_smollm2.sh; `./kvcast.sh test`
// fetches it and passes its path as KVCAST_SMOLLM2. Without it the tests
// report SKIPPED.
//
// Checks:
//  - token ids of 572 varied strings and of the 3 prompts equal HF's;
//  - on each backend, per prompt: the last-position logits within a bound
//    of HF's, and along HF's own history (teacher-forced: the prompt and
//    HF's greedy tokens in one pass) top-1 agreement with HF's next token at
//    64 positions and KL(HF || kvcast) over HF's 32 likeliest tokens + the
//    rest, mean and max, within bounds measured per backend (Bounds below):
//    cpu-f32 (float32 weights, the exact path), cpu (Q8 weights and
//    activations), cpu-bf16 (the dequantized weights rounded to bf16);
//  - cpu-f32 also generates HF's 64 greedy tokens on each prompt.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "engine/kv/kv_page_pool.h"
#include "engine/model/checkpoint.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/transformer.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "nlohmann/json.hpp"

namespace kvcast {
namespace {

// Bounds per backend: measured on 2026-11-27 (AMD EPYC; the cpu-f32 logit
// diff also on the Xeon VM) plus the margin stated beside each. Logits of
// this model span ~[-30, 30]; the golden logits are rounded to 6 significant
// digits (up to 5e-5 of the diff below comes from that).
struct Bounds {
  double last_logit;  // worst |logit diff| after the prompt
  int min_top1;       // of 64 teacher-forced positions
  double mean_kl, max_kl;
};
// Float32 on both sides from the same dequantized weights; only the order of
// float sums differs. Measured: logits <= 8.1e-5, 64 of 64, KL <= 3.5e-10.
// Margin 1.5x on the logits, the rest exact or far above the noise.
constexpr Bounds kF32Bounds{1.2e-4, 64, 1e-9, 1e-8};
// The default backend: Q8 activations, the file's Q4_1 matrices as stored
// and its Q8_0 embedding requantized to Q8. Measured on two builds whose
// activations differ only in their last bits (two exp implementations in
// SwiGLU): logits <= 0.89, top-1 61-63 of 64, KL mean <= 0.0026, max
// 0.0103-0.0206 (the max moves 2x with last-bit changes, which flip the
// rounding of quantized activations). Margin 1.5x over the largest.
constexpr Bounds kQ8Bounds{1.35, 60, 0.004, 0.031};
// The dequantized weights rounded to bf16. Measured: logits <= 0.123, top-1
// 63-64 of 64, KL mean <= 6.7e-5, max <= 5.5e-4. Margin 2x.
constexpr Bounds kBf16Bounds{0.25, 62, 1.5e-4, 1.2e-3};

std::string ModelPath() {
  const char* p = std::getenv("KVCAST_SMOLLM2");
  return p != nullptr ? p : "";
}

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return nlohmann::json::parse(text.str());
}

class SmolLM2Test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (ModelPath().empty()) GTEST_SKIP() << "KVCAST_SMOLLM2 not set (./kvcast.sh test sets it)";
  }
};

TEST_F(SmolLM2Test, TokenIdsEqualHfOnVariedStrings) {
  auto tok = LoadTokenizer(ModelPath());
  ASSERT_TRUE(tok.ok()) << tok.status();
  const nlohmann::json golden = ReadJson("tests/data/golden_smollm2_tokens.json");
  int mismatches = 0, cases = 0;
  for (const auto& c : golden["cases"]) {
    const std::string text = c["text"];
    auto ids = (*tok)->Encode(text, /*add_bos=*/false);
    ASSERT_TRUE(ids.ok()) << ids.status();
    ++cases;
    if (*ids != c["ids"].get<std::vector<int32_t>>() && ++mismatches <= 5) {
      ADD_FAILURE() << "ids differ for " << nlohmann::json(text).dump();
    }
    EXPECT_EQ((*tok)->Decode(*ids), text);
  }
  EXPECT_GE(cases, 400);
  EXPECT_EQ(mismatches, 0);
}

struct Run {
  std::vector<int32_t> prompt;
  std::vector<float> last_logits;
  std::vector<int32_t> greedy;
};

// Prefill in 128-token chunks (as a prefill worker does), then `steps`
// greedy tokens one by one.
Run Generate(Transformer& model, Backend* backend, const std::vector<int32_t>& prompt, int steps) {
  Run run{prompt, {}, {}};
  const int page_tokens = 16;
  const int pages = int(prompt.size() + steps) / page_tokens + 1;
  auto pool = *KvPagePool::Create(backend, model.kv_layout(page_tokens), pages);
  std::vector<int32_t> table(pages);
  std::iota(table.begin(), table.end(), 0);
  std::vector<float> logits;
  EXPECT_TRUE(PrefillInChunks(model, prompt, table, 128, pool.get(), &logits).ok());
  run.last_logits = logits;
  int pos = int(prompt.size());
  for (int s = 0; s < steps; ++s) {
    const int32_t next = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    run.greedy.push_back(next);
    ForwardItem item{absl::Span<const int32_t>(&run.greedy.back(), 1), pos++, table};
    EXPECT_TRUE(model.Forward({&item, 1}, pool.get(), false, &logits).ok());
  }
  return run;
}

// Along HF's own history (the prompt and HF's first 63 greedy tokens in one
// pass): at each of the 64 positions, whether kvcast's top-1 is HF's next
// token, and KL(HF || kvcast) over HF's 32 likeliest tokens plus the rest of
// the mass (a lower bound on the full KL; the rest is < 1e-3 of the mass).
struct TeacherForced {
  int agree = 0, positions = 0;
  double mean_kl = 0, max_kl = 0;
};

TeacherForced ScoreTeacherForced(Transformer& model, Backend* backend,
                                 const std::vector<int32_t>& prompt,
                                 const std::vector<int32_t>& greedy,
                                 const nlohmann::json& teacher) {
  TeacherForced r;
  std::vector<int32_t> tokens = prompt;
  tokens.insert(tokens.end(), greedy.begin(), greedy.end() - 1);
  const int page_tokens = 16;
  const int pages = int(tokens.size()) / page_tokens + 1;
  auto pool = *KvPagePool::Create(backend, model.kv_layout(page_tokens), pages);
  std::vector<int32_t> table(pages);
  std::iota(table.begin(), table.end(), 0);
  std::vector<float> logits;
  ForwardItem item{tokens, 0, table};
  EXPECT_TRUE(model.Forward({&item, 1}, pool.get(), /*all_logits=*/true, &logits).ok());
  const size_t vocab = logits.size() / tokens.size();
  const auto ids = teacher["ids"].get<std::vector<std::vector<int32_t>>>();
  const auto logps = teacher["logprobs"].get<std::vector<std::vector<double>>>();
  for (size_t step = 0; step < greedy.size(); ++step) {
    const float* z = logits.data() + (prompt.size() - 1 + step) * vocab;
    const float* top = std::max_element(z, z + vocab);
    r.agree += int32_t(top - z) == greedy[step];
    double sum = 0;
    for (size_t i = 0; i < vocab; ++i) sum += std::exp(double(z[i]) - *top);
    const double lse = *top + std::log(sum);
    double kl = 0, p_top = 0, q_top = 0;
    for (size_t k = 0; k < ids[step].size(); ++k) {
      const double logp = logps[step][k], logq = z[ids[step][k]] - lse;
      kl += std::exp(logp) * (logp - logq);
      p_top += std::exp(logp);
      q_top += std::exp(logq);
    }
    const double p_rest = std::max(1 - p_top, 0.0), q_rest = std::max(1 - q_top, 1e-30);
    if (p_rest > 0) kl += p_rest * std::log(p_rest / q_rest);
    r.mean_kl += kl / double(greedy.size());
    r.max_kl = std::max(r.max_kl, kl);
    ++r.positions;
  }
  return r;
}

void CheckAgainstHf(CpuWeights weights) {
  const nlohmann::json golden = ReadJson("tests/data/golden_smollm2_gguf.json");
  auto ckpt = Checkpoint::Open(ModelPath());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  auto tok = LoadTokenizer(ModelPath());
  ASSERT_TRUE(tok.ok());
  auto backend = NewCpuBackend(weights);
  auto model = Transformer::Load(**ckpt, backend.get());
  ASSERT_TRUE(model.ok()) << model.status();
  const bool exact = weights == CpuWeights::kF32;
  for (const auto& p : golden["prompts"]) {
    const std::string name = p["name"];
    SCOPED_TRACE(name);
    const auto want_ids = p["token_ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(*(*tok)->Encode(p["text"].get<std::string>(), false), want_ids);
    const auto want_logits = p["last_logits"].get<std::vector<double>>();
    const auto want_greedy = p["greedy_tokens"].get<std::vector<int32_t>>();
    const Run run = Generate(**model, backend.get(), want_ids, int(want_greedy.size()));
    ASSERT_EQ(run.last_logits.size(), want_logits.size());
    double worst = 0;
    for (size_t i = 0; i < want_logits.size(); ++i) {
      worst = std::max(worst, std::fabs(run.last_logits[i] - want_logits[i]));
    }
    size_t agree = 0;
    while (agree < want_greedy.size() && run.greedy[agree] == want_greedy[agree]) ++agree;
    const TeacherForced tf =
        ScoreTeacherForced(**model, backend.get(), want_ids, want_greedy, p["teacher_forced"]);
    std::printf("%s %s: worst last-logit diff %.3g; greedy agrees for %zu of %zu tokens; "
                "teacher-forced top-1 %d of %d, KL mean %.3g max %.3g\n",
                std::string(backend->name()).c_str(), name.c_str(), worst, agree,
                want_greedy.size(), tf.agree, tf.positions, tf.mean_kl, tf.max_kl);
    const Bounds& b = weights == CpuWeights::kF32    ? kF32Bounds
                      : weights == CpuWeights::kBF16 ? kBf16Bounds
                                                     : kQ8Bounds;
    EXPECT_LT(worst, b.last_logit);
    EXPECT_GE(tf.agree, b.min_top1) << "teacher-forced top-1 agreement";
    EXPECT_LT(tf.mean_kl, b.mean_kl);
    EXPECT_LT(tf.max_kl, b.max_kl);
    // The float32 path also generates HF's 64 greedy tokens itself. (For the
    // 8- and 16-bit paths a greedy run parts from HF at its first near tie and
    // then follows another history: the teacher-forced measures above are
    // what can fail there.)
    if (exact) EXPECT_EQ(run.greedy, want_greedy);
  }
}

TEST_F(SmolLM2Test, F32WeightsMatchTransformers) { CheckAgainstHf(CpuWeights::kF32); }
TEST_F(SmolLM2Test, Q8WeightsStayCloseToTransformers) { CheckAgainstHf(CpuWeights::kQ8); }
TEST_F(SmolLM2Test, Bf16WeightsStayCloseToTransformers) { CheckAgainstHf(CpuWeights::kBF16); }

}  // namespace
}  // namespace kvcast
