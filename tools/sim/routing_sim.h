// Routing simulator: a discrete-event model of a kvcast cluster (prefill
// workers with a prefix cache, decode workers with continuous batching, a
// relay caching published prefixes) that routes a synthetic shared-prefix
// trace with the scheduler's real code: the `kvcast` policy is
// scheduler::WorkerRegistry itself (Register / Heartbeat with load and KV
// events / Choose / Published / Release), fed on the workers' heartbeat
// period exactly as the services feed it. The baselines see the same
// heartbeats:
//   round-robin  prefill and decode in turn;
//   affinity     the prefill worker holding the longest prefix
//                (scheduler::PrefixIndex), fewest outstanding requests on a
//                tie; decode by scheduler::ChooseDecode.
// Two baselines model what users run, each given a live view (the workers'
// caches and queues at the moment of routing, plus the prefixes of prompts
// already routed to a worker: KV events with no delay and speculative
// indexing, their best case):
//   llm-d        llm-d's precise prefix-cache scheduling profile: score =
//                3 x prefix (matched chunks, min-max normalized over the
//                workers holding any, others 0) + 2 x KV utilization
//                (1 - pages in use / pages) + 2 x queue ((max - waiting) /
//                (max - min) over the workers, 1 when all equal); highest
//                wins, ties at random. Decode workers by the same profile.
//   dynamo       Dynamo's KV router cost, temperature 0: overlap weight
//                1.0 x the prompt's blocks (16 tokens) the worker lacks +
//                the blocks of work already routed to it and not done;
//                lowest wins. Decode workers by their active blocks.
//
// Time is virtual; every cost comes from CostModel (defaults measured on the
// project's 2-core VM, docs/benchmarks.md). A prefill worker computes one
// prompt at a time, first come first served: the prompt's chunks it holds
// are reused, chunks the relay holds are fetched (when `relay`), the rest is
// computed; its cache is an LRU of `prefill_cache_chunks` chunks. The first
// token leaves with the prefill (TTFT); the KV crosses to decode while it is
// computed, so decode starts one chunk's transfer after the prefill ends.
// A decode worker runs steps of every admitted sequence (step time by batch
// size, CostModel::decode_step_ms) while pages and `max_batch` allow.
//
// Same seed, same trace for every policy. Thread-compatible.
#ifndef KVCAST_TOOLS_SIM_ROUTING_SIM_H_
#define KVCAST_TOOLS_SIM_ROUTING_SIM_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "services/scheduler/planner.h"
#include "services/scheduler/router.h"

