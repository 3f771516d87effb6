// routing_sim: replays a shared-prefix trace on simulated clusters with the
// scheduler's router and four baselines (tools/sim/routing_sim.h), and prints
// one markdown table per cluster size plus kvcast's ratios to each; with
// --json FILE also a result file (tools/bench/result_file.h): a row per
// cluster and policy.
//
//   bazel run -c opt //tools/sim:routing_sim -- --clusters 8x16,32x64 --zipf 1.2
#include <algorithm>
#include <cstdio>
#include <iterator>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "nlohmann/json.hpp"
#include "tools/bench/result_file.h"
#include "tools/sim/routing_sim.h"

ABSL_FLAG(std::string, clusters, "8x16,32x64", "PREFILLxDECODE worker counts, comma-separated");
ABSL_FLAG(std::string, policies, "kvcast,llm-d,dynamo,affinity,round-robin",
          "policies to compare");
ABSL_FLAG(int, requests, 20000, "requests per run (the first 10% warm up)");
ABSL_FLAG(double, utilization, 0.7,
          "arrival rate as this fraction of the prefill capacity with every system prompt "
          "reused (scaled with the prefill worker count)");
ABSL_FLAG(int, system_prompts, 64, "distinct system prompts");
ABSL_FLAG(double, zipf, 1.0, "Zipf exponent of system-prompt popularity (larger: hotter)");
ABSL_FLAG(double, hot_share, 0,
          "hot-prefix skew: this share of arrivals goes to one system prompt, another one "
          "every --hot_period_s (0: off)");
ABSL_FLAG(double, hot_period_s, 60, "");
ABSL_FLAG(int, system_tokens_min, 512, "");
ABSL_FLAG(int, system_tokens_max, 2048, "");
ABSL_FLAG(int, user_tokens_min, 32, "");
ABSL_FLAG(int, user_tokens_max, 256, "");
ABSL_FLAG(int, output_tokens_min, 16, "");
ABSL_FLAG(int, output_tokens_max, 128, "");
ABSL_FLAG(int, prefill_cache_chunks, 256, "prefix cache of a prefill worker, in 128-token chunks");
ABSL_FLAG(int, decode_pages, 8192, "KV pages (16 tokens) of a decode worker");
ABSL_FLAG(int, max_batch, 64, "sequences a decode worker steps at once");
ABSL_FLAG(bool, relay, true, "prefixes published earlier can be fetched from the relay");
ABSL_FLAG(double, heartbeat_s, 1.0,
          "workers' heartbeat period: how stale the kvcast router's and affinity's view is");
ABSL_FLAG(double, prefill_tokens_per_s, kvcast::sim::CostModel().prefill_tokens_per_s,
          "prefill rate of one worker");
ABSL_FLAG(std::string, decode_step_ms, "",
          "BATCH:MS points of a decode step, e.g. 1:4.6,8:23 (empty: the cost model's)");
ABSL_FLAG(std::string, track, "fp16",
          "KV track (fp16, int8, ac): its bytes per token and measured transfer rates");
ABSL_FLAG(double, kv_bytes_per_token, 0, "KV bytes per token on the wire (0: the track's)");
ABSL_FLAG(double, transfer_mb_s, 0, "prefill -> decode KV rate, MB/s (0: the track's)");
ABSL_FLAG(double, fetch_mb_s, 0, "relay -> prefill KV rate, MB/s (0: the track's)");
ABSL_FLAG(uint64_t, seed, 1, "trace seed");
ABSL_FLAG(std::string, json, "",
          "also write the results here as a result file (tools/bench/result_file.h)");
ABSL_FLAG(double, load_weight, kvcast::scheduler::RouterOptions().load_weight,
          "kvcast router: tokens of cost per request in flight");
ABSL_FLAG(double, miss_weight, kvcast::scheduler::RouterOptions().miss_weight,
          "kvcast router: extra charge per token of work above the least");
ABSL_FLAG(double, fetch_weight, kvcast::scheduler::RouterOptions().fetch_weight,
          "kvcast router: cost of fetching a token relative to computing it");

namespace kvcast::sim {
namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "routing_sim: %s\n", message.c_str());
  return 2;
}

