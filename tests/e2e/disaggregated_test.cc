// Multi-process tests of the disaggregated service: real kvcast-scheduler,
// -prefill, -decode and -relay processes on loopback (LocalCluster), a tiny
// random Llama, and the single-process Engine as the reference.
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <future>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "engine/engine.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kvcast/v1/generation.grpc.pb.h"
#include "tools/cluster/local_cluster.h"
#include "tools/cluster/metrics_scrape.h"
#include "tools/kvquality/evaluate.h"
#include "tools/tiny_model/tiny_model.h"

ABSL_FLAG(std::string, scheduler_bin, "", "");
ABSL_FLAG(std::string, prefill_bin, "", "");
ABSL_FLAG(std::string, decode_bin, "", "");
ABSL_FLAG(std::string, relay_bin, "", "");

namespace kvcast::cluster {
namespace {

constexpr int kPagesPerChunk = 128 / 16;

std::string TmpDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t != nullptr ? t : "/tmp";
}
std::string ModelDir() { return TmpDir() + "/tiny"; }
// Wider and deeper than the tiny model, with room for long prompts: its
// prefill of thousands of tokens takes seconds on two cores.
std::string WideModelDir() { return TmpDir() + "/wide"; }
TinyModelOptions WideModel() {
  TinyModelOptions o;
  o.hidden_size = 768;
  o.intermediate_size = 2048;
  o.num_layers = 8;
  o.num_heads = 12;
  o.num_kv_heads = 4;
  o.max_position_embeddings = 8192;
  return o;
}

std::vector<int32_t> Prompt(int n, int seed) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(10 + (i * 37 + seed * 101 + (i * i) % 17) % 490);
  return t;
}

// What one process running the whole model generates (greedy), on the
// workers' backend here: cpu-f32, whose logits move only by float rounding
// when the KV crosses the wire. (Q8 quantizes activations: a KV that went
// through a 16-bit track can flip an int8 rounding and, on this random
// model, a greedy pick some 20 tokens later.)
// With `logprobs`, each token's log-probabilities (top 3) too.
std::vector<int32_t> Reference(const std::vector<int32_t>& prompt, int max_tokens,
                               const std::string& model_dir = ModelDir(),
                               std::vector<TokenLogprob>* logprobs = nullptr) {
  EngineOptions options;
  options.kv_cache_bytes = 512ll << 20;
  options.kv_fp16_values = true;  // as the workers keep it (--kv_cache_precision)
  auto engine = Engine::Create(model_dir, options, NewCpuBackend(CpuWeights::kF32));
  EXPECT_TRUE(engine.ok()) << engine.status();
  GenerationParams p;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  p.logprobs = logprobs != nullptr;
  p.top_logprobs = logprobs != nullptr ? 3 : 0;
  uint64_t id = *(*engine)->Submit(prompt, p);
  std::vector<int32_t> out;
  while ((*engine)->HasWork()) {
    auto events = (*engine)->Step();
    EXPECT_TRUE(events.ok()) << events.status();
    for (const SequenceEvent& ev : *events) {
      if (ev.id != id || ev.token < 0) continue;
      out.push_back(ev.token);
      if (logprobs != nullptr && ev.logprob) logprobs->push_back(*ev.logprob);
    }
  }
  return out;
}

struct Result {
  grpc::Status status;
  std::vector<int32_t> tokens;
  std::vector<v1::TokenLogprob> logprobs;  // with top_logprobs >= 0
  v1::Final final;
};

std::unique_ptr<v1::Generation::Stub> StubOf(const std::string& scheduler) {
  return v1::Generation::NewStub(grpc::CreateChannel(scheduler, grpc::InsecureChannelCredentials()));
}

// A greedy request for `prompt` that ignores EOS.
v1::GenerateRequest GreedyRequest(const std::vector<int32_t>& prompt, int max_tokens) {
  v1::GenerateRequest req;
  *req.mutable_token_ids()->mutable_ids() = {prompt.begin(), prompt.end()};
  req.set_max_tokens(max_tokens);
  req.set_ignore_eos(true);
  return req;
}

