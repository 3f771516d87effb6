// autoscale_sim: a day of traffic on a simulated kvcast cluster, its worker
// counts set by the scheduler's planner, by a CPU-utilisation HPA, and by
// the best fixed prefill:decode split chosen in hindsight (the fewest
// workers that meet the SLOs for the day); prints one table and, with
// --json FILE, writes a result file (tools/bench/result_file.h) with the
// table's rows and the autoscalers' worker counts per interval.
//
//   bazel run -c opt //tools/sim:autoscale_sim -- --day_s 3600 --peak 4
//
// The day (tools/sim/routing_sim.h, Workload): arrivals rise `peak` times
// and fall; halfway, user prompts grow --shift_user_tokens times and system
// prompts come from a new, larger pool (less prefix reuse).
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "services/common/log.h"
#include "tools/bench/result_file.h"
#include "tools/sim/routing_sim.h"

ABSL_FLAG(double, day_s, 3600, "length of the simulated day, seconds");
ABSL_FLAG(double, peak, 4, "midday arrival rate over the start's");
ABSL_FLAG(double, base_utilization, 0.7,
          "start-of-day rate: this fraction of --base_prefill workers' capacity with every "
          "system prompt reused");
ABSL_FLAG(int, base_prefill, 2, "see --base_utilization");
ABSL_FLAG(double, shift_at, 0.5, "fraction of the day at which the prompts shift (0: never)");
ABSL_FLAG(double, shift_user_tokens, 4, "user prompts this many times longer after the shift");
ABSL_FLAG(int, shift_system_prompts, 256, "system prompts in the pool after the shift");
ABSL_FLAG(double, slo_ttft_ms, 2000, "time-to-first-token SLO");
ABSL_FLAG(double, slo_itl_ms, 100, "mean inter-token latency SLO");
ABSL_FLAG(double, interval_s, 30, "scaling interval");
ABSL_FLAG(double, start_latency_s, 60, "from a scale-up decision to the worker serving");
ABSL_FLAG(double, hpa_target, 0.6, "the HPA's CPU utilisation target");
ABSL_FLAG(int, max_fixed, 24, "largest worker count per role the hindsight search tries");
ABSL_FLAG(double, slo_goal, 0.99, "share of requests meeting both SLOs for a split to qualify");
ABSL_FLAG(uint64_t, seed, 1, "trace seed");
ABSL_FLAG(std::string, json, "",
          "write the table and the autoscalers' worker counts per interval here (result file)");
ABSL_FLAG(std::string, fixed, "",
          "PREFILLxDECODE: the fixed split to compare with, instead of searching for the best");

