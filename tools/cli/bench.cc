#include "tools/cli/bench.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "kvcast/v1/generation.grpc.pb.h"

namespace kvcast::cli {
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

struct Outcome {
  bool ok = false;
  std::string error;
  double ttft_ms = 0, e2e_ms = 0;
  std::vector<double> tbt_ms;
  v1::Final final;
};

Outcome RunOne(v1::Generation::Stub* stub, const std::vector<int32_t>& prompt,
               const BenchOptions& options) {
  v1::GenerateRequest req;
  for (int32_t id : prompt) req.mutable_token_ids()->add_ids(id);
  req.set_max_tokens(options.max_tokens);
  req.set_ignore_eos(true);
  grpc::ClientContext ctx;
  AddApiKey(&ctx, options.api_key);
  if (options.deadline_s > 0) {
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::microseconds(int64_t(options.deadline_s * 1e6)));
  }
  Outcome out;
  const Clock::time_point start = Clock::now();
  Clock::time_point last = start;
  bool first = true, got_final = false;
  auto reader = stub->Generate(&ctx, req);
  v1::GenerateResponse resp;
  while (reader->Read(&resp)) {
    if (resp.has_final()) {
      out.final = resp.final();
      got_final = true;
      continue;
    }
    const int n = resp.delta().token_ids_size();
    if (n == 0) continue;
    const Clock::time_point now = Clock::now();
    if (first) {
      out.ttft_ms = Ms(now - start);
      first = false;
    } else {
      for (int i = 0; i < n; ++i) out.tbt_ms.push_back(Ms(now - last) / n);
    }
    last = now;
  }
  grpc::Status st = reader->Finish();
  out.e2e_ms = Ms(Clock::now() - start);
  if (!st.ok()) {
    out.error = FromGrpc(st).ToString();
  } else if (!got_final) {
    out.error = "INTERNAL: the stream ended without a Final message";
  } else {
    out.ok = true;
  }
  return out;
}

}  // namespace

double Percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  size_t rank = size_t(std::ceil(q * double(values.size())));
  return values[std::min(values.size() - 1, rank == 0 ? 0 : rank - 1)];
}

absl::Status ValidateBenchOptions(const BenchOptions& o) {
  if (o.scheduler.empty()) return absl::InvalidArgumentError("--scheduler HOST:PORT is required");
  if (o.requests < 1) return absl::InvalidArgumentError("--requests must be at least 1");
  if (!(o.rate >= 0)) return absl::InvalidArgumentError("--rate must be >= 0");
  if (o.concurrency < 1) return absl::InvalidArgumentError("--concurrency must be at least 1");
  if (o.prefixes < 1) return absl::InvalidArgumentError("--prefixes must be at least 1");
  if (o.prefix_tokens < 0 || o.suffix_tokens < 0 || o.prefix_tokens + o.suffix_tokens < 1) {
    return absl::InvalidArgumentError("--prefix_tokens + --suffix_tokens must be at least 1");
  }
  if (o.max_tokens < 1) return absl::InvalidArgumentError("--max_tokens must be at least 1");
  if (o.vocab <= 10) return absl::InvalidArgumentError("--vocab must be above 10");
  return absl::OkStatus();
}

std::vector<std::vector<int32_t>> MakeBenchWorkload(const BenchOptions& o) {
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int32_t> token(10, o.vocab - 1);
  std::vector<std::vector<int32_t>> prefixes(o.prefixes);
  for (auto& p : prefixes) {
    for (int i = 0; i < o.prefix_tokens; ++i) p.push_back(token(rng));
  }
  std::uniform_int_distribution<int> pick(0, o.prefixes - 1);
  std::vector<std::vector<int32_t>> prompts;
  for (int r = 0; r < o.requests; ++r) {
    std::vector<int32_t> prompt = prefixes[pick(rng)];
    for (int i = 0; i < o.suffix_tokens; ++i) prompt.push_back(token(rng));
    prompts.push_back(std::move(prompt));
  }
  return prompts;
}

