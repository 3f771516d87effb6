// kvcast: the command-line tool.
//
//   kvcast generate --model DIR [--backend cpu|cuda --device N] --prompt TEXT
//       [sampling flags]
//     Runs the engine in this process; streams text to stdout, timings to
//     stderr.
//   kvcast generate --scheduler HOST:PORT (--prompt TEXT | --prompt_ids 1,2,3)
//       [--max_tokens --temperature --top_k --top_p --seed --stop STR
//        --ignore_eos --request_id --deadline_s --ca --cert --key --api_key]
//     One streaming Generate call to a cluster; text deltas to stdout, the
//     Final (finish reason, usage, TTFT/TBT, KV transfer, workers) to stderr.
//   kvcast cluster up --model DIR [--prefill 1 --decode 1 --relay
//       --work_dir build/cluster --scheduler_port 50051 --http_port 8000 --http_tls
//       --kv_cache_mb 256]
//     A local cluster in the foreground until SIGINT/SIGTERM; the scheduler
//     serves the OpenAI-compatible HTTP API on --http_port (-1: off).
//   kvcast bench --scheduler HOST:PORT [--requests 40 --rate 2
//       --concurrency 8 --prefixes 4 --prefix_tokens 1024 --suffix_tokens 32
//       --max_tokens 16 --seed 1 --vocab 256 --json FILE --plot FILE.svg
//       --allow_failures]
//     A prefix-sharing workload; latency percentiles, throughput, cache and
//     KV-transfer numbers; a progress line on stderr while it runs; --plot
//     writes the TTFT and TBT distributions as an SVG file.
// Exit status: 0 ok, 1 failure (e.g. a gRPC error, a failed bench request),
// 2 bad usage.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tools/bench/result_file.h"
#include "tools/cli/bench.h"
#include "tools/cli/cluster_cmd.h"
#include "tools/cli/latency_plot.h"
#include "tools/cli/local_generate.h"
#include "tools/cli/remote_generate.h"

// generate
ABSL_FLAG(std::string, model, "", ".gguf file or HF model directory (generate: run in-process; cluster up: serve it)");
ABSL_FLAG(std::string, scheduler, "", "scheduler HOST:PORT (generate, bench)");
ABSL_FLAG(std::string, prompt, "", "prompt text");
ABSL_FLAG(std::string, prompt_ids, "", "prompt as comma-separated token ids (instead of --prompt)");
ABSL_FLAG(std::optional<int>, max_tokens, std::nullopt, "tokens to generate at most (generate: 64, bench: 16)");
ABSL_FLAG(double, temperature, 0.0, "0 = greedy");
ABSL_FLAG(int, top_k, 0, "0 = off");
ABSL_FLAG(double, top_p, 1.0, "nucleus sampling mass");
ABSL_FLAG(double, repetition_penalty, 1.0, "HF-style repetition penalty");
ABSL_FLAG(std::optional<uint64_t>, seed, std::nullopt, "sampling seed (generate: 0); workload seed (bench: 1)");
ABSL_FLAG(bool, ignore_eos, false, "keep generating past end-of-sequence");
ABSL_FLAG(std::string, stop, "", "stop string (--scheduler only)");
ABSL_FLAG(std::string, request_id, "", "request id (--scheduler only)");
ABSL_FLAG(double, deadline_s, 0, "per-request deadline in seconds; 0 = none");
ABSL_FLAG(std::string, ca, "", "CA (PEM) verifying the scheduler: TLS");
ABSL_FLAG(std::string, api_key, "",
          "API key for a scheduler with --api_keys_file (default: $KVCAST_API_KEY)");
ABSL_FLAG(std::string, cert, "", "client certificate (PEM) for mutual TLS");
ABSL_FLAG(std::string, key, "", "client key (PEM) for mutual TLS");
ABSL_FLAG(int, kv_cache_mb, 256, "KV page pool size in MiB (per worker)");
ABSL_FLAG(std::string, backend, "cpu", "generate --model, cluster up: compute backend, cpu (Q8 weights), cpu-bf16, cpu-f32 or cuda (where built)");
ABSL_FLAG(int, device, 0, "generate --model: GPU index for --backend=cuda");
ABSL_FLAG(bool, ids, false, "print token ids instead of text");
ABSL_FLAG(std::string, kv_cache_precision, "fp16",
          "generate --model: KV values rounded to fp16, as the workers keep them by default "
          "(the same greedy tokens as a cluster), or fp32 (HF's float32 reference)");