namespace kvcast::sim {
namespace {

struct Run {
  std::string name;
  Result result;
  int prefill = 0, decode = 0;  // a fixed split's
};

absl::StatusOr<Result> Day(const Workload& w, Cluster c, Scaling s) {
  const absl::Time t0 = absl::Now();
  auto r = Simulate(Policy::kKvcast, w, c, CostModel(), s);
  if (r.ok()) {
    std::fprintf(stderr, "autoscale_sim: %s from %dx%d: %d requests, SLOs met %s%.2f%% (%.1f s)\n",
                 ScalerName(s.scaler), c.prefill, c.decode, r->requests,
                 r->abandoned ? "under " : "", 100 * r->slo_met,
                 absl::ToDoubleSeconds(absl::Now() - t0));
  }
  return r;
}

// The fewest workers (P + D) whose fixed split meets the goal all day: for
// each P, the smallest D that does (a binary search; the SLOs met grow with
// D, and a larger P needs no more D than a smaller one did), until one
// more prefill worker cannot beat the best. A split that
// misses the goal is abandoned as soon as it has (Scaling::max_misses).
absl::StatusOr<Run> BestFixed(const Workload& w, Scaling fixed, int requests) {
  const int most = absl::GetFlag(FLAGS_max_fixed);
  const double goal = absl::GetFlag(FLAGS_slo_goal);
  fixed.max_misses = int((1 - goal) * requests);
  std::optional<Run> best;
  int best_workers = 0;
  int d_cap = most;  // a larger P needs no more decode workers than a smaller one did
  for (int p = 1; p <= most && (!best || p + 1 < best_workers); ++p) {
    auto day = [&](int decode) {
      Cluster c;
      c.prefill = p;
      c.decode = decode;
      return Day(w, c, fixed);
    };
    auto meets = [&](const Result& r) { return !r.abandoned && r.slo_met >= goal; };
    auto top = day(d_cap);
    if (!top.ok()) return top.status();
    if (!meets(*top)) continue;  // not even with that many decode workers
    Result at_hi = *top;
    int lo = 1, hi = d_cap;  // hi meets the goal; the smallest that does is in [lo, hi]
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      auto r = day(mid);
      if (!r.ok()) return r.status();
      if (meets(*r)) {
        hi = mid;
        at_hi = *r;
      } else {
        lo = mid + 1;
      }
    }
    d_cap = hi;
    if (!best || p + hi < best_workers) {
      best = Run{absl::StrCat("best fixed (", p, " prefill + ", hi, " decode)"), at_hi, p, hi};
      best_workers = p + hi;
    }
  }
  if (!best) return absl::NotFoundError("no fixed split up to --max_fixed meets the goal");
  return *best;
}

int Main(nlohmann::json header) {
  Workload w;
  w.day_s = absl::GetFlag(FLAGS_day_s);
  w.peak = absl::GetFlag(FLAGS_peak);
  w.shift_at = absl::GetFlag(FLAGS_shift_at);
  w.shift_user_tokens = absl::GetFlag(FLAGS_shift_user_tokens);
  w.shift_system_prompts = absl::GetFlag(FLAGS_shift_system_prompts);
  w.seed = absl::GetFlag(FLAGS_seed);
  w.warmup_fraction = 0;  // the whole day counts
  Cluster base;
  base.prefill = absl::GetFlag(FLAGS_base_prefill);
  w.rate = DefaultRate(w, base, CostModel(), absl::GetFlag(FLAGS_base_utilization));
  Scaling s;
  s.slo_ttft_ms = absl::GetFlag(FLAGS_slo_ttft_ms);
  s.slo_itl_ms = absl::GetFlag(FLAGS_slo_itl_ms);
  s.interval_s = absl::GetFlag(FLAGS_interval_s);
  s.start_latency_s = absl::GetFlag(FLAGS_start_latency_s);
  s.hpa_target = absl::GetFlag(FLAGS_hpa_target);
  std::printf("A %.0f s day: %.1f arrivals/s rising %.1fx and back; at %.0f%% of it user "
              "prompts %.1fx longer and %d new system prompts. SLOs: TTFT %.0f ms, mean ITL "
              "%.0f ms, for %.0f%% of requests. Workers start in %.0f s; scaling every %.0f s.\n\n",
              w.day_s, w.rate, w.peak, 100 * w.shift_at, w.shift_user_tokens,
              w.shift_system_prompts, s.slo_ttft_ms, s.slo_itl_ms,
              100 * absl::GetFlag(FLAGS_slo_goal), s.start_latency_s, s.interval_s);
  std::vector<Run> runs;
  absl::StatusOr<Run> fixed;
  if (const std::string spec = absl::GetFlag(FLAGS_fixed); !spec.empty()) {
    Cluster c;
    if (std::sscanf(spec.c_str(), "%dx%d", &c.prefill, &c.decode) != 2) {
      std::fprintf(stderr, "autoscale_sim: --fixed wants PREFILLxDECODE\n");
      return 2;
    }
    auto r = Day(w, c, s);
    if (r.ok()) fixed = Run{absl::StrCat("fixed (", spec, ")"), *r, c.prefill, c.decode};
    else fixed = r.status();
  } else {
    fixed = BestFixed(w, s, TraceRequests(w, base, CostModel()));  // the same for every split
  }
  if (!fixed.ok()) {
    std::fprintf(stderr, "autoscale_sim: %s\n", std::string(fixed.status().message()).c_str());
    return 2;
  }
  runs.push_back(*fixed);
  for (Scaler scaler : {Scaler::kPlanner, Scaler::kHpa}) {
    Scaling a = s;
    a.scaler = scaler;
    // Autoscalers start from the fixed split (the deployment's configured
    // replicas) and scale from there.
    Cluster start;
    start.prefill = fixed->prefill;
    start.decode = fixed->decode;
    auto r = Day(w, start, a);
    if (!r.ok()) {
      std::fprintf(stderr, "autoscale_sim: %s\n", std::string(r.status().message()).c_str());
      return 2;
    }
    runs.push_back({scaler == Scaler::kPlanner
                        ? "planner"
                        : absl::StrCat("CPU HPA (target ", int(100 * s.hpa_target), "%)"),
                    *r});
  }
  const double fixed_hours =
      runs[0].result.prefill_worker_hours + runs[0].result.decode_worker_hours;
  std::printf("| scaling | SLOs met | TTFT p99 ms | ITL p99 ms | prefill worker-h | decode "
              "worker-h | worker-h vs best fixed | changes/h (prefill, decode) |\n"
              "|---|---|---|---|---|---|---|---|\n");
  const double day_h = w.day_s / 3600;
  for (const Run& run : runs) {
    const Result& r = run.result;
    const double h = r.prefill_worker_hours + r.decode_worker_hours;
    std::printf("| %s | %.2f%% | %.0f | %.0f | %.2f | %.2f | %+.1f%% | %.1f, %.1f |\n",
                run.name.c_str(), 100 * r.slo_met, r.ttft_p99_ms, r.itl_p99_ms,
                r.prefill_worker_hours, r.decode_worker_hours, 100 * (h / fixed_hours - 1),
                r.prefill_changes / day_h, r.decode_changes / day_h);
  }
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    nlohmann::json rows = nlohmann::json::array();
    for (size_t i = 0; i < runs.size(); ++i) {
      const Result& r = runs[i].result;
      nlohmann::json timeline = nlohmann::json::array();
      for (const Result::Interval& iv : r.timeline) {
        timeline.push_back({{"t_s", iv.t}, {"prefill", iv.prefill}, {"decode", iv.decode},
                            {"arrivals_per_s", iv.arrivals_per_s},
                            {"ttft_p99_ms", iv.ttft_p99_ms}});
      }
      rows.push_back({{"scaling", i == 0 ? std::string("fixed") : ScalerName(i == 1 ? Scaler::kPlanner
                                                                       : Scaler::kHpa)},
                      {"name", runs[i].name}, {"prefill", runs[i].prefill},
                      {"decode", runs[i].decode}, {"requests", r.requests},
                      {"slo_met", r.slo_met}, {"ttft_p99_ms", r.ttft_p99_ms},
                      {"itl_p99_ms", r.itl_p99_ms},
                      {"prefill_worker_hours", r.prefill_worker_hours},
                      {"decode_worker_hours", r.decode_worker_hours},
                      {"prefill_changes", r.prefill_changes},
                      {"decode_changes", r.decode_changes}, {"timeline", timeline}});
    }
    header.update({{"day_s", w.day_s}, {"interval_s", s.interval_s},
                   {"slo_ttft_ms", s.slo_ttft_ms}, {"slo_itl_ms", s.slo_itl_ms},
                   {"slo_goal", absl::GetFlag(FLAGS_slo_goal)}});
    if (absl::Status st = bench::WriteResultFile(path, std::move(header), std::move(rows));
        !st.ok()) {
      std::fprintf(stderr, "autoscale_sim: %s\n", st.ToString().c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace kvcast::sim

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "autoscale_sim: the planner against a CPU HPA and the best fixed split, over a "
      "simulated day (tools/sim/routing_sim.h)");
  nlohmann::json header = kvcast::bench::ResultHeader("autoscale_sim", argc, argv);
  absl::ParseCommandLine(argc, argv);
  // The registry logs every worker joining and leaving; dozens of days here.
  kvcast::services::Log().set_level(spdlog::level::warn);
  return kvcast::sim::Main(std::move(header));
}