// Streams one greedy request; `on_delta` sees the token count so far. With
// top_logprobs >= 0 it asks for logprobs.
Result Generate(const std::string& scheduler, const std::vector<int32_t>& prompt, int max_tokens,
                std::function<void(int)> on_delta = nullptr, int top_logprobs = -1) {
  auto stub = StubOf(scheduler);
  v1::GenerateRequest req = GreedyRequest(prompt, max_tokens);
  if (top_logprobs >= 0) {
    req.mutable_sampling()->set_logprobs(true);
    req.mutable_sampling()->set_top_logprobs(top_logprobs);
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto reader = stub->Generate(&ctx, req);
  Result r;
  v1::GenerateResponse resp;
  while (reader->Read(&resp)) {
    if (resp.has_delta()) {
      r.tokens.insert(r.tokens.end(), resp.delta().token_ids().begin(),
                      resp.delta().token_ids().end());
      r.logprobs.insert(r.logprobs.end(), resp.delta().logprobs().begin(),
                        resp.delta().logprobs().end());
      if (on_delta) on_delta(int(r.tokens.size()));
    } else {
      r.final = resp.final();
    }
  }
  r.status = reader->Finish();
  return r;
}

double Metric(const Process& p, const std::string& name, const Labels& labels = {}) {
  auto text = HttpGet(p.metrics_address, "/metrics");
  if (!text.ok()) return -1;
  auto v = ScrapeMetric(*text, name, labels);
  return v.ok() ? *v : -1;
}

// Pages at rest are held only by the prefix cache: every request's pages
// came back. Polls briefly (publishers retain prompts for --retain_s).
void ExpectNoPagesLeaked(const Process& p) {
  double used = 0, cached = 0;
  for (int i = 0; i < 100; ++i) {
    used = Metric(p, "kvcast_kv_pages_used");
    cached = Metric(p, "kvcast_prefix_cache_chunks") * kPagesPerChunk;
    if (used >= 0 && used == cached) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ADD_FAILURE() << p.name << ": " << used << " pages in use, " << cached
                << " held by the prefix cache";
}

class DisaggregatedTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::Status s = WriteTinyModel(TinyModelOptions{}, ModelDir());
    ASSERT_TRUE(s.ok()) << s;
    s = WriteTinyModel(WideModel(), WideModelDir());
    ASSERT_TRUE(s.ok()) << s;
  }
  // A failed test prints the end of every process's log: a CI run shows
  // only the test's output.
  void TearDown() override {
    if (!HasFailure()) return;
    for (const auto& c : clusters_) {
      for (const Process* p : c->processes()) {
        std::printf("---- %s log tail ----\n%s\n", p->name.c_str(),
                    LocalCluster::LogTail(*p, 4000).c_str());
      }
    }
  }

  // Prompts of 40 and 300 tokens (seeds `seed` + n) through cluster `c`,
  // whose scheduler names a coded track (ac, xl): each answered, its KV over
  // MoQT in fewer bytes than fp16's, nothing recomputed, no page leaked;
  // then `c` stops.
  void ExpectCodedTrackCarriesTheKv(LocalCluster* c, int seed) {
    const TinyModelOptions m;
    const int fp16_token_bytes =
        m.num_layers * 2 * m.num_kv_heads * (m.hidden_size / m.num_heads) * 2;
    for (int n : {40, 300}) {
      Result r = Generate(c->scheduler_address(), Prompt(n, seed + n), 12);
      ASSERT_TRUE(r.status.ok()) << r.status.error_message();
      EXPECT_EQ(r.final.usage().generated_tokens(), 12);
      EXPECT_GT(r.final.timings().transfer_bytes(), 0) << "the KV went over MoQT";
      EXPECT_LT(r.final.timings().transfer_bytes(), n * fp16_token_bytes) << "prompt of " << n;
    }
    const Process& decode = c->worker(Role::kDecode, 0);
    EXPECT_EQ(Metric(decode, "kvcast_kv_transfer_failures_total"), 0) << "nothing recomputed";
    ExpectNoPagesLeaked(decode);
    EXPECT_TRUE(c->Stop().ok());
  }

  // The cluster lives until the test ends (after TearDown).
  LocalCluster* Start(const std::string& name, int prefill, int decode,
                                      std::vector<std::string> scheduler_flags = {},
                                      std::vector<std::string> decode_flags = {},
                                      int schedulers = 1,
                                      const std::string& model_dir = ModelDir(),
                                      std::vector<std::string> prefill_flags = {}) {
    ClusterOptions o;
    o.num_schedulers = schedulers;
    o.model_dir = model_dir;
    o.work_dir = TmpDir() + "/" + name;
    o.num_prefill = prefill;
    o.num_decode = decode;
    o.kv_cache_mb = 64;
    o.backend = "cpu-f32";
    o.scheduler_bin = absl::GetFlag(FLAGS_scheduler_bin);
    o.prefill_bin = absl::GetFlag(FLAGS_prefill_bin);
    o.decode_bin = absl::GetFlag(FLAGS_decode_bin);
    o.relay_bin = absl::GetFlag(FLAGS_relay_bin);
    o.prefill_flags = {"--retain_s=1"};
    o.prefill_flags.insert(o.prefill_flags.end(), prefill_flags.begin(), prefill_flags.end());
    o.decode_flags = std::move(decode_flags);
    o.scheduler_flags = {"--lease_s=3"};
    o.scheduler_flags.insert(o.scheduler_flags.end(), scheduler_flags.begin(),
                             scheduler_flags.end());
    auto c = LocalCluster::Start(o);
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) return nullptr;
    clusters_.push_back(std::move(*c));
    return clusters_.back().get();
  }

 private:
  std::vector<std::unique_ptr<LocalCluster>> clusters_;
};

TEST_F(DisaggregatedTest, GreedyOutputEqualsOneProcessAndPrefixesAreReused) {
  auto c = Start("equal", 1, 1);
  ASSERT_NE(c, nullptr);
  // Lengths around the 128-token chunk: short, exactly one chunk, several
  // chunks with a partial last one, exactly four chunks.
  for (int n : {40, 128, 300, 512}) {
    auto prompt = Prompt(n, n);
    Result r = Generate(c->scheduler_address(), prompt, 24);
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.tokens, Reference(prompt, 24)) << "prompt of " << n;
    EXPECT_EQ(r.final.usage().prompt_tokens(), n);
    EXPECT_EQ(r.final.usage().generated_tokens(), 24);
    EXPECT_GT(r.final.timings().transfer_bytes(), 0) << "the KV went over MoQT";
    EXPECT_EQ(r.final.retries(), 0);
  }
  // Concurrent requests batch together on both workers.
  std::vector<std::future<Result>> futures;
  for (int i = 0; i < 3; ++i) {
    futures.push_back(std::async(std::launch::async, [&, i] {
      return Generate(c->scheduler_address(), Prompt(150 + 60 * i, 7 + i), 20);
    }));
  }
  for (int i = 0; i < 3; ++i) {
    Result r = futures[i].get();
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.tokens, Reference(Prompt(150 + 60 * i, 7 + i), 20));
  }

  // Prefix reuse: a prompt sharing 2 full chunks (256 tokens) with an earlier
  // one. The prefill must compute only the rest.
  const Process& prefill = c->worker(Role::kPrefill, 0);
  auto first = Prompt(300, 42);
  ASSERT_TRUE(Generate(c->scheduler_address(), first, 4).status.ok());
  auto second = first;
  second.resize(260);
  for (int i = 0; i < 50; ++i) second.push_back(20 + i);
  const double computed_before =
      Metric(prefill, "kvcast_prefill_tokens_total", {{"origin", "computed"}});
  Result r = Generate(c->scheduler_address(), second, 16);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.tokens, Reference(second, 16));
  EXPECT_EQ(r.final.usage().cached_prompt_tokens(), 256);
  EXPECT_EQ(Metric(prefill, "kvcast_prefill_tokens_total", {{"origin", "computed"}}) -
                computed_before,
            310 - 256);
  // The decode worker held those chunks too: only the rest travelled.
  EXPECT_LT(r.final.timings().transfer_bytes(), 310 * 1024);
  ExpectNoPagesLeaked(prefill);
  ExpectNoPagesLeaked(c->worker(Role::kDecode, 0));
  EXPECT_TRUE(c->Stop().ok());
}

TEST_F(DisaggregatedTest, KilledDecodeWorkerMidStreamIsReplaced) {
  auto c = Start("kill_decode", 1, 2);
  ASSERT_NE(c, nullptr);
  auto prompt = Prompt(200, 3);
  const int max_tokens = 1500;
  int victim = -1;
  Result r = Generate(c->scheduler_address(), prompt, max_tokens, [&](int n) {
    if (victim >= 0 || n < 20) return;
    // The decode worker running the sequence is the victim.
    for (int i = 0; i < 2; ++i) {
      if (Metric(c->worker(Role::kDecode, i), "kvcast_running") == 1) victim = i;
    }
    if (victim >= 0) {
      ASSERT_TRUE(c->Kill(Role::kDecode, victim, SIGKILL).ok());
    }
  });
  ASSERT_GE(victim, 0) << "the request finished before a worker could be killed";
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_GE(r.final.retries(), 1);
  EXPECT_EQ(int(r.tokens.size()), max_tokens);
  EXPECT_EQ(r.tokens, Reference(prompt, max_tokens));
  const Process& survivor = c->worker(Role::kDecode, 1 - victim);
  EXPECT_EQ(r.final.decode_worker().substr(0, survivor.grpc_address.size()),
            survivor.grpc_address);
  ExpectNoPagesLeaked(survivor);
  ExpectNoPagesLeaked(c->worker(Role::kPrefill, 0));
}

