// scheduler_bench: requests per second one kvcast-scheduler routes and
// orchestrates, and its CPU per request, with workers that cost nothing.
//
// Spawns the real kvcast-scheduler binary and, in this process, trivial
// workers: gRPC Prefill and Decode services that answer at once (a first
// token; then max_tokens - 1 tokens and LENGTH), registered through the
// workers' own SchedulerLinks. No model runs and no KV moves, so what is
// left is the scheduler's work per request: admission, tokenizing nothing
// (token-id prompts), the prefix-hash chain, routing, the Decode stream and
// the Prefill call, relaying tokens, metrics. `--concurrency` client
// threads call Generate (streaming) in a loop. CPU comes from
// /proc/PID/stat (the scheduler's user + system time over the timed run).
// With --hold_s it only serves (no load), e.g. for
//   http_api_bench connections --http ADDR --pid PID --stream_tokens 4000
// against decode streams slowed by --token_interval_ms.
//
//   bazel build -c opt //tools/bench:scheduler_bench //services/scheduler:kvcast-scheduler
//   bazel-bin/tools/bench/scheduler_bench --seconds 10 --concurrency 32
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "kvcast/v1/generation.grpc.pb.h"
#include "kvcast/v1/worker.grpc.pb.h"
#include "services/common/grpc_server.h"
#include "services/worker/scheduler_links.h"
#include "tools/bench/result_file.h"
#include "tools/cluster/subprocess.h"

ABSL_FLAG(double, seconds, 10, "timed run (after 2 s of warm-up)");
ABSL_FLAG(std::string, json, "", "also write the results here as a JSON result file");
ABSL_FLAG(int, concurrency, 32, "client threads, each with one request in flight");
ABSL_FLAG(int, prefill_workers, 2, "");
ABSL_FLAG(int, decode_workers, 2, "");
ABSL_FLAG(int, prompt_tokens, 256, "prompt length (token ids)");
ABSL_FLAG(int, max_tokens, 4, "tokens per request");
ABSL_FLAG(std::string, scheduler_bin, "", "kvcast-scheduler (default: found in bazel-bin)");
ABSL_FLAG(std::string, scheduler_flags, "", "extra scheduler flags, space-separated");
ABSL_FLAG(int, token_interval_ms, 0,
          "decode streams one token per interval (0: all at once): idle-ish streams");
ABSL_FLAG(double, hold_s, 0,
          "> 0: no load; serve the scheduler (with its HTTP API) and the trivial workers for "
          "this long and print their addresses (e.g. for http_api_bench connections)");

