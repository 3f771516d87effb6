// kv_tier_bench: time to first token of a prompt whose prefix the worker
// already computed, by where that prefix's KV is (issue 20), in one run:
//   pool       still in the page pool (tier 0)
//   host-fp16  evicted to the host tier in fp16, promoted back (tier 1)
//   host-int8  the same with the tier in int8
//   disk-fp16  evicted through the host tier (too small to hold it) to the
//              disk tier (files in --disk_dir), read back (tier 2)
//   relay      on another worker: the prefix's fp16 track fetched from a
//              MoQT relay's cache (in-process relay, loopback QUIC + TLS),
//              landed into this engine's pages, then the tail computed
//   recompute  not cached anywhere (prefix caching off)
// Each case: a fresh engine, the prefix prompt run once (untimed), the
// pool's chunks evicted for the host cases, then a prompt sharing that
// prefix plus a short new tail timed from Submit to its first token.
//
// --replay N: instead, a shared-prefix workload whose working set is larger
// than the page pool: N requests, one after another, each one of
// --replay_prefixes prefixes (uniformly at random, or Zipf with exponent
// --zipf) plus a new tail, on a pool of --pool_chunks chunks, with the host
// tier off, LRU and LFU (--host_tier_mb; 0: big enough for all): prefix hit
// rate and TTFT p50 / p90.
//
//   bazel build -c opt //tools/bench:kv_tier_bench && bazel-bin/tools/bench/kv_tier_bench \
//     --model build/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf [--prefix 512,2048] \
//     [--tail 32] [--json FILE]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/status_macros.h"
#include "engine/engine.h"
#include "kernels/backend.h"
#include "transport/kvcache/lander.h"
#include "transport/kvcache/naming.h"
#include "transport/kvcache/publisher.h"
#include "transport/moqt/moqt_endpoint.h"
#include "transport/moqt/relay.h"
#include "tools/bench/moqt_peers.h"
#include "tools/bench/result_file.h"

ABSL_FLAG(std::string, model, "", "a .gguf file or an HF directory");
ABSL_FLAG(std::string, backend, "cpu", "cpu (Q8 weights), cpu-bf16, cpu-f32 or cuda");
ABSL_FLAG(std::vector<std::string>, prefix, {"2048"},
          "tokens of the shared prefix (a multiple of 128 is all reusable); a list measures "
          "each length in turn (the replay takes the first)");
ABSL_FLAG(int, tail, 32, "new tokens after the prefix");
ABSL_FLAG(int, runs, 3, "timed runs per case (median reported)");
ABSL_FLAG(std::string, json, "", "also write every run's TTFT here as a JSON result file");
ABSL_FLAG(int, replay, 0, "requests of the working-set replay (0: the single-prompt cases)");
ABSL_FLAG(int, replay_prefixes, 16, "distinct prefixes of the replay");
ABSL_FLAG(int, pool_chunks, 12, "the replay's page pool, in chunks");
ABSL_FLAG(double, zipf, 0, "the replay's prefix popularity: Zipf exponent (0: uniform)");
ABSL_FLAG(int, host_tier_mb, 0, "the replay's host tier (0: 4 GiB, room for all)");
ABSL_FLAG(std::string, disk_dir, "/tmp/kv_tier_bench", "the disk tier's directory (emptied)");