// SIGSTOP of the decode worker mid-stream: the scheduler notices that no
// token came for its stall bound (--decode_stall_s 1 here) and resumes the
// request on the other decode worker; the client's stream has every token
// once, in order (the frozen worker's late ones are dropped when it wakes).
TEST_F(DisaggregatedTest, FrozenDecodeWorkerMidStreamIsReplaced) {
  auto c = Start("freeze_decode", 1, 2, {"--decode_stall_s=1"});
  ASSERT_NE(c, nullptr);
  auto prompt = Prompt(200, 4);
  const int max_tokens = 600;
  int victim = -1;
  absl::Time frozen;
  Result r = Generate(c->scheduler_address(), prompt, max_tokens, [&](int n) {
    if (victim >= 0 || n < 20) return;
    for (int i = 0; i < 2; ++i) {
      if (Metric(c->worker(Role::kDecode, i), "kvcast_running") == 1) victim = i;
    }
    if (victim >= 0) {
      ASSERT_TRUE(c->Kill(Role::kDecode, victim, SIGSTOP).ok());
      frozen = absl::Now();
    }
  });
  const absl::Duration took = absl::Now() - frozen;
  ASSERT_GE(victim, 0) << "the request finished before a worker could be frozen";
  ASSERT_TRUE(c->Kill(Role::kDecode, victim, SIGCONT).ok());
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_GE(r.final.retries(), 1);
  EXPECT_EQ(r.tokens, Reference(prompt, max_tokens));  // none missing, none twice
  EXPECT_LT(took, absl::Seconds(15));
  const Process& survivor = c->worker(Role::kDecode, 1 - victim);
  EXPECT_EQ(r.final.decode_worker().substr(0, survivor.grpc_address.size()),
            survivor.grpc_address);
  EXPECT_GE(Metric(c->scheduler(), "kvcast_stalls_total", {{"phase", "decode"}}), 1);
  // Woken up, the frozen worker finds its call cancelled and frees it all.
  ExpectNoPagesLeaked(c->worker(Role::kDecode, victim));
  ExpectNoPagesLeaked(survivor);
}

// A long prompt as the very first request of a fresh cluster, with stall
// bounds of 1 s, far below its prefill: the workers stream progress and
// keepalives while they compute, so the scheduler bounds their silence,
// not the prompt's length, and the request succeeds at the first attempt,
// exact. (With bounds on the whole call, as before, the prefill was given up
// after its 1 s three times, then decode's own compute after 1 s: a 503.)
TEST_F(DisaggregatedTest, LongFirstPromptOnAFreshClusterIsNotAStall) {
  auto c = Start("long_first", 1, 1,
                 {"--prefill_stall_s=1", "--decode_stall_s=1", "--decode_first_message_s=1"}, {},
                 1, WideModelDir());
  ASSERT_NE(c, nullptr);
  auto prompt = Prompt(6000, 5);
  const absl::Time start = absl::Now();
  Result r = Generate(c->scheduler_address(), prompt, 6);
  const absl::Duration took = absl::Now() - start;
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.final.retries(), 0);
  EXPECT_FALSE(r.final.prefill_worker().empty());  // computed by the prefill worker
  EXPECT_GT(took, absl::Seconds(2)) << "the prompt did not outlast the stall bounds";
  EXPECT_EQ(Metric(c->scheduler(), "kvcast_stalls_total", {{"phase", "prefill"}}), 0);
  EXPECT_EQ(Metric(c->scheduler(), "kvcast_stalls_total", {{"phase", "decode"}}), 0);
  EXPECT_EQ(r.tokens, Reference(prompt, 6, WideModelDir()));
  ExpectNoPagesLeaked(c->worker(Role::kDecode, 0));
}

// The same prompt computed by the decode worker itself (PD fusion up to
// 8192 tokens), in one pass of seconds (--max_batch_tokens 8192, past the
// 2 s bound):
// its keepalives follow the model's layers, not only its passes.
TEST_F(DisaggregatedTest, LongPromptComputedByTheDecodeWorkerIsNotAStall) {
  auto c = Start("long_decode", 1, 1,
                 {"--decode_stall_s=2", "--decode_first_message_s=2", "--pd_fusion_tokens=8192"},
                 {"--max_batch_tokens=8192"}, 1, WideModelDir());
  ASSERT_NE(c, nullptr);
  auto prompt = Prompt(6000, 6);
  const absl::Time start = absl::Now();
  Result r = Generate(c->scheduler_address(), prompt, 6);
  const absl::Duration took = absl::Now() - start;
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.final.retries(), 0);
  EXPECT_TRUE(r.final.prefill_worker().empty()) << "not fused";
  EXPECT_GT(took, absl::Seconds(2)) << "the prompt did not outlast the stall bound";
  EXPECT_EQ(Metric(c->scheduler(), "kvcast_stalls_total", {{"phase", "decode"}}), 0);
  EXPECT_EQ(r.tokens, Reference(prompt, 6, WideModelDir()));
  ExpectNoPagesLeaked(c->worker(Role::kDecode, 0));
}

// A sequence the decode worker's whole page pool cannot hold (1 MiB: 128
// tokens of the wide model; 100 prompt + 60 generated) fails at once with
// the engine's typed code, OUT_OF_RANGE naming the pool, instead of being
// retried on every decode worker and given up as UNAVAILABLE.
TEST_F(DisaggregatedTest, ASequenceNoDecodePoolCanHoldFailsOnceWithItsCode) {
  auto c = Start("pool_too_small", 1, 1, {}, {"--kv_cache_mb=1"}, 1, WideModelDir());
  ASSERT_NE(c, nullptr);
  Result r = Generate(c->scheduler_address(), Prompt(100, 12), 60);
  EXPECT_EQ(r.status.error_code(), grpc::OUT_OF_RANGE) << r.status.error_message();
  EXPECT_NE(r.status.error_message().find("the page pool holds 8"), std::string::npos)
      << r.status.error_message();
  EXPECT_EQ(Metric(c->scheduler(), "kvcast_retries_total"), 0);
  ExpectNoPagesLeaked(c->worker(Role::kDecode, 0));
}