namespace kvcast::sim {

enum class Policy { kKvcast, kRoundRobin, kAffinity, kLlmd, kDynamo };
const char* PolicyName(Policy p);

struct CostModel {
  // SmolLM2-135M Q4_1 on the `cpu` backend, 2 threads, AMD EPYC Zen 5, a
  // 1024-token context, 2026-11-28 (docs/benchmarks.md, "Routing at scale").
  double prefill_tokens_per_s = 1936;
  double prefill_overhead_ms = 2;
  // (batch, ms per step), linear between points, extrapolated from the last two.
  std::vector<std::pair<int, double>> decode_step_ms = {{1, 4.6}, {8, 23.0}, {32, 78.3}};
  // The KV track's, by default fp16 (see ForTrack).
  double kv_bytes_per_token = 23040;    // SmolLM2: 30 layers x K,V x 3 heads x 64 x 2 B
  double transfer_bytes_per_s = 1116.0 * (1 << 20);  // prefill -> relay -> decode, live
  double fetch_bytes_per_s = 2217.0 * (1 << 20);     // relay cache -> prefill worker
  double DecodeStepMs(int batch) const;
  // The KV costs of a track ("fp16", "int8", "ac") for SmolLM2: its bytes
  // per token relative to fp16 and kv_path_bench's measured rates through
  // the relay, live and from its cache (docs/benchmarks.md, 1024 tokens).
  // Others: NotFound.
  absl::Status ForTrack(const std::string& track);
};

struct Workload {
  int requests = 20000;
  double warmup_fraction = 0.1;  // first requests left out of the statistics
  double rate = 0;               // arrivals per second (Poisson); 0: see DefaultRate
  int system_prompts = 64;
  double zipf = 1.0;             // popularity of system prompt k is 1 / (k + 1)^zipf
  // Hot-prefix skew: every `hot_period_s` another system prompt (a fixed
  // random order) takes `hot_share` of the arrivals; 0 = off.
  double hot_share = 0;
  double hot_period_s = 60;
  int system_tokens_min = 512, system_tokens_max = 2048;
  int user_tokens_min = 32, user_tokens_max = 256;
  int output_tokens_min = 16, output_tokens_max = 128;
  uint64_t seed = 1;
  // A day: with day_s > 0, arrivals come for day_s seconds (`requests` is
  // ignored) at rate x (1 + (peak - 1) sin^2(pi t / day_s)): rising to
  // `peak` times the rate at midday and falling back.
  double day_s = 0;
  double peak = 4;
  // From shift_at x day_s on (0: never), user prompts are
  // shift_user_tokens times longer and system prompts come from a new pool
  // of shift_system_prompts (cold caches, less reuse).
  double shift_at = 0;
  double shift_user_tokens = 1;
  int shift_system_prompts = 64;
};

struct Cluster {
  int prefill = 8;
  int decode = 16;
  int chunk_tokens = 128;
  int page_tokens = 16;
  int prefill_cache_chunks = 256;  // per prefill worker
  int decode_pages = 8192;         // per decode worker
  int max_batch = 64;
  double heartbeat_s = 1.0;
  bool relay = true;
  scheduler::RouterOptions router;  // the kvcast policy's
};

// Who sets each role's worker count while the trace runs. kFixed: the
// Cluster's counts throughout. kPlanner: the scheduler's planner
// (services/scheduler/planner.h) every interval_s, fed the interval's
// arrivals, uncached prompt tokens computed and output tokens, and the cost
// model as the workers' measured capacity. kHpa: a CPU-utilisation HPA per
// role, as Kubernetes computes it: ceil(replicas x busy fraction / target),
// no change within 10% of the target, down only to the highest
// recommendation of the last hpa_downscale_window_s. A started worker
// serves (registers) start_latency_s later; a worker scaled down leaves the
// router at once and finishes what was routed to it. The Cluster's counts
// are those at t = 0. Scaling needs the kvcast policy.
enum class Scaler { kFixed, kPlanner, kHpa };
const char* ScalerName(Scaler s);

struct Scaling {
  Scaler scaler = Scaler::kFixed;
  double interval_s = 30;
  double start_latency_s = 60;
  // The SLOs a request must meet to count as served well (and the
  // planner's targets): time to first token, and mean inter-token latency.
  double slo_ttft_ms = 2000, slo_itl_ms = 100;
  scheduler::PlannerOptions planner;  // its interval and SLOs come from above
  double hpa_target = 0.6;
  double hpa_downscale_window_s = 300;
  int min_workers = 1, max_workers = 64;
  // Stop once more requests than this missed an SLO (-1: never): a search
  // over fixed splits learns a hopeless one early (Result::abandoned).
  int max_misses = -1;
};

// Arrival rate at which the prefill workers would be `utilization` busy if
// every request reused its system prompt (computing only its own tokens).
double DefaultRate(const Workload& w, const Cluster& c, const CostModel& m, double utilization);

struct Result {
  int requests = 0;           // counted (after warm-up)
  double hit_rate = 0;        // prompt tokens the prefill worker held itself
  double reuse_rate = 0;      // held or fetched from the relay
  double ttft_p50_ms = 0, ttft_p90_ms = 0, ttft_p99_ms = 0;
  double e2e_p50_ms = 0;
  // max / mean over workers: decode of the time-averaged batch, prefill of
  // busy time.
  double decode_balance = 0;
  double prefill_balance = 0;
  double output_tokens_per_s = 0;
  double simulated_s = 0;
  // Against Scaling's SLOs: the share of counted requests meeting both, and
  // the mean inter-token latency's p99.
  double slo_met = 0;
  double itl_p99_ms = 0;
  // Worker time from start (or t = 0) to leaving (or the last request's end).
  double prefill_worker_hours = 0, decode_worker_hours = 0;
  int prefill_changes = 0, decode_changes = 0;  // scaling decisions that changed a count
  // Per scaling interval (kPlanner, kHpa): its start, the workers serving
  // and starting at its end, its arrivals per second and TTFT p99 of them.
  struct Interval {
    double t = 0;
    int prefill = 0, decode = 0;
    double arrivals_per_s = 0, ttft_p99_ms = 0;
  };
  std::vector<Interval> timeline;
  // Stopped at Scaling::max_misses: only `requests` (all of the trace's)
  // and slo_met (at most this) are set.
  bool abandoned = false;
};

// The requests in the trace Simulate runs for these arguments (the day's,
// or workload.requests).
int TraceRequests(const Workload& workload, const Cluster& cluster, const CostModel& model);

absl::StatusOr<Result> Simulate(Policy policy, const Workload& workload, const Cluster& cluster,
                                const CostModel& model, const Scaling& scaling = Scaling());

}  // namespace kvcast::sim

#endif  // KVCAST_TOOLS_SIM_ROUTING_SIM_H_