namespace kvcast {
namespace {

using Clock = std::chrono::steady_clock;

struct Case {
  const char* name;
  bool prefix_caching;
  int64_t host_tier_bytes;
  KvFormat format;
  bool evict;
  bool disk = false;
};

// Seconds from Submit to the first token; `cached` gets the prompt tokens reused.
absl::StatusOr<double> FirstToken(Engine* e, const std::vector<int32_t>& prompt, int* cached) {
  GenerationParams p;
  p.max_tokens = 1;
  p.ignore_eos = true;
  const auto t0 = Clock::now();
  ASSIGN_OR_RETURN(uint64_t id, e->Submit(prompt, p));
  double secs = -1;
  while (e->HasWork()) {
    ASSIGN_OR_RETURN(std::vector<SequenceEvent> events, e->Step());
    for (const SequenceEvent& ev : events) {
      if (ev.id != id) continue;
      *cached = ev.cached_tokens;
      if (ev.token >= 0 && secs < 0) secs = std::chrono::duration<double>(Clock::now() - t0).count();
    }
  }
  return secs;
}

// The relay case: worker A (an engine that computed the prefix) publishes
// it over MoQT through a relay; worker B, a fresh engine, fetches it from
// the relay's cache into its pages and computes the tail. Seconds from the
// SUBSCRIBE to B's first token, median of `runs` (the relay's cache is
// filled by one untimed landing first); `reused`: the prompt tokens B's
// sequence started from (the engine's cached_tokens), as measured.
using bench::Ready;
using bench::UpstreamPublisher;

absl::StatusOr<std::vector<double>> RelayTtft(const std::string& model, const std::vector<int32_t>& prefix,
                                 const std::vector<int32_t>& prompt, int runs, int* reused) {
  auto engine = [&]() -> absl::StatusOr<std::unique_ptr<Engine>> {
    EngineOptions o;
    o.kv_cache_bytes = 512ll << 20;
    ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, NewBackend(absl::GetFlag(FLAGS_backend)));
    return Engine::Create(model, o, std::move(backend));
  };
  ASSIGN_OR_RETURN(auto a, engine());
  ASSIGN_OR_RETURN(auto b, engine());
  int ignored = 0;
  RETURN_IF_ERROR(FirstToken(a.get(), prefix, &ignored).status());
  const int chunk = a->options().chunk_tokens;
  const int tokens = int(prefix.size()) / chunk * chunk;
  const std::vector<Hash128> chain = ChunkHashChain(a->prefix_seed(""), prefix, chunk);
  KvPages pages = a->prefix_cache().Acquire(chain, tokens / chunk);
  if (pages.size() * a->pool().layout().page_tokens != tokens) {
    return absl::InternalError("the prefix is not in worker A's cache");
  }
  ASSIGN_OR_RETURN(const bench::LoopbackCerts certs,
                   bench::MakeLoopbackCerts("/tmp/kv_tier_bench_certs"));
  const quic::TlsOptions server_tls = certs.Server(), client_tls = certs.Client();
  auto relay_loop = *quic::LoopThread::Start();
  auto a_loop = *quic::LoopThread::Start();
  auto b_loop = *quic::LoopThread::Start();
  std::unique_ptr<moqt::Relay> relay;
  std::unique_ptr<moqt::MoqtServer> relay_server;
  relay_loop->RunSync([&] {
    moqt::RelayOptions options;
    options.cache_bytes = 2ull << 30;
    relay = std::make_unique<moqt::Relay>(relay_loop->loop(), options);
    relay_server = *moqt::MoqtServer::Create(relay_loop->loop(), "127.0.0.1", 0, server_tls,
                                             quic::TransportOptions(), moqt::SessionOptions{},
                                             relay.get());
  });
  std::unique_ptr<UpstreamPublisher> publisher;
  const std::string digest(32, 'a');
  a_loop->RunSync([&] {
    publisher = std::make_unique<UpstreamPublisher>(&a->pool(), a->backend(),
                                                    a->model().fingerprint(), chunk);
    publisher->upstream = *moqt::MoqtClient::Connect(
        a_loop->loop(), "127.0.0.1", relay_server->port(), client_tls, quic::TransportOptions(),
        moqt::SessionOptions{}, publisher.get());
  });
  publisher->ready.WaitForNotification();
  a_loop->RunSync([&] {
    const int per_chunk = chunk / a->pool().layout().page_tokens;
    (void)publisher->BeginPrompt(digest, tokens);
    for (int g = 0; g * chunk < tokens; ++g) {
      (void)publisher->ChunkReady(digest, g, *pages.Share(g * per_chunk, per_chunk));
    }
    (void)publisher->EndPrompt(digest, absl::OkStatus());
  });
  Ready b_ready;
  std::unique_ptr<moqt::MoqtClient> b_client;
  b_loop->RunSync([&] {
    b_client = *moqt::MoqtClient::Connect(b_loop->loop(), "127.0.0.1", relay_server->port(),
                                          client_tls, quic::TransportOptions(),
                                          moqt::SessionOptions{}, &b_ready);
  });
  b_ready.ready.WaitForNotification();
  const moqt::FullTrackName track = kvcache::FullTrackNameOf(
      {kvcache::ModelId(a->model().fingerprint()), digest,
       *kvcache::CompressionOfTrackName("fp16")});
  // Lands the prefix into B's pages through the relay; its pages.
  auto land = [&]() -> absl::StatusOr<KvPages> {
    absl::Notification done;
    absl::StatusOr<KvPages> result;
    ASSIGN_OR_RETURN(KvPages fresh, b->pool().Allocate(tokens / b->pool().layout().page_tokens));
    b_loop->RunSync([&] {
      auto lander = kvcache::KvLander::Create(
          &b->pool(), b->backend(), b->model().fingerprint(), track,
          kvcache::LandingSpec{chunk, tokens, 0, tokens / chunk, std::move(fresh)},
          [&](absl::StatusOr<KvPages> r) {
            result = std::move(r);
            done.Notify();
          });
      moqt::Subscribe sub;
      sub.track = track;
      sub.filter_type = moqt::FilterType::kAbsoluteStart;
      sub.start = moqt::Location{0, 0};
      (void)b_client->session()->Subscribe(sub, *lander, [](auto) {});
    });
    done.WaitForNotification();
    return result;
  };
  {
    RETURN_IF_ERROR(land().status());  // fills the relay's cache
  }
  std::vector<double> times;
  for (int run = 0; run < runs; ++run) {
    const auto t0 = Clock::now();
    ASSIGN_OR_RETURN(KvPages landed, land());
    GenerationParams p;
    p.max_tokens = 1;
    p.ignore_eos = true;
    ASSIGN_OR_RETURN(uint64_t id, b->Submit(prompt, p, PrefilledKv{std::move(landed), tokens, -1}));
    double secs = -1;
    while (b->HasWork()) {
      ASSIGN_OR_RETURN(std::vector<SequenceEvent> events, b->Step());
      for (const SequenceEvent& ev : events) {
        if (ev.id != id) continue;
        *reused = ev.cached_tokens;  // the landed tokens B's sequence started from
        if (ev.token >= 0 && secs < 0) {
          secs = std::chrono::duration<double>(Clock::now() - t0).count();
        }
      }
    }
    times.push_back(secs);
    b->prefix_cache().Reclaim(1 << 30);  // the next run lands it again
  }
  b_loop->RunSync([&] { b_client.reset(); });
  a_loop->RunSync([&] {
    publisher->upstream.reset();
    publisher.reset();
  });
  relay_loop->RunSync([&] {
    relay_server.reset();
    relay.reset();
  });
  pages.Reset();
  std::filesystem::remove_all(certs.dir);
  return times;
}

double Percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(q * v.size()))];
}