// The gauges the Gateway API Inference Extension's endpoint picker (and
// vLLM dashboards) read, under vLLM's names: the decode worker running a
// request shows it, the scheduler's sums over heartbeats follow, the KV
// usage is a fraction of the pool, and all is back at 0 after.
TEST_F(DisaggregatedTest, GatewayGaugesUnderVllmNames) {
  auto c = Start("vllm_gauges", 1, 1, {}, {}, 1, WideModelDir());
  ASSERT_NE(c, nullptr);
  const Labels model{{"model_name", "wide"}};
  const Process& decode = c->worker(Role::kDecode, 0);
  bool worker_running = false, scheduler_running = false;
  double usage = -1;
  Result r = Generate(c->scheduler_address(), Prompt(100, 21), 1500, [&](int n) {
    if (n % 100 != 0) return;
    worker_running |= Metric(decode, "vllm:num_requests_running", model) == 1;
    scheduler_running |= Metric(c->scheduler(), "vllm:num_requests_running") >= 1;
    usage = std::max(usage, Metric(decode, "vllm:kv_cache_usage_perc", model));
  });
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_TRUE(worker_running);
  EXPECT_TRUE(scheduler_running) << "the scheduler's sum never showed the request";
  EXPECT_GT(usage, 0);
  EXPECT_LE(usage, 1);
  EXPECT_EQ(Metric(decode, "vllm:num_requests_waiting", model), 0);
  double after = -1;
  for (int i = 0; i < 50 && after != 0; ++i) {  // the next heartbeats
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    after = Metric(c->scheduler(), "vllm:num_requests_running");
  }
  EXPECT_EQ(after, 0);
  EXPECT_EQ(Metric(decode, "vllm:num_requests_running", model), 0);
}

// A client that cancels mid-stream stops the work it started: the
// scheduler cancels its worker calls, the decode worker's handler (asleep
// on its CallWait, not polling) sees the cancellation and cancels the
// sequence in the engine, whose pages come back.
TEST_F(DisaggregatedTest, AClientCancellingMidStreamStopsTheDecodeWorkersSequence) {
  auto c = Start("client_cancel", 1, 1, {}, {}, 1, WideModelDir());
  ASSERT_NE(c, nullptr);
  const Labels model{{"model_name", "wide"}};
  const Process& decode = c->worker(Role::kDecode, 0);
  auto stub = StubOf(c->scheduler_address());
  grpc::ClientContext ctx;
  auto reader = stub->Generate(&ctx, GreedyRequest(Prompt(300, 5), 4000));
  v1::GenerateResponse resp;
  int tokens = 0;
  while (tokens < 30 && reader->Read(&resp)) tokens += resp.delta().token_ids_size();
  ASSERT_GE(tokens, 30);
  EXPECT_EQ(Metric(decode, "vllm:num_requests_running", model), 1);
  const auto cancelled_at = std::chrono::steady_clock::now();
  ctx.TryCancel();
  EXPECT_EQ(reader->Finish().error_code(), grpc::CANCELLED);
  double running = -1;
  while (running != 0 && std::chrono::steady_clock::now() - cancelled_at < std::chrono::seconds(3)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    running = Metric(decode, "vllm:num_requests_running", model);
  }
  EXPECT_EQ(running, 0) << "the decode worker still runs the cancelled sequence";
  // It stopped far short of max_tokens (4,000 tokens take the wide model
  // tens of seconds on this CPU).
  EXPECT_LT(Metric(decode, "kvcast_decode_tokens_total"), 2000);
  EXPECT_EQ(Metric(decode, "kvcast_decode_requests_total", {{"result", "error"}}), 1);
  ExpectNoPagesLeaked(decode);
}

// The same while the decode worker computes a long prompt itself (fused):
// no token is written that could fail, so only its handler's wait sees the
// cancellation; the prompt (seconds of compute) stops within a chunk.
TEST_F(DisaggregatedTest, AClientCancellingDuringALongFusedPromptStopsItsCompute) {
  auto c = Start("cancel_prompt", 1, 1, {"--pd_fusion_tokens=8192"}, {}, 1, WideModelDir());
  ASSERT_NE(c, nullptr);
  const Labels model{{"model_name", "wide"}};
  const Process& decode = c->worker(Role::kDecode, 0);
  auto stub = StubOf(c->scheduler_address());
  const v1::GenerateRequest req = GreedyRequest(Prompt(6000, 7), 4);
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader;
  std::thread call([&] {
    reader = stub->Generate(&ctx, req);
    v1::GenerateResponse resp;
    while (reader->Read(&resp)) {
    }
  });
  // Cancelled once the decode worker is computing it.
  auto sequences = [&] {
    return Metric(decode, "vllm:num_requests_running", model) +
           Metric(decode, "vllm:num_requests_waiting", model);
  };
  double busy = 0;
  for (int i = 0; i < 200 && busy == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    busy = sequences();
  }
  ASSERT_GT(busy, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto cancelled_at = std::chrono::steady_clock::now();
  ctx.TryCancel();
  call.join();
  EXPECT_EQ(reader->Finish().error_code(), grpc::CANCELLED);
  while (busy != 0 && std::chrono::steady_clock::now() - cancelled_at < std::chrono::seconds(5)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    busy = sequences();
  }
  const double took_ms = std::chrono::duration<double, std::milli>(
                             std::chrono::steady_clock::now() - cancelled_at).count();
  EXPECT_EQ(busy, 0);
  EXPECT_LT(took_ms, 1000) << "the prompt's compute went on after the cancellation";
  EXPECT_EQ(Metric(decode, "kvcast_decode_tokens_total"), 0);
  ExpectNoPagesLeaked(decode);
}

// Both prefill workers frozen (SIGSTOP): each prefill call is cancelled
// after its stall bound (--prefill_stall_s 1 + 10 x the time per token) and
// retried elsewhere; after --max_attempts the decode worker computes the
// prompt. The request ends, exact, in seconds instead of hanging.
TEST_F(DisaggregatedTest, FrozenPrefillWorkersAreGivenUpOn) {
  auto c = Start("freeze_prefill", 2, 1, {"--prefill_stall_s=1"});
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(Generate(c->scheduler_address(), Prompt(100, 1), 2).status.ok());  // warm
  ASSERT_TRUE(c->Kill(Role::kPrefill, 0, SIGSTOP).ok());
  ASSERT_TRUE(c->Kill(Role::kPrefill, 1, SIGSTOP).ok());
  auto prompt = Prompt(230, 8);
  const absl::Time start = absl::Now();
  Result r = Generate(c->scheduler_address(), prompt, 12);
  const absl::Duration took = absl::Now() - start;
  ASSERT_TRUE(c->Kill(Role::kPrefill, 0, SIGCONT).ok());
  ASSERT_TRUE(c->Kill(Role::kPrefill, 1, SIGCONT).ok());
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.tokens, Reference(prompt, 12));
  EXPECT_GE(r.final.retries(), 1);
  EXPECT_LT(took, absl::Seconds(12));
  EXPECT_GE(Metric(c->scheduler(), "kvcast_stalls_total", {{"phase", "prefill"}}), 1);
  ExpectNoPagesLeaked(c->worker(Role::kDecode, 0));
}

