// `kvcast bench`: a prefix-sharing workload against a running cluster.
//
// Each request's prompt is one of `prefixes` shared random "system
// prompts" of prefix_tokens ids plus a random user suffix of suffix_tokens
// ids (ids uniform in [10, vocab), from a PRNG seeded with `seed`).
// Requests are greedy, ignore EOS and ask for max_tokens. They arrive as a
// Poisson process of `rate` per second (0: closed loop, as fast as the
// concurrency allows) with at most `concurrency` in flight; a request whose
// arrival finds every slot busy waits for one.
#ifndef KVCAST_TOOLS_CLI_BENCH_H_
#define KVCAST_TOOLS_CLI_BENCH_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "tools/cli/client_channel.h"

namespace kvcast::cli {

struct BenchOptions {
  std::string scheduler;
  TlsFiles tls;
  std::string api_key;  // empty: none
  int requests = 40;
  double rate = 2;  // requests/s; 0 = closed loop
  int concurrency = 8;
  int prefixes = 4;
  int prefix_tokens = 1024;
  int suffix_tokens = 32;
  int max_tokens = 16;
  uint64_t seed = 1;
  int vocab = 256;
  double deadline_s = 0;  // per request; 0: none
};

// Latencies in ms; TTFT and e2e as the client sees them (from sending the
// request), TBT the gaps between streamed deltas divided by their tokens.
struct BenchReport {
  int ok = 0, failed = 0;
  std::map<std::string, int> errors;  // "CODE: message" -> count
  double wall_s = 0;
  double ttft_p50 = 0, ttft_p90 = 0, ttft_p99 = 0;
  double tbt_p50 = 0, tbt_p99 = 0;
  // From the servers' Final.timings: TTFT percentiles over requests, and
  // percentiles over requests of each request's mean / p99 TBT.
  double server_ttft_p50 = 0, server_ttft_p99 = 0;
  double server_tbt_mean_p50 = 0, server_tbt_p99_p99 = 0;
  double e2e_p50 = 0, e2e_p99 = 0;
  double tokens_per_s = 0;  // generated tokens over wall time
  int64_t prompt_tokens = 0, cached_tokens = 0, generated_tokens = 0;
  double cached_share = 0;           // cached / prompt tokens
  double mean_transfer_bytes = 0;
  double mean_transfer_ms = 0;
  double handoff_share_of_ttft = 0;  // mean of handoff_ms / ttft_ms (server timings)
  // Every sample behind the percentiles (successful requests, in request
  // order): the client's TTFT and TBT gaps, the servers' TTFT.
  std::vector<double> ttft_samples_ms, tbt_samples_ms, server_ttft_samples_ms;
};

// Where a running benchmark is: called after each request ends.
struct BenchProgress {
  int done = 0, failed = 0, total = 0;
  double elapsed_s = 0;
};

// INVALID_ARGUMENT names the first bad option.
absl::Status ValidateBenchOptions(const BenchOptions& options);

// The prompts, in request order. Deterministic in `options`.
std::vector<std::vector<int32_t>> MakeBenchWorkload(const BenchOptions& options);

// Runs the workload. Errors only for a channel that cannot be made;
// failed requests are counted in the report. `progress` (optional) is called
// after each request, from the thread that ran it, one call at a time.
absl::StatusOr<BenchReport> RunBench(
    const BenchOptions& options,
    const std::function<void(const BenchProgress&)>& progress = nullptr);

std::string FormatBenchReport(const BenchReport& report);
nlohmann::json BenchReportJson(const BenchReport& report, const BenchOptions& options);

// Nearest-rank percentile (q in [0, 1]) of `values`; 0 when empty.
double Percentile(std::vector<double> values, double q);

}  // namespace kvcast::cli

#endif  // KVCAST_TOOLS_CLI_BENCH_H_