absl::Status Replay(const std::string& model, int prefix_len) {
  const int requests = absl::GetFlag(FLAGS_replay), prefixes = absl::GetFlag(FLAGS_replay_prefixes);
  const int tail_len = absl::GetFlag(FLAGS_tail);
  std::printf("| host tier | requests | prefix tokens reused | TTFT p50 (s) | TTFT p90 (s) |\n"
              "|---|---|---|---|---|\n");
  // Prefix k is drawn with weight 1 / (k + 1)^zipf.
  std::vector<double> weight(prefixes);
  for (int k = 0; k < prefixes; ++k) weight[k] = std::pow(k + 1.0, -absl::GetFlag(FLAGS_zipf));
  std::vector<double> p50;
  const int64_t tier_bytes =
      absl::GetFlag(FLAGS_host_tier_mb) > 0 ? int64_t(absl::GetFlag(FLAGS_host_tier_mb)) << 20
                                            : 4ll << 30;
  const struct {
    const char* name;
    int64_t bytes;
    HostKvTier::Policy policy;
  } configs[] = {{"off", 0, HostKvTier::Policy::kLru},
                 {"LRU", tier_bytes, HostKvTier::Policy::kLru},
                 {"LFU", tier_bytes, HostKvTier::Policy::kLfu}};
  for (const auto& config : configs) {
    EngineOptions o;
    o.num_pages = absl::GetFlag(FLAGS_pool_chunks) * (o.chunk_tokens / o.page_tokens);
    o.host_tier_bytes = config.bytes;
    o.host_tier_policy = config.policy;
    ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, NewBackend(absl::GetFlag(FLAGS_backend)));
    ASSIGN_OR_RETURN(auto engine, Engine::Create(model, o, std::move(backend)));
    std::mt19937 rng(11);  // the same request sequence both ways
    std::vector<std::vector<int32_t>> heads(prefixes);
    for (auto& h : heads) {
      h.resize(prefix_len);
      for (int32_t& t : h) t = int32_t(100 + rng() % 20000);
    }
    std::vector<double> ttft;
    int64_t reused = 0, total = 0;
    std::discrete_distribution<int> pick(weight.begin(), weight.end());
    for (int r = 0; r < requests; ++r) {
      std::vector<int32_t> prompt = heads[pick(rng)];
      for (int i = 0; i < tail_len; ++i) prompt.push_back(int32_t(30000 + rng() % 10000));
      int cached = 0;
      ASSIGN_OR_RETURN(double secs, FirstToken(engine.get(), prompt, &cached));
      ttft.push_back(secs);
      reused += cached;
      total += prefix_len;
    }
    p50.push_back(Percentile(ttft, 0.5));
    std::printf("| %s | %d | %.0f%% | %.3f | %.3f |\n", config.name, requests,
                100.0 * reused / total, p50.back(), Percentile(ttft, 0.9));
    std::fflush(stdout);
  }
  std::printf("\np50 TTFT with the host tier: %.1fx lower (LRU), %.1fx (LFU)\n",
              p50[0] / p50[1], p50[0] / p50[2]);
  return absl::OkStatus();
}