TEST_F(DisaggregatedTest, KilledPrefillWorkerIsRetriedElsewhere) {
  auto c = Start("kill_prefill", 2, 1);
  ASSERT_NE(c, nullptr);
  // Two concurrent requests are spread over both prefill workers (the
  // router counts dispatched work): this opens the scheduler's connections.
  auto both = [&](int seed) {
    std::vector<std::future<Result>> futures;
    for (int i = 0; i < 2; ++i) {
      futures.push_back(std::async(std::launch::async, [&, i] {
        return Generate(c->scheduler_address(), Prompt(400, seed + i), 12);
      }));
    }
    return futures;
  };
  for (auto& f : both(50)) ASSERT_TRUE(f.get().status.ok());
  // Freeze both prefill workers, send two requests (one per worker), kill
  // worker 0 with its request in flight, thaw worker 1.
  ASSERT_TRUE(c->Kill(Role::kPrefill, 0, SIGSTOP).ok());
  ASSERT_TRUE(c->Kill(Role::kPrefill, 1, SIGSTOP).ok());
  auto futures = both(60);
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  ASSERT_TRUE(c->Kill(Role::kPrefill, 0, SIGKILL).ok());
  ASSERT_TRUE(c->Kill(Role::kPrefill, 1, SIGCONT).ok());
  int retries = 0;
  const std::string survivor = c->worker(Role::kPrefill, 1).grpc_address;
  for (int i = 0; i < 2; ++i) {
    Result r = futures[i].get();
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.tokens, Reference(Prompt(400, 60 + i), 12));
    EXPECT_EQ(r.final.prefill_worker().substr(0, survivor.size()), survivor);
    retries += r.final.retries();
  }
  EXPECT_GE(retries, 1) << "one request was on the killed worker";
  ExpectNoPagesLeaked(c->worker(Role::kPrefill, 1));
  ExpectNoPagesLeaked(c->worker(Role::kDecode, 0));
}

// CPU ticks (user + system) the process has used, from /proc/PID/stat.
long CpuTicks(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(f, line);
  // Fields after the ")" that ends the command name: state is field 3,
  // utime 14 and stime 15.
  std::istringstream rest(line.substr(line.rfind(')') + 2));
  std::string field;
  long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stol(field);
    if (i == 15) stime = std::stol(field);
  }
  return utime + stime;
}

// A prefill worker killed (SIGKILL) partway through a long prompt: the retry
// on the other prefill worker fetches the chunks the first attempt had
// published (they reached the relay's cache on their way to the decode
// worker) instead of computing them again, and the output is exact. The
// scheduler may ask for a chunk more than the relay got whole (the victim
// reported it done as it was sent): the relay answers with what it holds
// and the fetch keeps the leading whole chunks.
TEST_F(DisaggregatedTest, RetriedLongPromptFetchesWhatItsFirstAttemptPublished) {
  auto c = Start("retry_fetch", 2, 1, {}, {}, 1, WideModelDir());
  ASSERT_NE(c, nullptr);
  ASSERT_NE(c->relay(), nullptr);
  const auto prompt = Prompt(6000, 13);
  // One 128-token chunk of fp16 KV: K and V x 8 layers x 4 KV heads x 64 x 2 bytes.
  const double chunk_bytes = 128.0 * 2 * 8 * 4 * 64 * 2;
  auto pending = std::async(std::launch::async,
                            [&] { return Generate(c->scheduler_address(), prompt, 4); });
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (Metric(*c->relay(), "kvcast_relay_cache_bytes") < 8 * chunk_bytes &&
         absl::Now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // The prefill worker computing it is the one using the CPU.
  const long a0 = CpuTicks(c->worker(Role::kPrefill, 0).pid);
  const long a1 = CpuTicks(c->worker(Role::kPrefill, 1).pid);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const int victim = CpuTicks(c->worker(Role::kPrefill, 0).pid) - a0 >=
                             CpuTicks(c->worker(Role::kPrefill, 1).pid) - a1
                         ? 0
                         : 1;
  ASSERT_TRUE(c->Kill(Role::kPrefill, victim, SIGKILL).ok());
  Result r = pending.get();
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.tokens, Reference(prompt, 4, WideModelDir()));
  EXPECT_GE(r.final.retries(), 1);
  const Process& survivor = c->worker(Role::kPrefill, 1 - victim);
  EXPECT_EQ(r.final.prefill_worker().substr(0, survivor.grpc_address.size()),
            survivor.grpc_address);
  // At least the 8 chunks the relay held, less the one left out as possibly
  // cut short.
  EXPECT_GE(Metric(survivor, "kvcast_prefill_tokens_total", {{"origin", "fetched"}}), 7 * 128);
  EXPECT_GE(r.final.usage().cached_prompt_tokens(), 7 * 128);
  EXPECT_EQ(Metric(survivor, "kvcast_kv_transfer_failures_total"), 0);
  // The decode worker takes the retry's KV from the survivor (the relay
  // drops the dead publisher at its first packet to it, ICMP), neither
  // waiting for it nor computing the prompt itself.
  EXPECT_EQ(Metric(c->worker(Role::kDecode, 0), "kvcast_kv_transfer_failures_total"), 0);
  EXPECT_GT(r.final.timings().transfer_bytes(), 0);
  ExpectNoPagesLeaked(survivor);
  ExpectNoPagesLeaked(c->worker(Role::kDecode, 0));
}

