// kv_tier_bench: time to first token of a prompt whose prefix the worker
// already computed, by where that prefix's KV is (issue 20), in one run:
//   pool       still in the page pool (tier 0)
//   host-fp16  evicted to the host tier in fp16, promoted back (tier 1)
//   host-int8  the same with the tier in int8
//   disk-fp16  evicted through the host tier (too small to hold it) to the
//              disk tier (files in --disk_dir), read back (tier 2)
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
//     --model build/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf [--prefix 2048] [--tail 32]
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
#include "common/status_macros.h"
#include "engine/engine.h"
#include "kernels/backend.h"

ABSL_FLAG(std::string, model, "", "a .gguf file or an HF directory");
ABSL_FLAG(std::string, backend, "cpu", "cpu (Q8 weights), cpu-bf16, cpu-f32 or cuda");
ABSL_FLAG(int, prefix, 2048, "tokens of the shared prefix (a multiple of 128 is all reusable)");
ABSL_FLAG(int, tail, 32, "new tokens after the prefix");
ABSL_FLAG(int, runs, 3, "timed runs per case (median reported)");
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

double Percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(q * v.size()))];
}

absl::Status Replay(const std::string& model) {
  const int requests = absl::GetFlag(FLAGS_replay), prefixes = absl::GetFlag(FLAGS_replay_prefixes);
  const int prefix_len = absl::GetFlag(FLAGS_prefix), tail_len = absl::GetFlag(FLAGS_tail);
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

absl::Status Main() {
  const std::string model = absl::GetFlag(FLAGS_model);
  if (model.empty()) return absl::InvalidArgumentError("--model is required");
  if (absl::GetFlag(FLAGS_replay) > 0) return Replay(model);
  const int prefix_len = absl::GetFlag(FLAGS_prefix), tail_len = absl::GetFlag(FLAGS_tail);
  const Case cases[] = {
      {"pool", true, 0, KvFormat::kFp16, false},
      {"host-fp16", true, 1ll << 30, KvFormat::kFp16, true},
      {"host-int8", true, 1ll << 30, KvFormat::kInt8, true},
      {"disk-fp16", true, 1, KvFormat::kFp16, true, true},
      {"recompute", false, 0, KvFormat::kFp16, false},
  };
  struct Row {
    double ttft;
    int cached;
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
    std::sort(times.begin(), times.end());
    rows.push_back({times[times.size() / 2], cached});
    std::fprintf(stderr, "kv_tier_bench: %s done\n", c.name);
  }
  std::printf("| prefix KV in | TTFT (s) | prompt tokens reused | vs recompute |\n|---|---|---|---|\n");
  for (size_t i = 0; i < rows.size(); ++i) {
    std::printf("| %s | %.3f | %d | %.1fx |\n", cases[i].name, rows[i].ttft, rows[i].cached,
                rows.back().ttft / rows[i].ttft);
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace kvcast

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  absl::Status s = kvcast::Main();
  if (!s.ok()) {
    std::fprintf(stderr, "kv_tier_bench: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