struct Row {
  std::string name;
  std::vector<double> ttft;  // every run's, seconds
  int cached;
  double Median() const {
    std::vector<double> v = ttft;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  }
};

// The single-prompt cases at one prefix length, recompute last.
absl::StatusOr<std::vector<Row>> PrefixCases(const std::string& model, int prefix_len) {
  const int tail_len = absl::GetFlag(FLAGS_tail);
  const Case cases[] = {
      {"pool", true, 0, KvFormat::kFp16, false},
      {"host-fp16", true, 1ll << 30, KvFormat::kFp16, true},
      {"host-int8", true, 1ll << 30, KvFormat::kInt8, true},
      {"disk-fp16", true, 1, KvFormat::kFp16, true, true},
      {"recompute", false, 0, KvFormat::kFp16, false},
  };
  std::vector<Row> rows;
  for (const Case& c : cases) {
    std::vector<double> times;
    int cached = 0;
    for (int run = 0; run < absl::GetFlag(FLAGS_runs); ++run) {
      EngineOptions o;
      o.prefix_caching = c.prefix_caching;
      o.host_tier_bytes = c.host_tier_bytes;
      o.host_tier_format = c.format;
      o.kv_cache_bytes = 512ll << 20;
      if (c.disk) {
        std::filesystem::remove_all(absl::GetFlag(FLAGS_disk_dir));
        o.disk_tier_dir = absl::GetFlag(FLAGS_disk_dir);
        o.disk_tier_bytes = 4ll << 30;
      }
      ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, NewBackend(absl::GetFlag(FLAGS_backend)));
      ASSIGN_OR_RETURN(auto engine, Engine::Create(model, o, std::move(backend)));
      std::mt19937 rng(7 + run);
      std::vector<int32_t> prefix(prefix_len);
      for (int32_t& t : prefix) t = int32_t(100 + rng() % 20000);
      int ignored = 0;
      RETURN_IF_ERROR(FirstToken(engine.get(), prefix, &ignored).status());
      if (c.evict) engine->prefix_cache().Reclaim(1 << 30);
      std::vector<int32_t> prompt = prefix;
      for (int i = 0; i < tail_len; ++i) prompt.push_back(int32_t(30000 + rng() % 10000));
      ASSIGN_OR_RETURN(double secs, FirstToken(engine.get(), prompt, &cached));
      times.push_back(secs);
    }
    rows.push_back({c.name, times, cached});
    std::fprintf(stderr, "kv_tier_bench: prefix %d, %s done\n", prefix_len, c.name);
    if (std::string(c.name) == "disk-fp16") {  // then the relay, before recompute
      std::mt19937 rng(7);
      std::vector<int32_t> prefix(prefix_len);
      for (int32_t& t : prefix) t = int32_t(100 + rng() % 20000);
      std::vector<int32_t> prompt = prefix;
      for (int i = 0; i < tail_len; ++i) prompt.push_back(int32_t(30000 + rng() % 10000));
      int reused = 0;
      ASSIGN_OR_RETURN(std::vector<double> secs,
                       RelayTtft(model, prefix, prompt, absl::GetFlag(FLAGS_runs), &reused));
      rows.push_back({"relay", secs, reused});
      std::fprintf(stderr, "kv_tier_bench: prefix %d, relay done\n", prefix_len);
    }
  }
  return rows;
}