// kill -9 of the relay: the workers notice at once (ICMP port unreachable
// on their next packet) and take the KV straight from the prefill worker's
// MoQT port, so requests neither wait for KV that never lands (10 s before)
// nor recompute it.
TEST_F(DisaggregatedTest, KilledRelayKvComesFromThePublisherAtOnce) {
  auto c = Start("kill_relay", 1, 1);
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(Generate(c->scheduler_address(), Prompt(200, 3), 4).status.ok());
  const Process& decode = c->worker(Role::kDecode, 0);
  auto relay_connected = [&](double want) {
    for (int i = 0; i < 40 && Metric(decode, "kvcast_relay_connected") != want; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return Metric(decode, "kvcast_relay_connected");
  };
  EXPECT_EQ(relay_connected(1), 1);
  ASSERT_TRUE(c->Kill(Role::kRelay, 0, SIGKILL).ok());
  for (int i = 0; i < 3; ++i) {
    auto prompt = Prompt(260, 50 + i);
    const absl::Time start = absl::Now();
    Result r = Generate(c->scheduler_address(), prompt, 8);
    const absl::Duration took = absl::Now() - start;
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.tokens, Reference(prompt, 8));
    EXPECT_GT(r.final.timings().transfer_bytes(), 0) << "request " << i << " recomputed";
    EXPECT_LT(took, absl::Seconds(3)) << "request " << i;
    EXPECT_EQ(r.final.retries(), 0);
  }
  EXPECT_EQ(relay_connected(0), 0);
  ExpectNoPagesLeaked(decode);
}

// The arithmetic-coded tracks through the services: the decode worker
// subscribes to "ac-lo" (--kv_compression), the prefill worker encodes whole
// groups on demand, the relay forwards them, the decode worker lands whole
// groups; nothing is recomputed and fewer bytes travel than fp16's.
TEST_F(DisaggregatedTest, AcTrackCarriesTheKvEndToEnd) {
  auto c = Start("ac", 1, 1, {"--kv_compression=ac-lo"});
  ASSERT_NE(c, nullptr);
  ExpectCodedTrackCarriesTheKv(c, 70);
}

// The cross-layer transform track through the services: both workers
// hold the model's KV basis (--kv_basis, fitted here on the tiny model's
// KV), the decode worker subscribes to "xl", the prefill worker codes
// whole groups over the basis, the decode worker lands them; nothing is
// recomputed and fewer bytes travel than fp16's. A decode worker without
// the basis cannot land the track and computes the prompt itself.
TEST_F(DisaggregatedTest, XlTrackCarriesTheKvEndToEndWithTheBasis) {
  const std::string basis_path = TmpDir() + "/tiny.kvb";
  {
    auto checkpoint = Checkpoint::Open(ModelDir());
    ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
    auto backend = NewCpuBackend();
    std::vector<std::vector<int32_t>> ids;
    for (int w = 0; w < 6; ++w) ids.push_back(Prompt(160, 500 + w));
    std::vector<absl::Span<const int32_t>> windows(ids.begin(), ids.end());
    kvquality::EvalOptions o;
    o.prefix_tokens = 128;
    o.continuation_tokens = 32;
    auto basis = kvquality::FitKvBasis(**checkpoint, backend.get(), windows, o, 2);
    ASSERT_TRUE(basis.ok()) << basis.status();
    ASSERT_TRUE(basis->Save(basis_path).ok());
  }
  const std::string flag = "--kv_basis=" + basis_path;
  auto c = Start("xl", 1, 1, {"--kv_compression=xl"}, {flag}, 1, ModelDir(), {flag});
  ASSERT_NE(c, nullptr);
  ExpectCodedTrackCarriesTheKv(c, 80);

  auto without = Start("xl-nobasis", 1, 1, {"--kv_compression=xl"}, {}, 1, ModelDir(), {flag});
  ASSERT_NE(without, nullptr);
  Result r = Generate(without->scheduler_address(), Prompt(300, 81), 12);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.final.usage().generated_tokens(), 12);
  EXPECT_GT(Metric(without->worker(Role::kDecode, 0), "kvcast_kv_transfer_failures_total"), 0);
  EXPECT_TRUE(without->Stop().ok());
}

// A rotated fixed-size track through the services (--kv_compression=
// int4-rot): every prompt token lands from the track, at int4's bytes.
TEST_F(DisaggregatedTest, RotatedInt4TrackCarriesTheKvEndToEnd) {
  auto c = Start("int4rot", 1, 1, {"--kv_compression=int4-rot"});
  ASSERT_NE(c, nullptr);
  const TinyModelOptions m;
  const int head_dim = m.hidden_size / m.num_heads, values = m.num_kv_heads * head_dim;
  const int block = head_dim % 32 == 0 ? 32 : head_dim;  // wire format v1's int4 blocks
  const int token_bytes = m.num_layers * 2 * (values / 2 + 2 * (values / block));
  const int n = 300;
  Result r = Generate(c->scheduler_address(), Prompt(n, 91), 12);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.final.usage().generated_tokens(), 12);
  EXPECT_EQ(r.final.timings().transfer_bytes(), uint64_t(n) * token_bytes);
  const Process& decode = c->worker(Role::kDecode, 0);
  EXPECT_EQ(Metric(decode, "kvcast_kv_transfer_failures_total"), 0) << "nothing recomputed";
  ExpectNoPagesLeaked(decode);
  EXPECT_TRUE(c->Stop().ok());
}

// Adaptive bitrate on loopback: with a generous budget every group comes
// in the ladder's best track (fp16: output equals one process); with a
// budget no group can meet, the decode worker computes the KV itself.
TEST_F(DisaggregatedTest, AdaptiveBitrateTakesTheBestTrackThatFitsOrComputes) {
  auto c = Start("abr", 1, 1, {"--kv_compression=abr"});
  ASSERT_NE(c, nullptr);
  const Process& decode = c->worker(Role::kDecode, 0);
  auto prompt = Prompt(300, 5);
  Result r = Generate(c->scheduler_address(), prompt, 12);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.tokens, Reference(prompt, 12));
  EXPECT_EQ(Metric(decode, "kvcast_kv_abr_groups_total", {{"track", "fp16"}}), 3);
  EXPECT_EQ(Metric(decode, "kvcast_kv_abr_switches_total"), 0);
  EXPECT_GT(Metric(decode, "kvcast_kv_abr_goodput_bytes_per_second"), 0);
  EXPECT_TRUE(c->Stop().ok());

  // 1 us for the KV at an assumed 1 Mbit/s: not one group fits.
  auto d = Start("abr_tight", 1, 1, {"--kv_compression=abr"},
                 {"--kv_abr_budget_ms=0.001", "--kv_abr_initial_mbps=1"});
  ASSERT_NE(d, nullptr);
  r = Generate(d->scheduler_address(), prompt, 12);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.tokens, Reference(prompt, 12));
  EXPECT_EQ(r.final.timings().transfer_bytes(), 0);
  const Process& tight = d->worker(Role::kDecode, 0);
  EXPECT_EQ(Metric(tight, "kvcast_kv_abr_recomputed_groups_total"), 3);
  ExpectNoPagesLeaked(tight);
  EXPECT_TRUE(d->Stop().ok());
}