namespace kvcast::bench {
namespace {

using Clock = std::chrono::steady_clock;

class TrivialPrefill final : public v1::Prefill::Service {
  grpc::Status Prefill(grpc::ServerContext*, const v1::PrefillRequest* req,
                       grpc::ServerWriter<v1::PrefillReply>* writer) override {
    v1::PrefillReply reply;
    v1::PrefillResponse* resp = reply.mutable_result();
    resp->set_first_token(1000);
    resp->set_prompt_digest(std::string(32, 'a'));
    resp->set_computed_tokens(req->tokens_size());
    resp->set_compute_ms(0.01);
    writer->Write(reply);
    return grpc::Status::OK;
  }
};

class TrivialDecode final : public v1::Decode::Service {
  grpc::Status Decode(grpc::ServerContext* context,
                      grpc::ServerReaderWriter<v1::DecodeResponse, v1::DecodeRequest>* stream)
      override {
    v1::DecodeRequest msg;
    if (!stream->Read(&msg) || !msg.has_start()) {
      return grpc::Status(grpc::INVALID_ARGUMENT, "no start");
    }
    const v1::DecodeStart start = msg.start();
    int left = start.max_tokens();
    if (start.kv_tokens() > 0 && start.kv_tokens() == start.prompt_size()) {
      if (!stream->Read(&msg)) return grpc::Status(grpc::CANCELLED, "no first token");
      left -= 1;
    }
    v1::DecodeResponse ready;
    ready.set_kv_ready(true);
    ready.set_landed_tokens(start.kv_tokens());
    stream->Write(ready);
    const int interval_ms = absl::GetFlag(FLAGS_token_interval_ms);
    v1::DecodeResponse tokens;
    for (int i = 0; i < left; ++i) {
      tokens.add_token_ids(1000 + i % 1000);  // plain words in a real vocabulary
      if (interval_ms > 0 && i + 1 < left) {
        if (context->IsCancelled() || !stream->Write(tokens)) {
          return grpc::Status(grpc::CANCELLED, "cancelled");
        }
        tokens.Clear();
        std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
      }
    }
    tokens.set_finish_reason(v1::FINISH_REASON_LENGTH);
    stream->Write(tokens);
    return grpc::Status::OK;
  }
};

struct Worker {
  TrivialPrefill prefill;
  TrivialDecode decode;
  std::unique_ptr<services::GrpcServer> server;
  worker::SchedulerLinks links;
};

double CpuSeconds(pid_t pid) {
  std::ifstream f(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  std::getline(f, line);
  std::istringstream rest(line.substr(line.rfind(')') + 2));
  std::string field;
  double utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stod(field);
    if (i == 15) stime = std::stod(field);
  }
  return (utime + stime) / double(sysconf(_SC_CLK_TCK));
}

int Fail(const std::string& m) {
  std::fprintf(stderr, "scheduler_bench: %s\n", m.c_str());
  return 1;
}

int Main(nlohmann::json header) {
  std::string bin = absl::GetFlag(FLAGS_scheduler_bin);
  if (bin.empty()) {
    auto found = cluster::FindExecutable("kvcast-scheduler", "services/scheduler");
    if (!found.ok()) return Fail(std::string(found.status().message()));
    bin = *found;
  }
  auto port = cluster::PickFreePort(SOCK_STREAM);
  auto metrics = cluster::PickFreePort(SOCK_STREAM);
  auto http = cluster::PickFreePort(SOCK_STREAM);
  if (!port.ok() || !metrics.ok() || !http.ok()) return Fail("no free port");
  const std::string address = absl::StrCat("127.0.0.1:", *port);
  std::vector<std::string> argv = {bin, "--grpc_listen=" + address,
                                   absl::StrCat("--metrics_listen=127.0.0.1:", *metrics),
                                   absl::StrCat("--http_listen=127.0.0.1:", *http),
                                   "--max_queue=100000", "--pd_fusion_tokens=0"};
  std::istringstream extra(absl::GetFlag(FLAGS_scheduler_flags));
  for (std::string f; extra >> f;) argv.push_back(f);
  const std::string log = "/tmp/scheduler_bench.log";
  auto pid = cluster::SpawnProcess(argv, log);
  if (!pid.ok()) return Fail(std::string(pid.status().message()));
  struct Reaper {
    pid_t pid;
    ~Reaper() {
      kill(-pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  } reaper{*pid};

  const int np = absl::GetFlag(FLAGS_prefill_workers), nd = absl::GetFlag(FLAGS_decode_workers);
  std::vector<std::unique_ptr<Worker>> workers;
  for (int i = 0; i < np + nd; ++i) {
    auto w = std::make_unique<Worker>();
    const bool prefill = i < np;
    std::vector<services::NamedService> svc;
    if (prefill) {
      svc.push_back({v1::Prefill::service_full_name(), &w->prefill});
    } else {
      svc.push_back({v1::Decode::service_full_name(), &w->decode});
    }
    auto server = services::GrpcServer::Start({"127.0.0.1:0"}, std::move(svc));
    if (!server.ok()) return Fail(std::string(server.status().message()));
    w->server = std::move(*server);
    v1::WorkerInfo info;
    info.set_worker_id(absl::StrCat(prefill ? "prefill-" : "decode-", i));
    info.set_role(prefill ? v1::WORKER_ROLE_PREFILL : v1::WORKER_ROLE_DECODE);
    info.set_grpc_address(absl::StrCat("127.0.0.1:", w->server->port()));
    info.set_moqt_address("127.0.0.1:1");
    info.set_model_name("trivial");
    info.set_model_id(std::string(32, '0'));
    info.set_chunk_tokens(128);
    info.set_page_tokens(16);
    info.set_total_pages(1 << 20);
    info.set_vocab_size(49152);
    info.set_max_sequence_len(1 << 16);
    worker::SchedulerLinks::Options o;
    o.scheduler = address;
    o.creds = grpc::InsecureChannelCredentials();
    o.worker_id = info.worker_id();
    o.info = [info] { return info; };
    o.load = [] {
      v1::WorkerLoad l;
      l.set_free_pages(1 << 20);
      return l;
    };
    if (absl::Status s = w->links.Start(o); !s.ok()) return Fail(std::string(s.message()));
    workers.push_back(std::move(w));
  }
  for (int i = 0; i < 200; ++i) {
    bool all = true;
    for (const auto& w : workers) all = all && w->links.registered() == 1;
    if (all) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  for (const auto& w : workers) {
    if (w->links.registered() != 1) return Fail("workers did not register; see " + log);
  }

  if (const double hold = absl::GetFlag(FLAGS_hold_s); hold > 0) {
    std::printf("scheduler pid %d grpc %s http 127.0.0.1:%d (log %s); serving for %.0f s\n",
                int(*pid), address.c_str(), *http, log.c_str(), hold);
    std::fflush(stdout);
    absl::SleepFor(absl::Seconds(hold));
    for (auto& w : workers) w->links.Stop();
    return 0;
  }
  const int prompt_tokens = absl::GetFlag(FLAGS_prompt_tokens);
  const int max_tokens = absl::GetFlag(FLAGS_max_tokens);
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  std::atomic<bool> stop{false}, timing{false};
  std::atomic<int64_t> ok{0}, failed{0};
  std::vector<std::vector<double>> latencies(absl::GetFlag(FLAGS_concurrency));
  std::vector<std::thread> clients;
  for (int k = 0; k < int(latencies.size()); ++k) {
    clients.emplace_back([&, k] {
      auto stub = v1::Generation::NewStub(channel);
      for (int i = 0; !stop.load(); ++i) {
        v1::GenerateRequest req;
        for (int t = 0; t < prompt_tokens; ++t) req.mutable_token_ids()->add_ids((k * 7919 + i * 31 + t) % 49000);
        req.set_max_tokens(max_tokens);
        req.set_ignore_eos(true);
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
        const auto t0 = Clock::now();
        auto reader = stub->Generate(&ctx, req);
        v1::GenerateResponse resp;
        while (reader->Read(&resp)) {
        }
        const bool good = reader->Finish().ok();
        if (!timing.load()) continue;
        (good ? ok : failed) += 1;
        latencies[k].push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      }
    });
  }
  absl::SleepFor(absl::Seconds(2));  // warm-up: connections, threads
  const double cpu0 = CpuSeconds(*pid);
  const auto t0 = Clock::now();
  timing = true;
  absl::SleepFor(absl::Seconds(absl::GetFlag(FLAGS_seconds)));
  timing = false;
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  const double cpu = CpuSeconds(*pid) - cpu0;
  stop = true;
  for (auto& t : clients) t.join();
  for (auto& w : workers) w->links.Stop();

  std::vector<double> all;
  for (const auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  std::sort(all.begin(), all.end());
  auto pct = [&](double p) { return all.empty() ? 0.0 : all[std::min(all.size() - 1, size_t(p * all.size()))]; };
  std::printf("| concurrency | requests/s | failed | e2e p50 ms | e2e p99 ms | scheduler CPU ms/request | scheduler cores busy |\n"
              "|---|---|---|---|---|---|---|\n");
  const double rps = double(ok.load()) / wall;
  const double cpu_ms = ok.load() > 0 ? 1e3 * cpu / double(ok.load()) : 0.0;
  std::printf("| %d | %.0f | %lld | %.2f | %.2f | %.3f | %.2f |\n", int(latencies.size()), rps,
              (long long)failed.load(), pct(0.5), pct(0.99), cpu_ms, cpu / wall);
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    header.update({{"seconds", wall}, {"prompt_tokens", absl::GetFlag(FLAGS_prompt_tokens)},
                   {"max_tokens", absl::GetFlag(FLAGS_max_tokens)}});
    const absl::Status st = WriteResultFile(
        path, std::move(header),
        nlohmann::json::array({{{"concurrency", int(latencies.size())}, {"requests_per_s", rps},
                                {"failed", failed.load()}, {"e2e_p50_ms", pct(0.5)},
                                {"e2e_p99_ms", pct(0.99)}, {"scheduler_cpu_ms_per_request", cpu_ms},
                                {"scheduler_cores_busy", cpu / wall}}}));
    if (!st.ok()) return Fail(st.ToString());
  }
  return failed.load() == 0 ? 0 : 1;
}

}  // namespace
}  // namespace kvcast::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("scheduler_bench: one kvcast-scheduler's requests/s and CPU per request");
  nlohmann::json header = kvcast::bench::ResultHeader("scheduler_bench", argc, argv);
  absl::ParseCommandLine(argc, argv);
  return kvcast::bench::Main(std::move(header));
}
