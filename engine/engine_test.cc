// The continuous-batching engine: batching changes nothing in the output,
// prefixes are reused, pages come back, errors are clean, and KV computed
// by one engine continues in another (disaggregated prefill and decode).
#include "engine/engine.h"

#include <cstring>
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
  absl::Status status;
};

void StepOnce(Engine* e, std::map<uint64_t, Result>* out) {
  auto events = e->Step();
  ASSERT_TRUE(events.ok()) << events.status();
  for (const SequenceEvent& ev : *events) {
    Result& r = (*out)[ev.id];
    if (ev.token >= 0) r.tokens.push_back(ev.token);
    r.cached = ev.cached_tokens;
    if (ev.finish != FinishReason::kNone) r.finish = ev.finish;
    if (ev.finish == FinishReason::kError) r.status = ev.status;
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

// Rows picked on the backend (no repetition penalty) and on the host (with
// one) share a batch; each sequence's seeded tokens are those it gets alone.
// logprobs: the log-softmax of the model's own logits at each step (checked
// against a plain forward pass over the same tokens), the top list led by
// the greedy pick, and no token changed by asking for them.
// The tiny model's logits at every position of `tokens`, from one pass
// alone (the reference for the engine's log-probabilities).
class OnePass {
 public:
  explicit OnePass(const std::vector<int32_t>& tokens) {
    LoadedTinyModel m = LoadTinyModel();
    auto pool = *KvPagePool::Create(m.backend.get(), m.model->kv_layout(16), 64);
    auto table = *pool->Allocate(int(tokens.size() + 15) / 16);
    ForwardItem item{tokens, 0, table.ids()};
    EXPECT_TRUE(m.model->Forward({&item, 1}, pool.get(), /*all_logits=*/true, &logits_).ok());
    vocab_ = size_t(m.model->config().vocab_size);
  }
  // log-softmax of position `pos`'s row at `token`.
  double Logprob(size_t pos, int32_t token) const {
    const float* row = logits_.data() + pos * vocab_;
    const double mx = *std::max_element(row, row + vocab_);
    double sum = 0;
    for (size_t t = 0; t < vocab_; ++t) sum += std::exp(row[t] - mx);
    return row[token] - mx - std::log(sum);
  }
  int32_t Argmax(size_t pos) const {
    const float* row = logits_.data() + pos * vocab_;
    return int32_t(std::max_element(row, row + vocab_) - row);
  }

 private:
  std::vector<float> logits_;
  size_t vocab_ = 0;
};

TEST(Engine, LogprobsAreTheLogSoftmaxOfTheModelsLogitsAndChangeNoToken) {
  const std::vector<int32_t> prompt = Tokens(40, 9);
  GenerationParams with = Greedy(6);
  with.logprobs = true;
  with.top_logprobs = 3;
  with.min_tokens = 6;  // the masks it applies are not in the logprobs
  GenerationParams plain = with;
  plain.logprobs = false;
  plain.top_logprobs = 0;
  auto e = MakeEngine();
  const uint64_t a = *e->Submit(prompt, plain), b = *e->Submit(prompt, with);
  std::vector<int32_t> tokens_a, tokens_b;
  std::vector<TokenLogprob> lps;
  for (int guard = 0; e->HasWork() && guard < 100; ++guard) {
    auto events = e->Step();
    ASSERT_TRUE(events.ok()) << events.status();
    for (const SequenceEvent& ev : *events) {
      if (ev.token < 0) continue;
      if (ev.id == a) {
        tokens_a.push_back(ev.token);
        EXPECT_FALSE(ev.logprob.has_value());
      } else {
        ASSERT_EQ(ev.id, b);
        tokens_b.push_back(ev.token);
        ASSERT_TRUE(ev.logprob.has_value());
        lps.push_back(*ev.logprob);
      }
    }
  }
  ASSERT_EQ(tokens_b.size(), 6u);
  EXPECT_EQ(tokens_a, tokens_b);

  std::vector<int32_t> seq = prompt;
  seq.insert(seq.end(), tokens_b.begin(), tokens_b.end() - 1);
  const OnePass pass(seq);
  for (size_t k = 0; k < lps.size(); ++k) {
    EXPECT_NEAR(lps[k].logprob, pass.Logprob(prompt.size() - 1 + k, tokens_b[k]), 2e-3) << k;
    ASSERT_EQ(lps[k].top.size(), 3u);
    EXPECT_EQ(lps[k].top[0].first, tokens_b[k]);  // greedy
    EXPECT_FLOAT_EQ(lps[k].top[0].second, lps[k].logprob);
    EXPECT_GE(lps[k].top[0].second, lps[k].top[1].second);
    EXPECT_GE(lps[k].top[1].second, lps[k].top[2].second);
  }

  GenerationParams too_many = with;
  too_many.top_logprobs = kMaxTopLogprobs + 1;
  EXPECT_EQ(e->Submit(prompt, too_many).status().code(), absl::StatusCode::kInvalidArgument);
}

// A prompt's log-probabilities (echo with logprobs) are those of one pass
// over the prompt alone, position by position, whatever shares the passes
// and whatever the cache holds: the prompt is computed whole, over several
// passes here, beside another sequence's prompt chunks and decode tokens.
TEST(Engine, PromptLogprobsAreTheLogSoftmaxOfEveryPromptPosition) {
  EngineOptions o;
  o.max_batch_tokens = 100;
  auto e = MakeEngine(o);
  const std::vector<int32_t> prompt = Tokens(300, 21);
  e->Submit(prompt, Greedy(2)).IgnoreError();  // its chunks go to the cache
  RunToCompletion(e.get());
  const int64_t computed_before = e->totals().prompt_tokens_computed;
  GenerationParams with = Greedy(3);
  with.prompt_logprobs = true;
  with.top_logprobs = 2;
  ASSERT_TRUE(e->Submit(Tokens(150, 22), Greedy(40)).ok());
  std::map<uint64_t, Result> first_pass;
  StepOnce(e.get(), &first_pass);  // `other` is mid-prompt when ours arrives
  const uint64_t id = *e->Submit(prompt, with);
  std::vector<TokenLogprob> got;
  int events_with = 0, cached = -1;
  for (int guard = 0; e->HasWork() && guard < 1000; ++guard) {
    auto events = e->Step();
    ASSERT_TRUE(events.ok()) << events.status();
    for (SequenceEvent& ev : *events) {
      if (ev.id != id) {
        EXPECT_TRUE(ev.prompt_logprobs.empty());
        continue;
      }
      if (ev.token >= 0 && cached < 0) cached = ev.cached_tokens;
      if (ev.prompt_logprobs.empty()) continue;
      ++events_with;
      EXPECT_EQ(ev.generated_tokens, 1);
      got = std::move(ev.prompt_logprobs);
    }
  }
  EXPECT_EQ(events_with, 1);
  EXPECT_EQ(cached, 0);  // the cached chunks have no logits: recomputed
  EXPECT_EQ(e->totals().prompt_tokens_computed - computed_before, 300 + 150);
  ASSERT_EQ(got.size(), prompt.size() - 1);

  const OnePass pass(prompt);
  for (size_t k = 0; k < got.size(); ++k) {
    ASSERT_NEAR(got[k].logprob, pass.Logprob(k, prompt[k + 1]), 2e-3) << k;
    ASSERT_EQ(got[k].top.size(), 2u);
    EXPECT_EQ(got[k].top[0].first, pass.Argmax(k)) << k;
    EXPECT_NEAR(got[k].top[0].second, pass.Logprob(k, pass.Argmax(k)), 2e-3) << k;
  }

  // A pass keeps at most a chunk's rows of them: 300 positions take 3 passes
  // of 256 tokens each (not 2), with the same values.
  auto wide = MakeEngine();  // max_batch_tokens 256, chunk_tokens 128
  GenerationParams one = with;
  one.max_tokens = 1;
  const uint64_t only = *wide->Submit(prompt, one);
  std::vector<TokenLogprob> again;
  for (int guard = 0; wide->HasWork() && guard < 100; ++guard) {
    auto events = wide->Step();
    ASSERT_TRUE(events.ok()) << events.status();
    for (SequenceEvent& ev : *events) {
      if (ev.id == only && !ev.prompt_logprobs.empty()) again = std::move(ev.prompt_logprobs);
    }
  }
  EXPECT_EQ(wide->totals().steps, 3);
  ASSERT_EQ(again.size(), got.size());
  for (size_t k = 0; k < got.size(); ++k) EXPECT_NEAR(again[k].logprob, got[k].logprob, 1e-4) << k;

  // KV from elsewhere has no logits to give.
  auto kv = *e->pool().Allocate(1);
  PrefilledKv prefilled{std::move(kv), 16, -1};
  EXPECT_EQ(e->Submit(prompt, with, std::move(prefilled)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Engine, SampledAndPenalizedRequestsInOneBatchMatchEachAlone) {
  std::vector<std::vector<int32_t>> prompts = {Tokens(40, 5), Tokens(9, 6), Tokens(70, 7)};
  std::vector<GenerationParams> params(3, Greedy(16));
  params[0].sampling = {0.9f, 0, 0.95f, 1.f, 11};
  params[1].sampling = {1.1f, 20, 1.f, 1.3f, 12};  // penalized: picked on the host
  params[2].sampling = {0.7f, 0, 1.f, 1.f, 13};
  std::vector<std::vector<int32_t>> alone;
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto e = MakeEngine();
    uint64_t id = *e->Submit(prompts[i], params[i]);
    alone.push_back(RunToCompletion(e.get())[id].tokens);
    ASSERT_EQ(alone.back().size(), 16u);
  }
  EXPECT_NE(alone[0], alone[2]);
  auto e = MakeEngine();
  std::vector<uint64_t> ids;
  for (size_t i = 0; i < prompts.size(); ++i) ids.push_back(*e->Submit(prompts[i], params[i]));
  auto together = RunToCompletion(e.get());
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(together[ids[i]].tokens, alone[i]) << i;
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
  // Waiting, it owes only what its cache does not hold (the router reads this).
  EXPECT_EQ(e->waiting_prompt_tokens(), 290 - 256);
  auto r2 = RunToCompletion(e.get());
  EXPECT_EQ(r2[second].cached, 256);
  // The work done, as the worker reports it: both prompts, less the reused
  // chunks; four tokens each.
  const Engine::Totals totals = e->totals();
  EXPECT_EQ(totals.sequences, 2);
  EXPECT_EQ(totals.prompt_tokens_computed, 300 + (290 - 256));
  EXPECT_EQ(totals.tokens_generated, 8);
  // One step per token after the prompt's (one chunk pass per 128 tokens
  // at most): each sequence alone in its steps here.
  EXPECT_GE(totals.steps, 8);
  EXPECT_EQ(totals.step_sequences, totals.steps);
  EXPECT_GT(totals.step_seconds, 0);
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

// Requests submitted together whose prompts share chunks (n > 1 choices, a
// burst of one system prompt) compute each shared chunk once: the others
// wait for it and take it from the prefix cache, and generate what they
// would alone. Another tenant's identical prompt shares nothing.
TEST(Engine, RequestsSharingChunksAtOnceComputeEachChunkOnce) {
  EngineOptions o;
  o.max_batch_tokens = 64;  // the first prompt takes several passes
  auto e = MakeEngine(o);
  const auto prompt = Tokens(300, 5);  // two full 128-token chunks + 44
  auto other = prompt;                 // the same first 260 tokens, then its own
  other.resize(260);
  const auto tail = Tokens(30, 6);
  other.insert(other.end(), tail.begin(), tail.end());
  GenerationParams bob = Greedy(4);
  bob.tenant = "bob";
  std::vector<uint64_t> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(*e->Submit(prompt, Greedy(4)));
  ids.push_back(*e->Submit(other, Greedy(4)));
  ids.push_back(*e->Submit(prompt, bob));
  auto r = RunToCompletion(e.get());
  EXPECT_EQ(r[ids[0]].cached, 0);
  EXPECT_EQ(r[ids[1]].cached, 256);
  EXPECT_EQ(r[ids[2]].cached, 256);
  EXPECT_EQ(r[ids[3]].cached, 256);
  EXPECT_EQ(r[ids[4]].cached, 0);  // bob's chunks are his own
  // 300 once, the 44-token tails of the two other copies, the other
  // prompt's 34, and bob's 300: not 5 x ~300.
  EXPECT_EQ(e->totals().prompt_tokens_computed, 300 + 2 * 44 + 34 + 300);
  auto alone = [&](const std::vector<int32_t>& p) {
    auto fresh = MakeEngine();
    const uint64_t id = *fresh->Submit(p, Greedy(4));
    return RunToCompletion(fresh.get())[id].tokens;
  };
  const auto expected = alone(prompt);
  for (int i : {0, 1, 2, 4}) EXPECT_EQ(r[ids[i]].tokens, expected) << i;
  EXPECT_EQ(r[ids[3]].tokens, alone(other));
}

// Chunks evicted from the pool wait in the host tier (fp16) and come back
// for the next request sharing the prefix: cached, with the output of a
// fresh engine, and every page accounted for.
TEST(Engine, EvictedChunksComeBackFromTheHostTier) {
  EngineOptions o;
  o.host_tier_bytes = 64 << 20;
  auto e = MakeEngine(o);
  const int free_at_start = e->pool().free_pages();
  auto shared = Tokens(300, 5);
  auto other = shared;
  other.resize(260);
  auto tail = Tokens(30, 6);
  other.insert(other.end(), tail.begin(), tail.end());
  uint64_t first = *e->Submit(shared, Greedy(4));
  RunToCompletion(e.get());
  (void)first;
  e->prefix_cache().Reclaim(1 << 30);  // the pool drops every chunk: they go to the tier
  EXPECT_EQ(e->prefix_cache().num_chunks(), 0);
  EXPECT_EQ(e->pool().free_pages(), free_at_start);
  const HostKvTier::Stats demoted = e->host_tier()->stats();
  EXPECT_EQ(demoted.chunks, 2u);  // 300 tokens: two full chunks
  EXPECT_EQ(demoted.bytes, 2 * e->host_tier()->chunk_bytes());
  e->Prefetch(other);
  uint64_t second = *e->Submit(other, Greedy(4));
  // Prefetch brought its prefix up at once (before any step).
  EXPECT_EQ(e->prefix_cache().num_chunks(), 2);
  EXPECT_EQ(e->host_tier()->stats().hits, 2u);
  // Waiting, it owes only what its cache does not hold (the router reads this).
  EXPECT_EQ(e->waiting_prompt_tokens(), 290 - 256);
  auto r2 = RunToCompletion(e.get());
  EXPECT_EQ(r2[second].cached, 256);
  EXPECT_EQ(e->host_tier()->stats().hits, 2u);
  auto fresh = MakeEngine();
  uint64_t id = *fresh->Submit(other, Greedy(4));
  EXPECT_EQ(RunToCompletion(fresh.get())[id].tokens, r2[second].tokens);
  e->prefix_cache().Reclaim(1 << 30);
  EXPECT_EQ(e->pool().free_pages(), free_at_start);
}

// A restarted engine finds the chunks its predecessor wrote to the disk
// tier and reuses them.
TEST(Engine, ARestartedEngineReusesItsDiskTier) {
  EngineOptions o;
  o.host_tier_bytes = 64 << 20;
  o.disk_tier_dir = testing::TempDir() + "/engine_disk_tier";
  o.disk_tier_bytes = 64 << 20;
  auto shared = Tokens(300, 8);
  auto other = shared;
  other.resize(280);
  {
    auto e = MakeEngine(o);
    *e->Submit(shared, Greedy(4));
    RunToCompletion(e.get());
  }  // a graceful stop writes every cached chunk to disk
  auto e = MakeEngine(o);
  EXPECT_EQ(e->disk_tier()->stats().chunks, 2u);
  uint64_t id = *e->Submit(other, Greedy(4));
  auto r = RunToCompletion(e.get());
  EXPECT_EQ(r[id].cached, 256);
  EXPECT_EQ(e->disk_tier()->stats().hits, 2u);
  auto fresh = MakeEngine();
  uint64_t fid = *fresh->Submit(other, Greedy(4));
  EXPECT_EQ(RunToCompletion(fresh.get())[fid].tokens, r[id].tokens);
  // A disk tier needs the host tier above it.
  EngineOptions no_host = o;
  no_host.host_tier_bytes = 0;
  EXPECT_EQ(Engine::Create(TinyModelDir(), no_host, NewCpuBackend()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Engine, PrefixCachingOffReusesNothing) {
  EngineOptions o;
  o.prefix_caching = false;
  auto e = MakeEngine(o);
  const int free_at_start = e->pool().free_pages();
  auto prompt = Tokens(300, 5);
  uint64_t first = *e->Submit(prompt, Greedy(4));
  auto r1 = RunToCompletion(e.get());
  uint64_t second = *e->Submit(prompt, Greedy(4));
  auto r2 = RunToCompletion(e.get());
  EXPECT_EQ(r2[second].cached, 0);
  EXPECT_EQ(r2[second].tokens, r1[first].tokens);
  EXPECT_EQ(e->prefix_cache().num_chunks(), 0);
  EXPECT_EQ(e->pool().free_pages(), free_at_start);
}

TEST(Engine, TenantsReuseOnlyTheirOwnChunks) {
  auto e = MakeEngine();
  auto prompt = Tokens(300, 5);
  auto as = [](const std::string& tenant) {
    GenerationParams p = Greedy(3);
    p.tenant = tenant;
    return p;
  };
  auto run = [&](const std::string& tenant) {
    uint64_t id = *e->Submit(prompt, as(tenant));
    return RunToCompletion(e.get())[id];
  };
  const Result alice = run("alice"), mallory = run("mallory"), plain = run("");
  const Result alice_again = run("alice"), plain_again = run("");
  EXPECT_EQ(alice.cached, 0);
  EXPECT_EQ(mallory.cached, 0);  // alice's chunks are not mallory's
  EXPECT_EQ(plain.cached, 0);    // nor the default domain's
  EXPECT_EQ(alice_again.cached, 256);
  EXPECT_EQ(plain_again.cached, 256);
  // The same tokens whichever KV was used.
  EXPECT_EQ(mallory.tokens, alice.tokens);
  EXPECT_EQ(alice_again.tokens, alice.tokens);
  EXPECT_NE(e->prefix_seed("alice"), e->prefix_seed());
  EXPECT_EQ(e->prefix_seed(""), e->prefix_seed());
  EXPECT_EQ(e->prefix_cache().num_chunks(), 6u);  // two chunks per domain
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

// A sequence that outgrows the whole pool alone ends with kError and a
// typed status (OutOfRange, naming the pool), its pages returned.
TEST(Engine, ASequenceTheWholePoolCannotHoldEndsOutOfRange) {
  EngineOptions tight;
  tight.num_pages = 4;  // 64 token slots: the 50-token prompt fits, 40 more do not
  auto e = MakeEngine(tight);
  uint64_t id = *e->Submit(Tokens(50, 3), Greedy(40));
  auto got = RunToCompletion(e.get());
  EXPECT_EQ(got[id].finish, FinishReason::kError);
  EXPECT_EQ(got[id].status.code(), absl::StatusCode::kOutOfRange) << got[id].status;
  EXPECT_NE(got[id].status.message().find("the page pool holds 4"), std::string::npos)
      << got[id].status;
  EXPECT_GT(got[id].tokens.size(), 0u);
  e->prefix_cache().Reclaim(1 << 30);
  EXPECT_EQ(e->pool().free_pages(), 4);
}

// Pages held outside the engine's sequences (a publisher's chunks, a
// landing) leave a sequence short though the pool could hold it: a
// retryable ResourceExhausted, not OutOfRange (which a client gets as a
// 400); served once the pages come back.
TEST(Engine, PagesHeldElsewhereAreARetryableShortage) {
  EngineOptions tight;
  tight.num_pages = 8;
  auto e = MakeEngine(tight);
  absl::StatusOr<KvPages> held = e->pool().Allocate(6);  // as a publisher's chunks
  ASSERT_TRUE(held.ok());
  uint64_t id = *e->Submit(Tokens(50, 3), Greedy(4));  // 4 pages: fits 8, not the 2 free
  auto got = RunToCompletion(e.get());
  EXPECT_EQ(got[id].finish, FinishReason::kError);
  EXPECT_EQ(got[id].status.code(), absl::StatusCode::kResourceExhausted) << got[id].status;
  EXPECT_NE(got[id].status.message().find("full for now"), std::string::npos) << got[id].status;
  held->Reset();
  uint64_t again = *e->Submit(Tokens(50, 3), Greedy(4));
  EXPECT_EQ(RunToCompletion(e.get())[again].finish, FinishReason::kLength);
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

// Prompt chunks reported by on_prompt_chunk, their pages kept (the handles
// the engine hands over) until ReleaseAll.
struct ChunkLog {
  KvPagePool* pool = nullptr;
  std::vector<int> chunks;
  std::vector<std::vector<int32_t>> pages;
  std::vector<KvPages> held;

  std::function<void(int, KvPages)> Hook() {
    return [this](int c, KvPages p) {
      chunks.push_back(c);
      EXPECT_EQ(p.pool(), pool);
      pages.emplace_back(p.ids().begin(), p.ids().end());
      held.push_back(std::move(p));
    };
  }
  std::vector<int32_t> AllPages(int num_chunks) const {
    std::vector<int32_t> all;
    for (int c = 0; c < num_chunks; ++c) all.insert(all.end(), pages[c].begin(), pages[c].end());
    return all;
  }
  void ReleaseAll() {
    held.clear();
    pages.clear();
  }
};

// Copies the K/V of token slots [0, tokens) from `src` pages of one pool to
// `dst` pages of another (the transfer a disaggregated deployment performs).
void CopyKv(const KvPagePool& from, absl::Span<const int32_t> src, KvPagePool* to,
            absl::Span<const int32_t> dst, int tokens) {
  const KvLayout& l = from.layout();
  const size_t row = l.token_floats();
  for (int layer = 0; layer < l.num_layers; ++layer) {
    for (bool v : {false, true}) {
      const float* s = v ? from.v_cache(layer) : from.k_cache(layer);
      float* d = v ? to->v_cache(layer) : to->k_cache(layer);
      for (int t = 0; t < tokens; ++t) {
        const size_t slot = t % l.page_tokens;
        std::memcpy(d + (size_t(dst[t / l.page_tokens]) * l.page_tokens + slot) * row,
                    s + (size_t(src[t / l.page_tokens]) * l.page_tokens + slot) * row,
                    row * sizeof(float));
      }
    }
  }
}

std::vector<int32_t> GenerateAlone(const std::vector<int32_t>& prompt, int max_tokens) {
  auto e = MakeEngine();
  uint64_t id = *e->Submit(prompt, Greedy(max_tokens));
  return RunToCompletion(e.get())[id].tokens;
}

TEST(Engine, PrefillElsewhereThenDecodeMatchesOneEngine) {
  const int kChunk = EngineOptions().chunk_tokens;  // 128
  std::vector<std::vector<int32_t>> prompts = {Tokens(300, 20), Tokens(2 * kChunk, 21),
                                               Tokens(200, 22)};
  auto d = MakeEngine();
  const int d_free = d->pool().free_pages();
  std::vector<uint64_t> ids;
  std::vector<int32_t> firsts;
  for (const auto& prompt : prompts) {
    const int n = int(prompt.size());
    const int num_chunks = (n + kChunk - 1) / kChunk;
    auto p = MakeEngine();
    ChunkLog log{&p->pool()};
    GenerationParams prefill = Greedy(1);
    prefill.on_prompt_chunk = log.Hook();
    uint64_t pid = *p->Submit(prompt, prefill);
    auto r = RunToCompletion(p.get());
    ASSERT_EQ(r[pid].tokens.size(), 1u);
    ASSERT_EQ(int(log.chunks.size()), num_chunks);
    for (int c = 0; c < num_chunks; ++c) {
      EXPECT_EQ(log.chunks[c], c);
      const int in_chunk = std::min(kChunk, n - c * kChunk);
      EXPECT_EQ(int(log.pages[c].size()), (in_chunk + 15) / 16) << "chunk " << c;
    }
    std::vector<int32_t> src = log.AllPages(num_chunks);
    auto dst = d->pool().Allocate(int(src.size()));
    ASSERT_TRUE(dst.ok());
    CopyKv(p->pool(), src, &d->pool(), dst->ids(), n);
    log.ReleaseAll();
    auto id = d->Submit(prompt, Greedy(12), PrefilledKv{*std::move(dst), n, r[pid].tokens[0]});
    ASSERT_TRUE(id.ok()) << id.status();
    ids.push_back(*id);
    firsts.push_back(r[pid].tokens[0]);
  }
  EXPECT_EQ(d->num_waiting(), 3);
  EXPECT_EQ(d->waiting_prompt_tokens(), 0);
  auto got = RunToCompletion(d.get());  // all three decode together
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::vector<int32_t> tokens = {firsts[i]};
    tokens.insert(tokens.end(), got[ids[i]].tokens.begin(), got[ids[i]].tokens.end());
    EXPECT_EQ(tokens, GenerateAlone(prompts[i], 12)) << "prompt " << i;
    EXPECT_EQ(got[ids[i]].finish, FinishReason::kLength);
    EXPECT_EQ(got[ids[i]].cached, int(prompts[i].size()));
  }
  // The prefilled full chunks entered D's prefix cache.
  EXPECT_EQ(d->prefix_cache().num_chunks(), 2 + 2 + 1);
  d->prefix_cache().Reclaim(1 << 30);
  EXPECT_EQ(d->pool().free_pages(), d_free);
}

TEST(Engine, PrefilledPrefixIsContinuedByTheEngine) {
  auto prompt = Tokens(300, 23);
  auto p = MakeEngine();
  ChunkLog log{&p->pool()};
  GenerationParams prefill = Greedy(1);
  prefill.on_prompt_chunk = log.Hook();
  p->Submit(prompt, prefill).IgnoreError();
  RunToCompletion(p.get());
  ASSERT_EQ(log.chunks.size(), 3u);

  auto d = MakeEngine();
  const int d_free = d->pool().free_pages();
  KvPages dst = *d->pool().Allocate(8);
  const std::vector<int32_t> dst_ids(dst.ids().begin(), dst.ids().end());
  CopyKv(p->pool(), log.pages[0], &d->pool(), dst_ids, 128);
  log.ReleaseAll();
  ChunkLog d_log{&d->pool()};
  GenerationParams params = Greedy(10);
  params.on_prompt_chunk = d_log.Hook();
  uint64_t id = *d->Submit(prompt, params, PrefilledKv{std::move(dst), 128, -1});
  EXPECT_EQ(d->waiting_prompt_tokens(), 300 - 128);
  auto got = RunToCompletion(d.get());
  EXPECT_EQ(got[id].tokens, GenerateAlone(prompt, 10));
  EXPECT_EQ(got[id].cached, 128);
  EXPECT_EQ(d_log.chunks, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(d_log.pages[0], dst_ids);
  d_log.ReleaseAll();
  d->prefix_cache().Reclaim(1 << 30);
  EXPECT_EQ(d->pool().free_pages(), d_free);
}

TEST(Engine, BadPrefilledRequestsAndCancelReleaseTheirPages) {
  auto e = MakeEngine();
  const int free_at_start = e->pool().free_pages();
  const int vocab = e->config().vocab_size;
  auto prompt = Tokens(40, 24);
  auto submit = [&](int pages, int tokens, int32_t next, GenerationParams params = Greedy(8)) {
    auto got = e->Submit(prompt, params, PrefilledKv{*e->pool().Allocate(pages), tokens, next});
    EXPECT_EQ(e->pool().free_pages(), free_at_start - (got.ok() ? pages : 0));
    return got.status().code();
  };
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(submit(1, 40, 7), kInvalid);       // 40 tokens need 3 pages
  EXPECT_EQ(submit(3, 32, -1), kInvalid);      // 32 tokens need 2 pages
  EXPECT_EQ(submit(4, 50, -1), kInvalid);      // more than the prompt
  EXPECT_EQ(submit(3, 40, vocab), kInvalid);   // next_token outside the vocabulary
  EXPECT_EQ(submit(3, 40, -1), kInvalid);      // whole prompt without next_token
  EXPECT_EQ(submit(2, 32, 7), kInvalid);       // next_token with part of the prompt
  EXPECT_EQ(submit(3, 40, 7, Greedy(1)), kInvalid);  // nothing left to generate
  GenerationParams stop = Greedy(8);
  stop.stop_tokens = {7};
  EXPECT_EQ(submit(3, 40, 7, stop), kInvalid);
  EXPECT_EQ(e->Submit({}, Greedy(8), PrefilledKv{*e->pool().Allocate(1), 1, -1}).status().code(),
            kInvalid);
  EXPECT_EQ(e->pool().free_pages(), free_at_start);

  // Cancelled while waiting: the pages it was handed go back.
  auto id = e->Submit(prompt, Greedy(8), PrefilledKv{*e->pool().Allocate(2), 32, -1});
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(e->num_waiting(), 1);
  EXPECT_EQ(e->num_running(), 0);
  EXPECT_EQ(e->waiting_prompt_tokens(), 8);
  e->Cancel(*id);
  auto r = RunToCompletion(e.get());
  EXPECT_EQ(r[*id].finish, FinishReason::kCancelled);
  EXPECT_EQ(e->num_waiting(), 0);
  EXPECT_EQ(e->pool().free_pages(), free_at_start);

  // Destroyed with a prefilled sequence waiting: released, nothing crashes.
  ASSERT_TRUE(e->Submit(prompt, Greedy(8), PrefilledKv{*e->pool().Allocate(3), 40, 7}).ok());
  e.reset();
}

TEST(Engine, PromptChunksFromThePrefixCacheAreReportedAtAdmission) {
  auto e = MakeEngine();
  auto shared = Tokens(300, 25);
  auto other = shared;
  other.resize(260);  // shares two full chunks
  auto tail = Tokens(30, 26);
  other.insert(other.end(), tail.begin(), tail.end());
  ChunkLog first{&e->pool()}, second{&e->pool()};
  GenerationParams p1 = Greedy(2), p2 = Greedy(2);
  p1.on_prompt_chunk = first.Hook();
  p2.on_prompt_chunk = second.Hook();
  e->Submit(shared, p1).IgnoreError();
  RunToCompletion(e.get());
  uint64_t id = *e->Submit(other, p2);
  auto r = RunToCompletion(e.get());
  EXPECT_EQ(r[id].cached, 256);
  EXPECT_EQ(first.chunks, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(second.chunks, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(second.pages[0], first.pages[0]);  // the cached pages themselves
  EXPECT_EQ(second.pages[1], first.pages[1]);
  EXPECT_NE(second.pages[2], first.pages[2]);
  EXPECT_EQ(second.pages[2].size(), 3u);  // 34 tokens
  first.ReleaseAll();
  second.ReleaseAll();
}

TEST(Engine, PromptChunksAreReportedOnceAcrossPreemption) {
  EngineOptions tight;
  tight.num_pages = 10;  // as in PreemptedSequenceIsRecomputedAndFinishesUnchanged
  tight.max_batch_tokens = 63;
  tight.chunk_tokens = 32;
  auto e = MakeEngine(tight);
  auto a = Tokens(30, 12), b = Tokens(120, 13);
  std::map<uint64_t, std::vector<int>> reported;
  auto params = [&reported](uint64_t* id, int max_tokens) {
    GenerationParams p = Greedy(max_tokens);
    p.on_prompt_chunk = [&reported, id](int c, KvPages) {
      reported[*id].push_back(c);
    };
    return p;
  };
  uint64_t ia = 0, ib = 0;
  ia = *e->Submit(a, params(&ia, 40));
  ib = *e->Submit(b, params(&ib, 4));
  auto got = RunToCompletion(e.get());
  EXPECT_GT(e->preemptions(), 0);
  EXPECT_EQ(reported[ia], (std::vector<int>{0}));
  EXPECT_EQ(reported[ib], (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(got[ia].tokens, GenerateAlone(a, 40));
  EXPECT_EQ(got[ib].tokens, GenerateAlone(b, 4));
}

}  // namespace
}  // namespace kvcast