// The KV tier flags in real processes: a decode worker with host and disk
// tiers serves as usual, writes its cached chunks to disk when stopped, and
// a worker restarted on the directory finds them.
TEST_F(DisaggregatedTest, DiskTierChunksOutliveTheDecodeWorker) {
  const std::string dir = TmpDir() + "/decode_disk_tier";
  const std::vector<std::string> tiers = {"--kv_host_tier_mb=16", "--kv_disk_tier_dir=" + dir,
                                          "--kv_disk_tier_mb=64"};
  auto prompt = Prompt(300, 9);
  {
    auto c = Start("tiers", 1, 1, {}, tiers);
    ASSERT_NE(c, nullptr);
    Result r = Generate(c->scheduler_address(), prompt, 8);
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.tokens, Reference(prompt, 8));
    const Process& decode = c->worker(Role::kDecode, 0);
    EXPECT_EQ(Metric(decode, "kvcast_kv_disk_tier_chunks"), 0) << "nothing evicted yet";
    EXPECT_TRUE(c->Stop().ok());  // SIGTERM: the cached chunks go to disk
  }
  auto c = Start("tiers_again", 1, 1, {}, tiers);
  ASSERT_NE(c, nullptr);
  const Process& decode = c->worker(Role::kDecode, 0);
  EXPECT_GE(Metric(decode, "kvcast_kv_disk_tier_chunks"), 2) << "300 tokens: two full chunks";
  Result r = Generate(c->scheduler_address(), prompt, 8);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.tokens, Reference(prompt, 8));
  EXPECT_GE(Metric(decode, "kvcast_kv_disk_tier_hits"), 2) << "the restarted worker reused them";
  ExpectNoPagesLeaked(decode);
  EXPECT_TRUE(c->Stop().ok());
}

TEST_F(DisaggregatedTest, PdFusionRunsShortAndHeldPromptsOnTheDecodeWorker) {
  auto c = Start("fusion", 1, 1, {"--pd_fusion_tokens=64"});
  ASSERT_NE(c, nullptr);
  // 40 tokens: the decode worker computes them itself, nothing is handed off.
  auto shortp = Prompt(40, 3);
  Result r = Generate(c->scheduler_address(), shortp, 12);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.tokens, Reference(shortp, 12));
  EXPECT_EQ(r.final.prefill_worker(), "");
  EXPECT_EQ(r.final.timings().transfer_bytes(), 0);
  // 300 tokens: disaggregated; the decode worker keeps the 2 full chunks.
  auto first = Prompt(300, 5);
  r = Generate(c->scheduler_address(), first, 8);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_NE(r.final.prefill_worker(), "");
  // Once the scheduler heard of the decode worker's copy (a heartbeat), the
  // next turn of that conversation (24 new tokens) runs there alone.
  const Process& sched = c->scheduler();
  for (int i = 0; i < 100 && Metric(sched, "kvcast_prefix_index_chunks", {{"role", "decode"}}) < 2;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  auto next = first;
  next.resize(256);
  for (int i = 0; i < 24; ++i) next.push_back(30 + i);
  r = Generate(c->scheduler_address(), next, 10);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.tokens, Reference(next, 10));
  EXPECT_EQ(r.final.prefill_worker(), "");
  EXPECT_EQ(r.final.usage().cached_prompt_tokens(), 256);
  EXPECT_EQ(Metric(sched, "kvcast_fused_requests_total"), 2);
  ExpectNoPagesLeaked(c->worker(Role::kDecode, 0));
  EXPECT_TRUE(c->Stop().ok());
}

// logprobs are the same on every route: computed by the decode worker alone
// (PD fusion), and by the prefill worker (the first token) then the decode
// worker over KV that crossed the wire; both equal one process's.
TEST_F(DisaggregatedTest, LogprobsAreTheSameOnEveryRoute) {
  auto c = Start("logprobs", 1, 1, {"--pd_fusion_tokens=64"});
  ASSERT_NE(c, nullptr);
  for (int n : {40, 300}) {
    const auto prompt = Prompt(n, 11);
    Result r = Generate(c->scheduler_address(), prompt, 8, nullptr, /*top_logprobs=*/3);
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.final.prefill_worker().empty(), n == 40) << "the route of " << n;
    std::vector<TokenLogprob> want;
    EXPECT_EQ(r.tokens, Reference(prompt, 8, ModelDir(), &want));
    ASSERT_EQ(r.logprobs.size(), 8u) << n;
    ASSERT_EQ(want.size(), 8u);
    for (size_t k = 0; k < want.size(); ++k) {
      EXPECT_NEAR(r.logprobs[k].logprob(), want[k].logprob, 1e-4) << n << " " << k;
      ASSERT_EQ(r.logprobs[k].top_ids_size(), 3) << n << " " << k;
      for (int j = 0; j < 3; ++j) {
        EXPECT_EQ(r.logprobs[k].top_ids(j), want[k].top[size_t(j)].first) << n << " " << k;
        EXPECT_NEAR(r.logprobs[k].top_logprobs(j), want[k].top[size_t(j)].second, 1e-4);
      }
    }
  }
  // Not asked: none.
  Result r = Generate(c->scheduler_address(), Prompt(300, 12), 4);
  ASSERT_TRUE(r.status.ok());
  EXPECT_TRUE(r.logprobs.empty());
  EXPECT_TRUE(c->Stop().ok());
}