absl::StatusOr<BenchReport> RunBench(const BenchOptions& o,
                                     const std::function<void(const BenchProgress&)>& progress) {
  auto channel = MakeSchedulerChannel(o.scheduler, o.tls);
  if (!channel.ok()) return channel.status();
  auto stub = v1::Generation::NewStub(*channel);
  const std::vector<std::vector<int32_t>> prompts = MakeBenchWorkload(o);
  // Arrival offsets of a Poisson process (all 0 in a closed loop).
  std::vector<double> arrival_s(prompts.size(), 0.0);
  std::mt19937_64 rng(o.seed ^ 0x9e3779b97f4a7c15ull);
  if (o.rate > 0) {
    std::exponential_distribution<double> gap(o.rate);
    double t = 0;
    for (double& a : arrival_s) {  // the first request at 0
      a = t;
      t += gap(rng);
    }
  }
  std::vector<Outcome> outcomes(prompts.size());
  std::atomic<size_t> next{0};
  const Clock::time_point start = Clock::now();
  absl::Mutex progress_mu;
  BenchProgress so_far;
  so_far.total = int(prompts.size());
  std::vector<std::thread> threads;
  for (int w = 0; w < std::min<int>(o.concurrency, int(prompts.size())); ++w) {
    threads.emplace_back([&] {
      for (size_t i; (i = next.fetch_add(1)) < prompts.size();) {
        std::this_thread::sleep_until(start + std::chrono::microseconds(int64_t(arrival_s[i] * 1e6)));
        outcomes[i] = RunOne(stub.get(), prompts[i], o);
        if (progress) {
          absl::MutexLock lock(&progress_mu);
          ++so_far.done;
          so_far.failed += outcomes[i].ok ? 0 : 1;
          so_far.elapsed_s = std::chrono::duration<double>(Clock::now() - start).count();
          progress(so_far);
        }
      }
    });
  }
  for (auto& t : threads) t.join();

  BenchReport r;
  r.wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> ttft, tbt, e2e, server_ttft, server_tbt_mean, server_tbt_p99;
  double transfer_bytes = 0, transfer_ms = 0, handoff = 0;
  int handoff_n = 0;
  for (const Outcome& out : outcomes) {
    if (!out.ok) {
      ++r.failed;
      ++r.errors[out.error];
      continue;
    }
    ++r.ok;
    ttft.push_back(out.ttft_ms);
    e2e.push_back(out.e2e_ms);
    tbt.insert(tbt.end(), out.tbt_ms.begin(), out.tbt_ms.end());
    const v1::Usage& u = out.final.usage();
    const v1::Timings& t = out.final.timings();
    server_ttft.push_back(t.ttft_ms());
    server_tbt_mean.push_back(t.mean_tbt_ms());
    server_tbt_p99.push_back(t.p99_tbt_ms());
    r.prompt_tokens += u.prompt_tokens();
    r.cached_tokens += u.cached_prompt_tokens();
    r.generated_tokens += u.generated_tokens();
    transfer_bytes += double(t.transfer_bytes());
    transfer_ms += t.transfer_ms();
    if (t.ttft_ms() > 0) {
      handoff += t.handoff_ms() / t.ttft_ms();
      ++handoff_n;
    }
  }
  r.ttft_p50 = Percentile(ttft, 0.5);
  r.ttft_p90 = Percentile(ttft, 0.9);
  r.ttft_p99 = Percentile(ttft, 0.99);
  r.tbt_p50 = Percentile(tbt, 0.5);
  r.tbt_p99 = Percentile(tbt, 0.99);
  r.server_ttft_p50 = Percentile(server_ttft, 0.5);
  r.server_ttft_p99 = Percentile(server_ttft, 0.99);
  r.server_tbt_mean_p50 = Percentile(server_tbt_mean, 0.5);
  r.server_tbt_p99_p99 = Percentile(server_tbt_p99, 0.99);
  r.e2e_p50 = Percentile(e2e, 0.5);
  r.e2e_p99 = Percentile(e2e, 0.99);
  r.tokens_per_s = r.wall_s > 0 ? double(r.generated_tokens) / r.wall_s : 0;
  r.cached_share = r.prompt_tokens > 0 ? double(r.cached_tokens) / double(r.prompt_tokens) : 0;
  if (r.ok > 0) {
    r.mean_transfer_bytes = transfer_bytes / r.ok;
    r.mean_transfer_ms = transfer_ms / r.ok;
  }
  r.handoff_share_of_ttft = handoff_n > 0 ? handoff / handoff_n : 0;
  r.ttft_samples_ms = std::move(ttft);
  r.tbt_samples_ms = std::move(tbt);
  r.server_ttft_samples_ms = std::move(server_ttft);
  return r;
}