int Main(nlohmann::json header) {
  nlohmann::json rows = nlohmann::json::array();
  CostModel model;
  model.prefill_tokens_per_s = absl::GetFlag(FLAGS_prefill_tokens_per_s);
  if (absl::Status s = model.ForTrack(absl::GetFlag(FLAGS_track)); !s.ok()) {
    return Fail(std::string(s.message()));
  }
  if (absl::GetFlag(FLAGS_kv_bytes_per_token) > 0) {
    model.kv_bytes_per_token = absl::GetFlag(FLAGS_kv_bytes_per_token);
  }
  if (absl::GetFlag(FLAGS_transfer_mb_s) > 0) {
    model.transfer_bytes_per_s = absl::GetFlag(FLAGS_transfer_mb_s) * 1e6;
  }
  if (absl::GetFlag(FLAGS_fetch_mb_s) > 0) model.fetch_bytes_per_s = absl::GetFlag(FLAGS_fetch_mb_s) * 1e6;
  const std::string steps = absl::GetFlag(FLAGS_decode_step_ms);
  if (!steps.empty()) model.decode_step_ms.clear();
  for (absl::string_view point : absl::StrSplit(steps, ',', absl::SkipEmpty())) {
    std::pair<std::string, std::string> bm = absl::StrSplit(point, ':');
    int batch = 0;
    double ms = 0;
    if (!absl::SimpleAtoi(bm.first, &batch) || !absl::SimpleAtod(bm.second, &ms) || batch < 1 ||
        ms <= 0 || (!model.decode_step_ms.empty() && batch <= model.decode_step_ms.back().first)) {
      return Fail("--decode_step_ms wants increasing BATCH:MS points, e.g. 1:9.5,8:46");
    }
    model.decode_step_ms.emplace_back(batch, ms);
  }
  std::vector<Policy> policies;
  constexpr Policy kAll[] = {Policy::kKvcast, Policy::kLlmd, Policy::kDynamo, Policy::kAffinity,
                             Policy::kRoundRobin};
  for (absl::string_view name : absl::StrSplit(absl::GetFlag(FLAGS_policies), ',')) {
    const Policy* p = std::find_if(std::begin(kAll), std::end(kAll),
                                   [&](Policy x) { return name == PolicyName(x); });
    if (p == std::end(kAll)) {
      return Fail(std::string("unknown policy ") + std::string(name) +
                  " (kvcast, llm-d, dynamo, affinity, round-robin)");
    }
    policies.push_back(*p);
  }
  Workload w;
  w.requests = absl::GetFlag(FLAGS_requests);
  w.system_prompts = absl::GetFlag(FLAGS_system_prompts);
  w.zipf = absl::GetFlag(FLAGS_zipf);
  w.system_tokens_min = absl::GetFlag(FLAGS_system_tokens_min);
  w.system_tokens_max = absl::GetFlag(FLAGS_system_tokens_max);
  w.user_tokens_min = absl::GetFlag(FLAGS_user_tokens_min);
  w.user_tokens_max = absl::GetFlag(FLAGS_user_tokens_max);
  w.output_tokens_min = absl::GetFlag(FLAGS_output_tokens_min);
  w.output_tokens_max = absl::GetFlag(FLAGS_output_tokens_max);
  w.seed = absl::GetFlag(FLAGS_seed);
  w.hot_share = absl::GetFlag(FLAGS_hot_share);
  w.hot_period_s = absl::GetFlag(FLAGS_hot_period_s);

  for (absl::string_view spec : absl::StrSplit(absl::GetFlag(FLAGS_clusters), ',')) {
    std::pair<std::string, std::string> pd = absl::StrSplit(spec, 'x');
    Cluster c;
    if (!absl::SimpleAtoi(pd.first, &c.prefill) || !absl::SimpleAtoi(pd.second, &c.decode)) {
      return Fail("--clusters wants PREFILLxDECODE, e.g. 8x16");
    }
    c.prefill_cache_chunks = absl::GetFlag(FLAGS_prefill_cache_chunks);
    c.decode_pages = absl::GetFlag(FLAGS_decode_pages);
    c.max_batch = absl::GetFlag(FLAGS_max_batch);
    c.relay = absl::GetFlag(FLAGS_relay);
    c.heartbeat_s = absl::GetFlag(FLAGS_heartbeat_s);
    c.router.load_weight = absl::GetFlag(FLAGS_load_weight);
    c.router.miss_weight = absl::GetFlag(FLAGS_miss_weight);
    c.router.fetch_weight = absl::GetFlag(FLAGS_fetch_weight);
    Workload wc = w;
    wc.rate = DefaultRate(w, c, model, absl::GetFlag(FLAGS_utilization));
    std::printf("\n%d prefill + %d decode, %d requests at %.1f/s, %d system prompts (Zipf %.2f",
                c.prefill, c.decode, wc.requests, wc.rate, wc.system_prompts, wc.zipf);
    if (wc.hot_share > 0) {
      std::printf("; one hot prompt takes %.0f%%, another every %.0f s", 100 * wc.hot_share,
                  wc.hot_period_s);
    }
    std::printf("), relay %s, track %s\n\n", c.relay ? "on" : "off",
                absl::GetFlag(FLAGS_track).c_str());
    std::printf("| policy | hit rate | reuse (hit + relay) | TTFT p50 ms | TTFT p90 ms | "
                "TTFT p99 ms | e2e p50 ms | decode max/mean | prefill max/mean | output tok/s |\n"
                "|---|---|---|---|---|---|---|---|---|---|\n");
    std::vector<std::pair<Policy, Result>> results;
    for (Policy p : policies) {
      const absl::Time t0 = absl::Now();
      auto r = Simulate(p, wc, c, model);
      if (!r.ok()) return Fail(std::string(r.status().message()));
      std::fprintf(stderr, "routing_sim: %s on %dx%d: %.1f s simulated in %.1f s\n",
                   PolicyName(p), c.prefill, c.decode, r->simulated_s,
                   absl::ToDoubleSeconds(absl::Now() - t0));
      std::printf("| %s | %.1f%% | %.1f%% | %.0f | %.0f | %.0f | %.0f | %.2f | %.2f | %.0f |\n",
                  PolicyName(p), 100 * r->hit_rate, 100 * r->reuse_rate, r->ttft_p50_ms,
                  r->ttft_p90_ms, r->ttft_p99_ms, r->e2e_p50_ms, r->decode_balance,
                  r->prefill_balance, r->output_tokens_per_s);
      std::fflush(stdout);
      rows.push_back({{"prefill", c.prefill}, {"decode", c.decode}, {"policy", PolicyName(p)},
                      {"rate", wc.rate}, {"requests", r->requests}, {"hit_rate", r->hit_rate},
                      {"reuse_rate", r->reuse_rate}, {"ttft_p50_ms", r->ttft_p50_ms},
                      {"ttft_p90_ms", r->ttft_p90_ms}, {"ttft_p99_ms", r->ttft_p99_ms},
                      {"e2e_p50_ms", r->e2e_p50_ms}, {"decode_balance", r->decode_balance},
                      {"prefill_balance", r->prefill_balance},
                      {"output_tokens_per_s", r->output_tokens_per_s}});
      results.emplace_back(p, *r);
    }
    const Result* ours = nullptr;
    for (const auto& [p, r] : results) {
      if (p == Policy::kKvcast) ours = &r;
    }
    std::printf("\n");
    for (const auto& [p, r] : results) {
      if (ours == nullptr || p == Policy::kKvcast) continue;
      std::printf("kvcast vs %s: hit rate %+.1f points, reuse %+.1f points, "
                  "TTFT p99 %.2fx better, p50 %.2fx better\n",
                  PolicyName(p), 100 * (ours->hit_rate - r.hit_rate),
                  100 * (ours->reuse_rate - r.reuse_rate), r.ttft_p99_ms / ours->ttft_p99_ms,
                  r.ttft_p50_ms / ours->ttft_p50_ms);
    }
  }
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    header.update({{"relay", absl::GetFlag(FLAGS_relay)}, {"track", absl::GetFlag(FLAGS_track)},
                   {"prefill_tokens_per_s", model.prefill_tokens_per_s},
                   {"transfer_bytes_per_s", model.transfer_bytes_per_s},
                   {"fetch_bytes_per_s", model.fetch_bytes_per_s}});
    if (absl::Status st = bench::WriteResultFile(path, std::move(header), std::move(rows));
        !st.ok()) {
      return Fail(st.ToString());
    }
  }
  return 0;
}

}  // namespace
}  // namespace kvcast::sim

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "routing_sim: the scheduler's router on simulated clusters against llm-d's precise "
      "prefix-cache profile, Dynamo's KV router cost, longest-prefix affinity and round-robin "
      "(tools/sim/routing_sim.h)");
  nlohmann::json header = kvcast::bench::ResultHeader("routing_sim", argc, argv);
  absl::ParseCommandLine(argc, argv);
  return kvcast::sim::Main(std::move(header));
}