// Two scheduler replicas, every worker registered with both, a steady load
// spread over them; one replica is killed with SIGKILL. Its requests in
// flight end with UNAVAILABLE (none hangs), and only they; the other
// replica serves on.
TEST_F(DisaggregatedTest, AKilledSchedulerReplicaLosesOnlyItsRequestsInFlight) {
  auto c = Start("replicas", 1, 1, {}, {}, /*schedulers=*/2);
  ASSERT_NE(c, nullptr);
  std::shared_ptr<grpc::Channel> channels[2] = {
      grpc::CreateChannel(c->scheduler(0).grpc_address, grpc::InsecureChannelCredentials()),
      grpc::CreateChannel(c->scheduler(1).grpc_address, grpc::InsecureChannelCredentials())};
  absl::Mutex mu;
  bool killed = false;
  int unanswered_on_0 = 0;  // calls to replica 0 whose Final was not read yet
  int unanswered_at_kill = -1;
  int errors_on_0 = 0, ok_on_1_after_kill = 0, other_failures = 0;
  std::string first_error;
  std::atomic<bool> stop{false};
  auto client = [&](int k) {
    for (int i = 0; !stop.load(); ++i) {
      int replica = 0;
      {
        absl::MutexLock lock(&mu);
        replica = killed ? 1 : (i + k) % 2;
        if (replica == 0) ++unanswered_on_0;
      }
      auto stub = v1::Generation::NewStub(channels[replica]);
      v1::GenerateRequest req;
      auto prompt = Prompt(150 + 10 * k, 1000 * k + i);
      *req.mutable_token_ids()->mutable_ids() = {prompt.begin(), prompt.end()};
      req.set_max_tokens(64);
      req.set_ignore_eos(true);
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
      auto reader = stub->Generate(&ctx, req);
      v1::GenerateResponse resp;
      bool answered = false;
      while (reader->Read(&resp)) {
        if (resp.has_final() && replica == 0) {
          absl::MutexLock lock(&mu);
          --unanswered_on_0;
          answered = true;
          // Read after the kill, it was sent before: not in flight then.
          if (killed) --unanswered_at_kill;
        }
      }
      grpc::Status st = reader->Finish();
      absl::MutexLock lock(&mu);
      if (replica == 0 && !answered) {
        --unanswered_on_0;
        if (st.error_code() == grpc::UNAVAILABLE) {
          ++errors_on_0;
          continue;
        }
      }
      if (!st.ok()) {
        ++other_failures;
        if (first_error.empty()) first_error = absl::StrCat(st.error_code(), ": ", st.error_message());
      } else if (replica == 1 && killed) {
        ++ok_on_1_after_kill;
      }
    }
  };
  std::vector<std::thread> clients;
  for (int k = 0; k < 4; ++k) clients.emplace_back(client, k);
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  // Kill at a moment with calls in flight to replica 0.
  for (int i = 0; i < 5000 && !killed; ++i) {
    {
      absl::MutexLock lock(&mu);
      if (unanswered_on_0 >= 2) {
        ASSERT_TRUE(c->Kill(Role::kScheduler, 0, SIGKILL).ok());
        killed = true;
        unanswered_at_kill = unanswered_on_0;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(2000));
  stop = true;
  for (auto& t : clients) t.join();  // every call has ended: none hung
  absl::MutexLock lock(&mu);
  std::printf("replica 0 killed with %d calls unanswered: %d ended UNAVAILABLE; replica 1 then "
              "served %d\n", unanswered_at_kill, errors_on_0, ok_on_1_after_kill);
  EXPECT_GE(unanswered_at_kill, 1) << "the kill should land under load";
  EXPECT_EQ(errors_on_0, unanswered_at_kill);
  EXPECT_EQ(other_failures, 0) << first_error;
  EXPECT_GE(ok_on_1_after_kill, 4) << "the other replica serves on";
  ExpectNoPagesLeaked(c->worker(Role::kDecode, 0));
  ExpectNoPagesLeaked(c->worker(Role::kPrefill, 0));
}

// Concurrent requests while the relay is down, then back: KV goes straight
// from the publisher's port (subscriptions that come before their prompt
// begins wait for it), then through the relay again once the workers have
// reconnected; every request is served exactly and no page is kept.
TEST_F(DisaggregatedTest, ConcurrentRequestsWhileTheRelayGoesAndComesBack) {
  // The expected outputs first: four clients computing them at once would
  // thrash the cores the cluster needs.
  constexpr int kClients = 4, kPrompts = 40;
  std::vector<std::vector<int32_t>> prompts, references;
  for (int i = 0; i < kClients * kPrompts; ++i) {
    prompts.push_back(Prompt(150 + 10 * (i % kClients), 5000 + i));
    references.push_back(Reference(prompts.back(), 16));
  }
  auto c = Start("relay_flap", 1, 1);
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->Kill(Role::kRelay, 0, SIGKILL).ok());
  std::atomic<int> failures{0}, served{0};
  std::atomic<bool> stop{false};
  std::string first_error;
  absl::Mutex mu;
  auto client = [&](int k) {
    for (int i = 0; !stop.load() && i < kPrompts; ++i) {
      const int n = i * kClients + k;
      Result r = Generate(c->scheduler_address(), prompts[n], 16);
      if (!r.status.ok() || r.tokens != references[n]) {
        ++failures;
        absl::MutexLock lock(&mu);
        if (first_error.empty()) first_error = r.status.error_message();
      } else {
        ++served;
      }
    }
  };
  std::vector<std::thread> clients;
  for (int k = 0; k < kClients; ++k) clients.emplace_back(client, k);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_TRUE(c->Restart(Role::kRelay, 0).ok());  // the clients are running: no early return
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  stop = true;
  for (auto& t : clients) t.join();
  EXPECT_EQ(failures.load(), 0) << first_error;
  EXPECT_GE(served.load(), 8);
  EXPECT_TRUE(c->Running(Role::kPrefill, 0));
  EXPECT_TRUE(c->Running(Role::kDecode, 0));
  ExpectNoPagesLeaked(c->worker(Role::kPrefill, 0));
  ExpectNoPagesLeaked(c->worker(Role::kDecode, 0));
}

TEST_F(DisaggregatedTest, PinnedPromptsAreComputedAtStartAndKept) {
  const std::string pins = TmpDir() + "/pins.txt";
  {
    std::ofstream f(pins);
    std::string system;
    for (int i = 0; i < 120; ++i) system += "the system prompt says hello ";
    f << system << "\n\nshort\n";  // the short one is under a chunk: nothing to pin
  }
  auto c = Start("pins", 1, 1, {}, {"--kv_pin_prompts=" + pins});
  ASSERT_NE(c, nullptr);
  const Process& decode = c->worker(Role::kDecode, 0);
  const double pinned = Metric(decode, "kvcast_kv_pinned_chunks");
  EXPECT_GE(pinned, 2) << "the long prompt's full chunks";
  // Requests come and go; the pinned chunks stay.
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(Generate(c->scheduler_address(), Prompt(300, 90 + i), 8).status.ok());
  }
  EXPECT_EQ(Metric(decode, "kvcast_kv_pinned_chunks"), pinned);
  EXPECT_TRUE(c->Stop().ok());
}

TEST_F(DisaggregatedTest, WithoutPrefillWorkersDecodeRecomputes) {
  auto c = Start("no_prefill", 1, 1);
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->Kill(Role::kPrefill, 0, SIGKILL).ok());
  auto prompt = Prompt(260, 9);
  Result r = Generate(c->scheduler_address(), prompt, 10);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.tokens, Reference(prompt, 10));
  ExpectNoPagesLeaked(c->worker(Role::kDecode, 0));
}

}  // namespace
}  // namespace kvcast::cluster

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  absl::ParseCommandLine(argc, argv);
  return RUN_ALL_TESTS();
}
