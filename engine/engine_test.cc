// The continuous-batching engine: batching changes nothing in the output,
// prefixes are reused, pages come back, errors are clean.
#include "engine/engine.h"

#include <map>
#include <random>

#include "engine/testing/tiny_model_fixture.h"
#include "gtest/gtest.h"

namespace kvcast {
namespace {

std::unique_ptr<Engine> MakeEngine(EngineOptions o = EngineOptions()) {
  auto e = Engine::Create(TinyModelDir(), o, NewCpuBackend());
  EXPECT_TRUE(e.ok()) << e.status();
  return std::move(*e);
}

std::vector<int32_t> Tokens(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = int32_t(rng() % 200);
  return t;
}

struct Result {
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::kNone;
  int cached = 0;
};

void StepOnce(Engine* e, std::map<uint64_t, Result>* out) {
  auto events = e->Step();
  ASSERT_TRUE(events.ok()) << events.status();
  for (const SequenceEvent& ev : *events) {
    Result& r = (*out)[ev.id];
    if (ev.token >= 0) r.tokens.push_back(ev.token);
    r.cached = ev.cached_tokens;
    if (ev.finish != FinishReason::kNone) r.finish = ev.finish;
  }
}

std::map<uint64_t, Result> RunToCompletion(Engine* e, std::map<uint64_t, Result> out = {}) {
  for (int guard = 0; e->HasWork() && guard < 10000; ++guard) StepOnce(e, &out);
  EXPECT_FALSE(e->HasWork());
  return out;
}

GenerationParams Greedy(int max_tokens) {
  GenerationParams p;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

TEST(Engine, ConcurrentRequestsGenerateWhatEachGeneratesAlone) {
  std::vector<std::vector<int32_t>> prompts = {Tokens(5, 1), Tokens(150, 2), Tokens(37, 3),
                                               Tokens(300, 4)};
  std::vector<std::vector<int32_t>> alone;
  for (auto& p : prompts) {
    auto e = MakeEngine();
    uint64_t id = *e->Submit(p, Greedy(12));
    alone.push_back(RunToCompletion(e.get())[id].tokens);
    ASSERT_EQ(alone.back().size(), 12u);
  }
  EngineOptions small_batches;
  small_batches.max_batch_tokens = 64;  // forces chunked prefill beside decodes
  auto e = MakeEngine(small_batches);
  std::vector<uint64_t> ids;
  for (auto& p : prompts) ids.push_back(*e->Submit(p, Greedy(12)));
  auto together = RunToCompletion(e.get());
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(together[ids[i]].tokens, alone[i]) << "prompt " << i;
    EXPECT_EQ(together[ids[i]].finish, FinishReason::kLength);
  }
}

TEST(Engine, SecondRequestReusesCachedChunksAndPagesReturn) {
  auto e = MakeEngine();
  const int free_at_start = e->pool().free_pages();
  auto shared = Tokens(300, 5);  // two full 128-token chunks + 44
  auto other = shared;
  other.resize(260);
  auto tail = Tokens(30, 6);
  other.insert(other.end(), tail.begin(), tail.end());
  uint64_t first = *e->Submit(shared, Greedy(4));
  auto r1 = RunToCompletion(e.get());
  EXPECT_EQ(r1[first].cached, 0);
  uint64_t second = *e->Submit(other, Greedy(4));
  auto r2 = RunToCompletion(e.get());
  EXPECT_EQ(r2[second].cached, 256);
  // Cached output equals uncached output.
  auto fresh = MakeEngine();
  uint64_t id = *fresh->Submit(other, Greedy(4));
  EXPECT_EQ(RunToCompletion(fresh.get())[id].tokens, r2[second].tokens);
  // Only the prefix cache holds pages now; dropping it returns them all.
  EXPECT_GT(e->prefix_cache().num_chunks(), 0);
  EXPECT_LT(e->pool().free_pages(), free_at_start);
  e->prefix_cache().Reclaim(1 << 30);
  EXPECT_EQ(e->pool().free_pages(), free_at_start);
}

TEST(Engine, PreemptsUnderPagePressureAndStillProducesTheSameTokens) {
  EngineOptions tight;
  tight.num_pages = 24;  // 384 token slots for two 200-token prompts + decode
  auto e = MakeEngine(tight);
  auto a = Tokens(200, 7), b = Tokens(200, 8);
  uint64_t ia = *e->Submit(a, Greedy(8)), ib = *e->Submit(b, Greedy(8));
  auto got = RunToCompletion(e.get());
  for (auto [id, prompt] : {std::pair{ia, a}, std::pair{ib, b}}) {
    auto ref = MakeEngine();
    uint64_t r = *ref->Submit(prompt, Greedy(8));
    EXPECT_EQ(got[id].tokens, RunToCompletion(ref.get())[r].tokens);
  }
  e->prefix_cache().Reclaim(1 << 30);
  EXPECT_EQ(e->pool().free_pages(), 24);
}

TEST(Engine, PreemptedSequenceIsRecomputedAndFinishesUnchanged) {
  EngineOptions tight;
  tight.num_pages = 10;         // 160 slots; a needs 5 pages, b 8: both cannot fit
  tight.max_batch_tokens = 63;  // b's prompt is still being prefilled when a grows
  auto e = MakeEngine(tight);
  auto a = Tokens(30, 12), b = Tokens(120, 13);
  uint64_t ia = *e->Submit(a, Greedy(40)), ib = *e->Submit(b, Greedy(4));
  auto got = RunToCompletion(e.get());
  EXPECT_GT(e->preemptions(), 0);
  for (auto [id, prompt, n] : {std::tuple{ia, a, 40}, std::tuple{ib, b, 4}}) {
    auto ref = MakeEngine();
    uint64_t r = *ref->Submit(prompt, Greedy(n));
    EXPECT_EQ(got[id].tokens, RunToCompletion(ref.get())[r].tokens) << "request " << id;
    EXPECT_EQ(got[id].finish, FinishReason::kLength);
  }
  e->prefix_cache().Reclaim(1 << 30);
  EXPECT_EQ(e->pool().free_pages(), 10);
}

TEST(Engine, CancelAndStopTokensAndBadRequests) {
  auto e = MakeEngine();
  const int free_at_start = e->pool().free_pages();
  auto p = Tokens(20, 9);
  uint64_t probe = *e->Submit(p, Greedy(3));
  int32_t first_token = RunToCompletion(e.get())[probe].tokens[0];
  GenerationParams stop = Greedy(50);
  stop.stop_tokens = {first_token};
  uint64_t s = *e->Submit(p, stop);
  uint64_t c = *e->Submit(Tokens(30, 10), Greedy(50));
  uint64_t w = *e->Submit(Tokens(30, 11), Greedy(50));
  e->Cancel(w);  // still waiting
  std::map<uint64_t, Result> r;
  StepOnce(e.get(), &r);
  EXPECT_EQ(r[c].tokens.size(), 1u);
  e->Cancel(c);  // running
  r = RunToCompletion(e.get(), r);
  EXPECT_EQ(r[s].finish, FinishReason::kStop);
  EXPECT_EQ(r[s].tokens.size(), 1u);
  EXPECT_EQ(r[c].finish, FinishReason::kCancelled);
  EXPECT_EQ(r[c].tokens.size(), 1u);
  EXPECT_EQ(r[w].finish, FinishReason::kCancelled);
  EXPECT_TRUE(r[w].tokens.empty());
  e->prefix_cache().Reclaim(1 << 30);
  EXPECT_EQ(e->pool().free_pages(), free_at_start);

  EXPECT_EQ(e->Submit({}, Greedy(1)).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(e->Submit({1, 1 << 20}, Greedy(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  GenerationParams bad = Greedy(1);
  bad.sampling.top_p = 2;
  EXPECT_EQ(e->Submit({1}, bad).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(e->Submit({1}, Greedy(0)).status().code(), absl::StatusCode::kInvalidArgument);
  EngineOptions odd;
  odd.chunk_tokens = 100;
  EXPECT_EQ(Engine::Create(TinyModelDir(), odd, NewCpuBackend()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Engine::Create("/nonexistent", EngineOptions(), NewCpuBackend()).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace kvcast