// cluster up
ABSL_FLAG(int, prefill, 1, "prefill workers");
ABSL_FLAG(int, decode, 1, "decode workers");
ABSL_FLAG(int, schedulers, 1,
          "scheduler replicas (cluster up): every worker registers with each; the first "
          "takes --scheduler_port");
ABSL_FLAG(bool, relay, true, "run a MoQT relay (false: KV moves worker to worker)");
ABSL_FLAG(std::string, work_dir, "build/cluster", "logs and certificates");
ABSL_FLAG(int, scheduler_port, 50051, "scheduler gRPC port (0: a free one)");
ABSL_FLAG(int, http_port, 8000, "scheduler's OpenAI-compatible HTTP port (0: a free one, -1: off)");
ABSL_FLAG(bool, restart, true,
          "cluster up: spawn a process that exits again, same flags and ports (at once, then "
          "after 1 s, doubling while it keeps exiting within 30 s of its start, up to 30 s)");
ABSL_FLAG(bool, http_tls, false,
          "cluster up: HTTPS on the HTTP port, with the cluster's development certificate "
          "(WORK_DIR/certs/server.pem, CA certs/ca.pem)");
ABSL_FLAG(bool, autoscale, false,
          "cluster up: workers follow the scheduler's planner (kvcast_planner_desired_replicas): "
          "one started or drained per role every --autoscale_interval_s, within "
          "1..--autoscale_max_workers; the planner runs every 5 s unless --scheduler_flags say");
ABSL_FLAG(double, autoscale_interval_s, 5, "cluster up --autoscale: seconds between steps");
ABSL_FLAG(int, autoscale_max_workers, 4, "cluster up --autoscale: most workers of a role");
ABSL_FLAG(std::string, bin_dir, "", "directory with the kvcast-* binaries (default: found)");
ABSL_FLAG(std::string, scheduler_flags, "", "extra scheduler flags, space-separated");
ABSL_FLAG(std::string, prefill_flags, "", "extra prefill flags, space-separated");
ABSL_FLAG(std::string, decode_flags, "", "extra decode flags, space-separated");
ABSL_FLAG(std::string, relay_flags, "", "extra relay flags, space-separated");
// bench
ABSL_FLAG(int, requests, 40, "requests to send");
ABSL_FLAG(double, rate, 2, "Poisson arrival rate in requests/s; 0 = closed loop");
ABSL_FLAG(int, concurrency, 8, "requests in flight at most");
ABSL_FLAG(int, prefixes, 4, "distinct shared prompt prefixes");
ABSL_FLAG(int, prefix_tokens, 1024, "tokens per shared prefix");
ABSL_FLAG(int, suffix_tokens, 32, "random tokens after the prefix");
ABSL_FLAG(int, vocab, 256, "token ids are drawn from [10, vocab)");
ABSL_FLAG(std::string, json, "",
          "also write the results as JSON to this file (with the date, CPU, command, commit and "
          "every latency sample)");
ABSL_FLAG(std::string, plot, "", "also write the latency distributions to this SVG file");
ABSL_FLAG(bool, allow_failures, false, "exit 0 even if requests failed");