std::string FormatBenchReport(const BenchReport& r) {
  std::string s = absl::StrFormat(
      "requests: %d ok, %d failed in %.2f s\n"
      "TTFT ms:  p50 %.1f  p90 %.1f  p99 %.1f  (server: p50 %.1f  p99 %.1f)\n"
      "TBT ms:   p50 %.2f  p99 %.2f  (server: per-request mean p50 %.2f, p99 p99 %.2f)\n"
      "e2e ms:   p50 %.1f  p99 %.1f\n"
      "throughput: %.1f generated tokens/s (%d tokens)\n"
      "cached prompt tokens: %.1f%% (%d of %d)\n"
      "KV transfer: mean %.0f bytes, %.2f ms; handoff share of TTFT %.1f%%\n",
      r.ok, r.failed, r.wall_s, r.ttft_p50, r.ttft_p90, r.ttft_p99, r.server_ttft_p50, r.server_ttft_p99,
      r.tbt_p50, r.tbt_p99, r.server_tbt_mean_p50, r.server_tbt_p99_p99, r.e2e_p50,
      r.e2e_p99, r.tokens_per_s, r.generated_tokens, 100 * r.cached_share, r.cached_tokens,
      r.prompt_tokens, r.mean_transfer_bytes, r.mean_transfer_ms, 100 * r.handoff_share_of_ttft);
  for (const auto& [error, n] : r.errors) absl::StrAppend(&s, "  ", n, "x ", error, "\n");
  return s;
}

nlohmann::json BenchReportJson(const BenchReport& r, const BenchOptions& o) {
  nlohmann::json errors = nlohmann::json::object();
  for (const auto& [error, n] : r.errors) errors[error] = n;
  return {
      {"options",
       {{"scheduler", o.scheduler}, {"requests", o.requests}, {"rate", o.rate},
        {"concurrency", o.concurrency}, {"prefixes", o.prefixes},
        {"prefix_tokens", o.prefix_tokens}, {"suffix_tokens", o.suffix_tokens},
        {"max_tokens", o.max_tokens}, {"seed", o.seed}, {"vocab", o.vocab}}},
      {"requests_ok", r.ok},
      {"requests_failed", r.failed},
      {"errors", errors},
      {"wall_s", r.wall_s},
      {"ttft_ms", {{"p50", r.ttft_p50}, {"p90", r.ttft_p90}, {"p99", r.ttft_p99}}},
      {"tbt_ms", {{"p50", r.tbt_p50}, {"p99", r.tbt_p99}}},
      {"server_ttft_ms", {{"p50", r.server_ttft_p50}, {"p99", r.server_ttft_p99}}},
      {"server_tbt_ms", {{"mean_p50", r.server_tbt_mean_p50}, {"p99_p99", r.server_tbt_p99_p99}}},
      {"e2e_ms", {{"p50", r.e2e_p50}, {"p99", r.e2e_p99}}},
      {"tokens_per_s", r.tokens_per_s},
      {"prompt_tokens", r.prompt_tokens},
      {"cached_prompt_tokens", r.cached_tokens},
      {"generated_tokens", r.generated_tokens},
      {"cached_share", r.cached_share},
      {"mean_transfer_bytes", r.mean_transfer_bytes},
      {"mean_transfer_ms", r.mean_transfer_ms},
      {"handoff_share_of_ttft", r.handoff_share_of_ttft},
      {"results",
       {{"ttft_ms", r.ttft_samples_ms},
        {"tbt_ms", r.tbt_samples_ms},
        {"server_ttft_ms", r.server_ttft_samples_ms}}},
  };
}

}  // namespace kvcast::cli
