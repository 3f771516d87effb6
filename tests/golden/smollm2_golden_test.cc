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
//  - cpu-f32 (float32 weights, the exact path): last-position logits within
//    kF32LogitTol of HF's and 64 greedy tokens identical on each prompt;
//  - cpu (Q8 weights and activations) and cpu-bf16 (the dequantized weights
//    rounded to bf16): within kQ8LogitTol, and the greedy
//    tokens agree with HF's at least up to the first step whose HF margin is
//    below kQ8MarginGuard (a near tie that the 8-bit rounding may flip).
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

// Float32 on both sides from the same dequantized weights; only the order
// of float sums differs (30 layers deep). Logits of this model span ~[-30, 30].
constexpr double kF32LogitTol = 2e-3;
// Q8 activations and requantized Q4_1 weights (see docs/benchmarks.md).
constexpr double kQ8LogitTol = 1.5;
constexpr double kQ8MarginGuard = 0.5;

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
    const auto margins = p["greedy_margins"].get<std::vector<double>>();
    const Run run = Generate(**model, backend.get(), want_ids, int(want_greedy.size()));
    ASSERT_EQ(run.last_logits.size(), want_logits.size());
    double worst = 0;
    for (size_t i = 0; i < want_logits.size(); ++i) {
      worst = std::max(worst, std::fabs(run.last_logits[i] - want_logits[i]));
    }
    size_t agree = 0;
    while (agree < want_greedy.size() && run.greedy[agree] == want_greedy[agree]) ++agree;
    size_t guard = 0;  // Steps before the first near tie.
    while (guard < margins.size() && margins[guard] >= kQ8MarginGuard) ++guard;
    std::printf("%s %s: worst last-logit diff %.3g; greedy agrees for %zu of %zu tokens\n",
                std::string(backend->name()).c_str(), name.c_str(), worst, agree,
                want_greedy.size());
    EXPECT_LT(worst, exact ? kF32LogitTol : kQ8LogitTol);
    if (exact) {
      EXPECT_EQ(run.greedy, want_greedy);
    } else {
      EXPECT_GE(agree, guard) << "diverged before the first HF margin < " << kQ8MarginGuard;
    }
  }
}

TEST_F(SmolLM2Test, F32WeightsMatchTransformers) { CheckAgainstHf(CpuWeights::kF32); }
TEST_F(SmolLM2Test, Q8WeightsStayCloseToTransformers) { CheckAgainstHf(CpuWeights::kQ8); }
TEST_F(SmolLM2Test, Bf16WeightsStayCloseToTransformers) { CheckAgainstHf(CpuWeights::kBF16); }

}  // namespace
}  // namespace kvcast