namespace kvcast::cli {
namespace {

constexpr char kUsage[] =
    "usage:\n"
    "  kvcast generate --model DIR [--backend cpu|cuda --device N] --prompt TEXT [flags]\n"
    "  kvcast generate --scheduler HOST:PORT (--prompt TEXT | --prompt_ids 1,2,3) [flags]\n"
    "  kvcast cluster up --model DIR [--prefill N --decode M --relay --work_dir DIR --autoscale]\n"
    "  kvcast bench --scheduler HOST:PORT [--requests --rate --concurrency ...] [--json FILE]\n"
    "      [--plot FILE.svg]\n"
    "kvcast COMMAND --help lists that command's flags.\n";

int Usage(const std::string& why) {
  std::fprintf(stderr, "kvcast: %s\n%s", why.c_str(), kUsage);
  return 2;
}

// Each command's flags, in the order --help lists them.
struct CommandHelp {
  const char* command;
  const char* summary;
  std::vector<const char*> flags;
};
const std::vector<CommandHelp>& Commands() {
  static const auto* commands = new std::vector<CommandHelp>{
      {"generate", "one generation: in-process with --model, or from a cluster with --scheduler",
       {"model", "scheduler", "prompt", "prompt_ids", "max_tokens", "temperature", "top_k",
        "top_p", "repetition_penalty", "seed", "ignore_eos", "stop", "request_id", "deadline_s",
        "ca", "cert", "key", "api_key", "kv_cache_mb", "backend", "device", "ids",
        "kv_cache_precision"}},
      {"cluster up", "a local cluster (scheduler, workers, relay) in the foreground",
       {"model", "prefill", "decode", "relay", "work_dir", "scheduler_port", "http_port",
        "http_tls", "kv_cache_mb", "backend", "bin_dir", "restart", "autoscale",
        "autoscale_interval_s", "autoscale_max_workers", "scheduler_flags", "prefill_flags",
        "decode_flags", "relay_flags"}},
      {"bench", "a shared-prefix workload against a cluster; latency and throughput",
       {"scheduler", "requests", "rate", "concurrency", "prefixes", "prefix_tokens",
        "suffix_tokens", "max_tokens", "seed", "vocab", "deadline_s", "json", "plot",
        "allow_failures",
        "ca", "cert", "key", "api_key"}},
  };
  return *commands;
}

// `kvcast --help` (every command) or `kvcast COMMAND --help` (its flags).
int Help(const std::string& command) {
  const auto flags = absl::GetAllFlags();
  std::string out = "kvcast: disaggregated prefill/decode LLM serving over MoQT.\n";
  for (const CommandHelp& c : Commands()) {
    if (!command.empty() && command != c.command) continue;
    absl::StrAppend(&out, "\nkvcast ", c.command, ": ", c.summary, "\n");
    if (command.empty()) continue;
    for (const char* name : c.flags) {
      auto it = flags.find(name);
      if (it == flags.end()) continue;
      absl::StrAppend(&out, "  --", name, "  ", it->second->Help(), " (default: ",
                      it->second->DefaultValue().empty() ? "\"\"" : it->second->DefaultValue(),
                      ")\n");
    }
  }
  if (command.empty()) {
    absl::StrAppend(&out, "\n", kUsage);
  } else if (out.find("\nkvcast " + command + ":") == std::string::npos) {
    return Usage("unknown command '" + command + "'");
  }
  std::fputs(out.c_str(), stdout);
  return 0;
}

int Result(const absl::Status& s) {
  if (s.ok()) return 0;
  std::fprintf(stderr, "kvcast: %s\n", s.ToString().c_str());
  return 1;
}

TlsFiles Tls() { return {absl::GetFlag(FLAGS_ca), absl::GetFlag(FLAGS_cert), absl::GetFlag(FLAGS_key)}; }
std::string ApiKey() {
  if (!absl::GetFlag(FLAGS_api_key).empty()) return absl::GetFlag(FLAGS_api_key);
  const char* env = std::getenv("KVCAST_API_KEY");
  return env == nullptr ? "" : env;
}

int Generate() {
  const std::string model = absl::GetFlag(FLAGS_model), scheduler = absl::GetFlag(FLAGS_scheduler);
  if (model.empty() == scheduler.empty()) return Usage("generate needs exactly one of --model and --scheduler");
  GenerateOptions o;
  o.prompt = absl::GetFlag(FLAGS_prompt);
  if (!absl::GetFlag(FLAGS_prompt_ids).empty()) {
    auto ids = ParseTokenIds(absl::GetFlag(FLAGS_prompt_ids));
    if (!ids.ok()) return Usage(absl::StrCat("--prompt_ids: ", ids.status().message()));
    o.prompt_ids = *ids;
  } else if (o.prompt.empty()) {
    return Usage("--prompt or --prompt_ids is required");
  }
  o.max_tokens = absl::GetFlag(FLAGS_max_tokens).value_or(64);
  o.temperature = float(absl::GetFlag(FLAGS_temperature));
  o.top_k = absl::GetFlag(FLAGS_top_k);
  o.top_p = float(absl::GetFlag(FLAGS_top_p));
  o.repetition_penalty = float(absl::GetFlag(FLAGS_repetition_penalty));
  o.seed = absl::GetFlag(FLAGS_seed).value_or(0);
  o.ignore_eos = absl::GetFlag(FLAGS_ignore_eos);
  o.print_ids = absl::GetFlag(FLAGS_ids);
  if (!model.empty()) {
    const std::string precision = absl::GetFlag(FLAGS_kv_cache_precision);
    if (precision != "fp32" && precision != "fp16") {
      return Usage("--kv_cache_precision: '" + precision + "' is not fp32 or fp16");
    }
    return Result(LocalGenerate({model, absl::GetFlag(FLAGS_kv_cache_mb),
                                 absl::GetFlag(FLAGS_backend), absl::GetFlag(FLAGS_device),
                                 precision == "fp16"},
                                o));
  }
  RemoteOptions r;
  r.scheduler = scheduler;
  r.tls = Tls();
  r.api_key = ApiKey();
  r.stop = absl::GetFlag(FLAGS_stop);
  r.request_id = absl::GetFlag(FLAGS_request_id);
  r.deadline_s = absl::GetFlag(FLAGS_deadline_s);
  if (r.tls.cert.empty() != r.tls.key.empty()) return Usage("--cert and --key go together");
  return Result(RemoteGenerate(o, r));
}

std::vector<std::string> Words(const std::string& s) {
  return absl::StrSplit(s, ' ', absl::SkipWhitespace());
}

int ClusterUpCommand() {
  cluster::ClusterOptions o;
  o.model_dir = absl::GetFlag(FLAGS_model);
  o.num_prefill = absl::GetFlag(FLAGS_prefill);
  o.num_decode = absl::GetFlag(FLAGS_decode);
  o.num_schedulers = absl::GetFlag(FLAGS_schedulers);
  o.relay = absl::GetFlag(FLAGS_relay);
  o.work_dir = absl::GetFlag(FLAGS_work_dir);
  o.scheduler_port = absl::GetFlag(FLAGS_scheduler_port);
  o.http_port = absl::GetFlag(FLAGS_http_port);
  o.http_tls = absl::GetFlag(FLAGS_http_tls);
  o.kv_cache_mb = absl::GetFlag(FLAGS_kv_cache_mb);
  o.backend = absl::GetFlag(FLAGS_backend);
  if (const std::string dir = absl::GetFlag(FLAGS_bin_dir); !dir.empty()) {
    o.scheduler_bin = dir + "/kvcast-scheduler";
    o.prefill_bin = dir + "/kvcast-prefill";
    o.decode_bin = dir + "/kvcast-decode";
    o.relay_bin = dir + "/kvcast-relay";
  }
  o.scheduler_flags = Words(absl::GetFlag(FLAGS_scheduler_flags));
  o.prefill_flags = Words(absl::GetFlag(FLAGS_prefill_flags));
  o.decode_flags = Words(absl::GetFlag(FLAGS_decode_flags));
  o.relay_flags = Words(absl::GetFlag(FLAGS_relay_flags));
  std::optional<AutoscaleOptions> autoscale;
  if (absl::GetFlag(FLAGS_autoscale)) {
    autoscale.emplace();
    autoscale->interval = absl::Seconds(absl::GetFlag(FLAGS_autoscale_interval_s));
    autoscale->max_workers = absl::GetFlag(FLAGS_autoscale_max_workers);
    if (!(autoscale->interval > absl::ZeroDuration()) || autoscale->max_workers < 1) {
      return Usage("--autoscale_interval_s must be positive and --autoscale_max_workers >= 1");
    }
    // The user's own --planner_interval_s, later in the list, wins.
    o.scheduler_flags.insert(o.scheduler_flags.begin(), "--planner_interval_s=5");
  }
  if (absl::Status s = ValidateClusterUp(o); !s.ok()) return Usage(std::string(s.message()));
  return Result(ClusterUp(o, absl::GetFlag(FLAGS_restart), autoscale));
}

// The command line as typed (set by main), for --json's header.
int g_argc = 0;
char** g_argv = nullptr;

// "[bench] 12/40 requests (1 failed), 6.3 s": rewritten in place on a
// terminal, else a line at every tenth of the requests.
void PrintProgress(const BenchProgress& p) {
  static const bool tty = isatty(STDERR_FILENO);
  const std::string line = absl::StrFormat("[bench] %d/%d requests (%d failed), %.1f s", p.done,
                                           p.total, p.failed, p.elapsed_s);
  if (tty) {
    std::fprintf(stderr, "\r%s%s", line.c_str(), p.done == p.total ? "\n" : "");
  } else if (p.done == p.total || p.done % std::max(1, p.total / 10) == 0) {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
}

LatencyPlot BenchPlot(const BenchReport& r, const BenchOptions& o) {
  LatencyPlot plot;
  plot.title = absl::StrFormat(
      "kvcast bench: %d requests, %s, %d prefixes of %d tokens + %d, %d tokens each",
      o.requests, o.rate > 0 ? absl::StrFormat("%g/s", o.rate) : std::string("closed loop"),
      o.prefixes, o.prefix_tokens, o.suffix_tokens, o.max_tokens);
  plot.machine = absl::StrFormat("Machine (client): %s, %u cores · %s · scheduler %s",
                                 bench::CpuModel(), std::thread::hardware_concurrency(),
                                 bench::TodayUtc(), o.scheduler);
  plot.panels = {{"time to first token",
                  {{"as the client saw it", r.ttft_samples_ms},
                   {"as the scheduler measured it", r.server_ttft_samples_ms}}},
                 {"time between tokens", {{"as the client saw it", r.tbt_samples_ms}}}};
  return plot;
}

int BenchCommand() {
  BenchOptions o;
  o.scheduler = absl::GetFlag(FLAGS_scheduler);
  o.tls = Tls();
  o.api_key = ApiKey();
  o.requests = absl::GetFlag(FLAGS_requests);
  o.rate = absl::GetFlag(FLAGS_rate);
  o.concurrency = absl::GetFlag(FLAGS_concurrency);
  o.prefixes = absl::GetFlag(FLAGS_prefixes);
  o.prefix_tokens = absl::GetFlag(FLAGS_prefix_tokens);
  o.suffix_tokens = absl::GetFlag(FLAGS_suffix_tokens);
  o.max_tokens = absl::GetFlag(FLAGS_max_tokens).value_or(16);
  o.seed = absl::GetFlag(FLAGS_seed).value_or(1);
  o.vocab = absl::GetFlag(FLAGS_vocab);
  o.deadline_s = absl::GetFlag(FLAGS_deadline_s);
  if (absl::Status s = ValidateBenchOptions(o); !s.ok()) return Usage(std::string(s.message()));
  if (o.tls.cert.empty() != o.tls.key.empty()) return Usage("--cert and --key go together");
  auto report = RunBench(o, PrintProgress);
  if (!report.ok()) return Result(report.status());
  std::fputs(FormatBenchReport(*report).c_str(), stdout);
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    nlohmann::json doc = bench::ResultHeader("kvcast bench", g_argc, g_argv);
    doc.update(BenchReportJson(*report, o));
    if (absl::Status s = bench::WriteJsonFile(path, doc); !s.ok()) return Result(s);
  }
  if (const std::string path = absl::GetFlag(FLAGS_plot); !path.empty()) {
    std::ofstream out(path);
    out << LatencyPlotSvg(BenchPlot(*report, o));
    out.close();
    if (!out) return Result(absl::FailedPreconditionError(absl::StrCat("cannot write ", path)));
  }
  if (report->failed > 0 && !absl::GetFlag(FLAGS_allow_failures)) {
    std::fprintf(stderr, "kvcast bench: %d of %d requests failed\n", report->failed, o.requests);
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace kvcast::cli

namespace {
// absl::ParseCommandLine exit()s with 1 on a bad flag; bad usage is 2 here.
bool g_parsing_flags = false;
void ExitTwoOnFlagErrors() {
  if (g_parsing_flags) _exit(2);
}
}  // namespace

int main(int argc, char** argv) {
  // --help / -h / help, anywhere: the commands, or the named command's flags.
  {
    std::vector<std::string> words;
    bool help = false;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--help" || a == "-h" || a == "-help" || a == "--helpfull" || a == "help") {
        help = true;
      } else if (a.rfind("-", 0) != 0) {
        words.push_back(a);
      }
    }
    if (help) return kvcast::cli::Help(absl::StrJoin(words, " "));
  }
  absl::SetProgramUsageMessage(kvcast::cli::kUsage);
  kvcast::cli::g_argc = argc;
  kvcast::cli::g_argv = argv;
  g_parsing_flags = true;
  std::atexit(ExitTwoOnFlagErrors);
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  g_parsing_flags = false;
  std::vector<std::string> cmd(args.begin() + 1, args.end());
  if (cmd == std::vector<std::string>{"generate"}) return kvcast::cli::Generate();
  if (cmd == std::vector<std::string>{"cluster", "up"}) return kvcast::cli::ClusterUpCommand();
  if (cmd == std::vector<std::string>{"bench"}) return kvcast::cli::BenchCommand();
  return kvcast::cli::Usage(cmd.empty() ? "no command" : "unknown command '" + cmd[0] + "'");
}
