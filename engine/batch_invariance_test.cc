// Batch invariance: with KVCAST_CPU_ATTENTION=tiled (this test's
// environment), every query row of attention takes the tiled kernel, whose
// result for a row depends on nothing else in the call; the matrix products
// are batch-invariant already where the weights are in kvcast's own kernels
// (Q8, and a GGUF file's blocks: q8_matmul.h, q4_matmul.h; float32 weights
// go through OpenBLAS, whose gemv and gemm sum in other orders). A token's
// logits are then the same bits whatever pass computes them: its size, the
// token's place in it, prefill or decode, a long context or not. Without
// the variable (this binary run alone) the test fails: by default a
// prefill row (a pass of 16 rows or more) and a decode row take different
// kernels, whose sums differ in the last bits, which int8 activations
// amplify (docs/openai-api.md, "The prompt's log-probabilities").
#include <map>
#include <random>

#include "engine/engine.h"
#include "engine/testing/tiny_model_fixture.h"
#include "gtest/gtest.h"

namespace kvcast {
namespace {

std::unique_ptr<Engine> MakeEngine(int max_batch_tokens) {
  EngineOptions o;
  o.max_batch_tokens = max_batch_tokens;
  o.kv_fp16_values = true;  // as the workers keep KV
  TinyModelOptions m;
  m.intermediate_size = 192;  // every projection a multiple of 32: all in the Q8 kernels
  auto e = Engine::Create(TinyModelDir(m), o, NewCpuBackend(CpuWeights::kQ8));
  EXPECT_TRUE(e.ok()) << e.status();
  return std::move(*e);
}

// A generation's tokens and their logprobs, then the same tokens as a
// prompt whose logprobs another engine, in other passes, computes: equal
// bits, decode steps against prefill rows, past 1,024 keys (where a lone
// decode row would be split over keys).
TEST(BatchInvariance, ATokensLogprobIsTheSameBitsInEveryPass) {
  std::mt19937 rng(11);
  std::vector<int32_t> prompt(1100);
  for (int32_t& t : prompt) t = int32_t(rng() % 500);
  GenerationParams gen;
  gen.max_tokens = 24;
  gen.ignore_eos = true;
  gen.logprobs = true;
  auto a = MakeEngine(64);
  const uint64_t id = *a->Submit(prompt, gen);
  std::vector<int32_t> other(150);
  for (int32_t& t : other) t = int32_t(rng() % 500);
  GenerationParams side = gen;
  side.max_tokens = 40;
  ASSERT_TRUE(a->Submit(other, side).ok());  // shares the passes
  std::vector<int32_t> tokens;
  std::vector<float> generated;
  for (int guard = 0; a->HasWork() && guard < 1000; ++guard) {
    auto events = a->Step();
    ASSERT_TRUE(events.ok()) << events.status();
    for (const SequenceEvent& ev : *events) {
      if (ev.id != id || ev.token < 0) continue;
      tokens.push_back(ev.token);
      generated.push_back(ev.logprob->logprob);
    }
  }
  ASSERT_EQ(tokens.size(), 24u);

  std::vector<int32_t> whole = prompt;
  whole.insert(whole.end(), tokens.begin(), tokens.end());
  GenerationParams echo;
  echo.max_tokens = 1;
  echo.prompt_logprobs = true;
  auto b = MakeEngine(256);
  const uint64_t eid = *b->Submit(whole, echo);
  std::vector<TokenLogprob> echoed;
  for (int guard = 0; b->HasWork() && guard < 1000; ++guard) {
    auto events = b->Step();
    ASSERT_TRUE(events.ok()) << events.status();
    for (SequenceEvent& ev : *events) {
      if (ev.id == eid && !ev.prompt_logprobs.empty()) echoed = std::move(ev.prompt_logprobs);
    }
  }
  ASSERT_EQ(echoed.size(), whole.size() - 1);
  int differ = 0;
  for (size_t k = 0; k < tokens.size(); ++k) {
    // Token k was generated after prompt.size() + k tokens.
    differ += echoed[prompt.size() - 1 + k].logprob != generated[k];
  }
  EXPECT_EQ(differ, 0) << "of " << tokens.size() << " generated tokens' logprobs";
}

}  // namespace
}  // namespace kvcast