absl::Status Main(nlohmann::json header) {
  const std::string model = absl::GetFlag(FLAGS_model);
  if (model.empty()) return absl::InvalidArgumentError("--model is required");
  std::vector<int> prefixes;
  for (const std::string& p : absl::GetFlag(FLAGS_prefix)) {
    int n = 0;
    if (!absl::SimpleAtoi(p, &n) || n <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("--prefix: '", p, "' is not a token count"));
    }
    prefixes.push_back(n);
  }
  if (prefixes.empty()) return absl::InvalidArgumentError("--prefix: no length given");
  if (absl::GetFlag(FLAGS_replay) > 0) return Replay(model, prefixes.front());
  nlohmann::json results = nlohmann::json::array();
  for (int prefix_len : prefixes) {
    ASSIGN_OR_RETURN(std::vector<Row> rows, PrefixCases(model, prefix_len));
    std::printf("\nPrefix %d tokens + %d new, median of %d runs:\n\n"
                "| prefix KV in | TTFT (s) | prompt tokens reused | vs recompute |\n"
                "|---|---|---|---|\n",
                prefix_len, absl::GetFlag(FLAGS_tail), absl::GetFlag(FLAGS_runs));
    for (const Row& r : rows) {
      std::printf("| %s | %.3f | %d | %.1fx |\n", r.name.c_str(), r.Median(), r.cached,
                  rows.back().Median() / r.Median());
      results.push_back({{"prefix_tokens", prefix_len}, {"tier", r.name}, {"ttft_s", r.ttft},
                         {"reused_tokens", r.cached}});
    }
    std::fflush(stdout);
  }
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    header.update({{"model", model}, {"backend", absl::GetFlag(FLAGS_backend)},
                   {"tail_tokens", absl::GetFlag(FLAGS_tail)}, {"runs", absl::GetFlag(FLAGS_runs)}});
    return bench::WriteResultFile(path, std::move(header), std::move(results));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace kvcast

int main(int argc, char** argv) {
  nlohmann::json header = kvcast::bench::ResultHeader("kv_tier_bench", argc, argv);
  absl::ParseCommandLine(argc, argv);
  absl::Status s = kvcast::Main(std::move(header));
  if (!s.ok()) {
    std::fprintf(stderr, "kv_tier_bench: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
