// http_api_bench: what the OpenAI-compatible HTTP API costs over gRPC, and
// how many connections it holds.
//
//   http_api_bench ttft --grpc HOST:PORT --http HOST:PORT [--requests 200]
//       [--prompt_tokens 256 --max_tokens 1]
//     Alternates identical streaming requests (token-id prompt, greedy)
//     through gRPC kvcast.v1.Generation/Generate and HTTP POST
//     /v1/completions (stream: true) and reports time to first token for
//     each (p50/p90/mean) and the difference of the medians. The first
//     request warms the prefix cache, so TTFT is dominated by the serving
//     path itself rather than the prefill compute.
//   http_api_bench connections --http HOST:PORT --pid PID [--connections 2000]
//     Opens N keep-alive connections, each asking GET /v1/models once and
//     then idling, and reports the server's resident memory (VmRSS of PID)
//     before and with them, per connection; then checks every connection
//     still answers. With --stream_tokens N, each connection instead holds a
//     streaming completion (N tokens, ignore_eos) read only up to its first
//     token; the server must have --max_queue above --connections. Closing
//     them cancels every request.
//   http_api_bench interference --http HOST:PORT [--seconds 5] [--long_prompt_kb 256]
//     Reads one streaming completion event by event: --seconds undisturbed,
//     then --seconds while 2 other connections post completions with a
//     --long_prompt_kb text prompt back to back (each tokenized by the
//     server, then refused as longer than the context). Reports the gaps
//     between the stream's events in both phases: what a long prompt's
//     tokenization costs the other connections. Against a stream that
//     yields a token every few ms (scheduler_bench --hold_s
//     --token_interval_ms 10, with --model for the tokenizer).
//   Every mode: --json FILE also writes its measurements as a result file
//   (tools/bench/result_file.h: date, CPU, command, commit).
#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "kvcast/v1/generation.grpc.pb.h"
#include "tools/bench/result_file.h"

ABSL_FLAG(std::string, grpc, "127.0.0.1:50051", "scheduler gRPC HOST:PORT");
ABSL_FLAG(std::string, http, "127.0.0.1:8000", "scheduler HTTP API HOST:PORT");
ABSL_FLAG(int, requests, 200, "ttft: requests per path");
ABSL_FLAG(int, prompt_tokens, 256, "ttft: prompt length");
ABSL_FLAG(int, max_tokens, 1, "ttft: tokens per request");
ABSL_FLAG(int, connections, 2000, "connections: how many to hold");
ABSL_FLAG(int, pid, 0, "connections: the scheduler's process id (for VmRSS)");
ABSL_FLAG(int, seconds, 5, "interference: seconds per phase");
ABSL_FLAG(int, long_prompt_kb, 256, "interference: size of the long text prompts");
ABSL_FLAG(std::string, json, "", "also write the measurements here as a JSON result file");
ABSL_FLAG(int, stream_tokens, 0,
          "connections: > 0: each connection holds a streaming completion of this many "
          "tokens (read up to its first token, then left unread) instead of idling");

namespace {

// The command line as typed (main), for --json's header.
nlohmann::json g_header;

// Writes --json's result file, if asked for; `rc` passes through.
int Report(int rc, nlohmann::json results) {
  const std::string path = absl::GetFlag(FLAGS_json);
  if (path.empty()) return rc;
  if (absl::Status s = kvcast::bench::WriteResultFile(path, g_header, std::move(results));
      !s.ok()) {
    std::fprintf(stderr, "http_api_bench: %s\n", s.ToString().c_str());
    return 1;
  }
  return rc;
}

using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

int Connect(const std::string& host_port) {
  std::vector<std::string> hp = absl::StrSplit(host_port, ':');
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  if (hp.size() != 2 || getaddrinfo(hp[0].c_str(), hp[1].c_str(), &hints, &res) != 0) return -1;
  int fd = socket(res->ai_family, SOCK_STREAM, 0);
  if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) != 0) {
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd >= 0) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, 1 /*TCP_NODELAY*/, &one, sizeof(one));
  }
  return fd;
}

bool SendAll(int fd, const std::string& s) {
  for (size_t off = 0; off < s.size();) {
    ssize_t n = send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += size_t(n);
  }
  return true;
}

// Reads until `want` is in `buf` (appending); false on EOF, error or
// `timeout_s` seconds.
bool ReadUntil(int fd, std::string* buf, const std::string& want, int timeout_s = 30) {
  const auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
  while (buf->find(want) == std::string::npos) {
    pollfd p{fd, POLLIN, 0};
    if (Clock::now() > deadline) return false;
    if (poll(&p, 1, 100) <= 0) continue;
    char tmp[16384];
    ssize_t n = recv(fd, tmp, sizeof(tmp), 0);
    if (n <= 0) return false;
    buf->append(tmp, size_t(n));
  }
  return true;
}

struct Stats {
  std::vector<double> ms;
  std::string Summary() {
    std::sort(ms.begin(), ms.end());
    double sum = 0;
    for (double m : ms) sum += m;
    auto q = [&](double f) { return ms[std::min(ms.size() - 1, size_t(f * ms.size()))]; };
    return absl::StrCat("p50 ", q(0.5), " ms, p90 ", q(0.9), " ms, mean ", sum / ms.size(), " ms (n=",
                        ms.size(), ")");
  }
  double Median() {
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  }
};

std::vector<int32_t> Prompt(int n) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back(100 + (i * 37) % 900);
  return ids;
}

int Ttft() {
  const auto ids = Prompt(absl::GetFlag(FLAGS_prompt_tokens));
  const int max_tokens = absl::GetFlag(FLAGS_max_tokens);
  auto stub = kvcast::v1::Generation::NewStub(
      grpc::CreateChannel(absl::GetFlag(FLAGS_grpc), grpc::InsecureChannelCredentials()));
  kvcast::v1::GenerateRequest req;
  *req.mutable_token_ids()->mutable_ids() = {ids.begin(), ids.end()};
  req.set_max_tokens(max_tokens);
  std::string id_list;
  for (int32_t t : ids) absl::StrAppend(&id_list, id_list.empty() ? "" : ",", t);
  const std::string body = absl::StrCat(R"({"prompt":[)", id_list, R"(],"max_tokens":)", max_tokens,
                                        R"(,"temperature":0,"stream":true})");
  const std::string head = absl::StrCat("POST /v1/completions HTTP/1.1\r\nHost: bench\r\n",
                                        "Content-Type: application/json\r\nContent-Length: ",
                                        body.size(), "\r\n\r\n");
  int fd = Connect(absl::GetFlag(FLAGS_http));
  if (fd < 0) {
    std::fprintf(stderr, "cannot connect to %s\n", absl::GetFlag(FLAGS_http).c_str());
    return 1;
  }
  auto grpc_once = [&]() -> double {
    grpc::ClientContext ctx;
    const auto t0 = Clock::now();
    auto stream = stub->Generate(&ctx, req);
    kvcast::v1::GenerateResponse r;
    double ttft = -1;
    while (stream->Read(&r)) {
      if (ttft < 0 && r.has_delta()) ttft = Ms(Clock::now() - t0);
    }
    grpc::Status s = stream->Finish();
    if (!s.ok()) std::fprintf(stderr, "gRPC: %s\n", s.error_message().c_str());
    return s.ok() ? ttft : -1;
  };
  // One connection kept alive, as clients keep theirs.
  auto http_once = [&]() -> double {
    std::string buf;
    const auto t0 = Clock::now();
    if (!SendAll(fd, head + body) || !ReadUntil(fd, &buf, "data: {")) return -1;
    const double ttft = Ms(Clock::now() - t0);
    if (buf.compare(0, 12, "HTTP/1.1 200") != 0 || !ReadUntil(fd, &buf, "data: [DONE]\n\n\r\n0\r\n\r\n")) {
      std::fprintf(stderr, "HTTP: %s\n", buf.substr(0, 300).c_str());
      return -1;
    }
    return ttft;
  };
  if (grpc_once() < 0 || http_once() < 0) return 1;  // warm the prefix cache and the paths
  Stats g, h;
  for (int i = 0; i < absl::GetFlag(FLAGS_requests); ++i) {
    const double a = (i % 2 == 0) ? grpc_once() : http_once();
    const double b = (i % 2 == 0) ? http_once() : grpc_once();
    if (a < 0 || b < 0) return 1;
    g.ms.push_back(i % 2 == 0 ? a : b);
    h.ms.push_back(i % 2 == 0 ? b : a);
  }
  close(fd);
  std::printf("prompt %zu tokens (cached), max_tokens %d, %d requests per path, alternating\n",
              ids.size(), max_tokens, absl::GetFlag(FLAGS_requests));
  std::printf("gRPC TTFT: %s\n", g.Summary().c_str());
  std::printf("HTTP TTFT: %s\n", h.Summary().c_str());
  std::printf("HTTP - gRPC, medians: %+.3f ms\n", h.Median() - g.Median());
  return Report(0, {{"mode", "ttft"}, {"prompt_tokens", ids.size()}, {"max_tokens", max_tokens},
                    {"grpc_ttft_ms", g.ms}, {"http_ttft_ms", h.ms},
                    {"http_minus_grpc_median_ms", h.Median() - g.Median()}});
}

long RssKb(int pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    long kb = 0;
    if (line.rfind("VmRSS:", 0) == 0 &&
        absl::SimpleAtoi(absl::StripAsciiWhitespace(line.substr(6, line.size() - 9)), &kb)) {
      return kb;
    }
  }
  return -1;
}

int Connections() {
  const int n = absl::GetFlag(FLAGS_connections), pid = absl::GetFlag(FLAGS_pid);
  rlimit lim{rlim_t(n + 256), rlim_t(n + 256)};
  setrlimit(RLIMIT_NOFILE, &lim);
  const long before = RssKb(pid);
  const int stream_tokens = absl::GetFlag(FLAGS_stream_tokens);
  const std::string get = "GET /v1/models HTTP/1.1\r\nHost: bench\r\n\r\n";
  const std::string body = absl::StrCat(R"({"prompt":[1,2,3,4,5],"max_tokens":)", stream_tokens,
                                        R"(,"ignore_eos":true,"stream":true})");
  const std::string post = absl::StrCat("POST /v1/completions HTTP/1.1\r\nHost: bench\r\n",
                                        "Content-Length: ", body.size(), "\r\n\r\n", body);
  const std::string& ask = stream_tokens > 0 ? post : get;
  const std::string answer = stream_tokens > 0 ? "data: {" : "\"object\":\"list\"";
  std::vector<int> fds;
  const auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) {
    int fd = Connect(absl::GetFlag(FLAGS_http));
    if (fd < 0 || !SendAll(fd, ask)) {
      std::fprintf(stderr, "connection %d failed\n", i);
      return 1;
    }
    fds.push_back(fd);
  }
  for (size_t i = 0; i < fds.size(); ++i) {
    std::string buf;
    // Streams wait for their prefill, which the server runs a few at a time;
    // an error answer (no stream) ends the wait.
    const int timeout_s = stream_tokens > 0 ? 900 : 30;
    if (!ReadUntil(fds[i], &buf, "\r\n\r\n", timeout_s) ||
        buf.compare(0, 12, "HTTP/1.1 200") != 0 || !ReadUntil(fds[i], &buf, answer, timeout_s)) {
      ReadUntil(fds[i], &buf, "}}", 1);
      std::fprintf(stderr, "connection %zu: no answer (%s)\n", i, buf.substr(0, 400).c_str());
      return 1;
    }
  }
  const double open_ms = Ms(Clock::now() - t0);
  const long with = RssKb(pid);
  int alive = 0;
  if (stream_tokens == 0) {
    for (int fd : fds) {
      std::string buf;
      if (SendAll(fd, get) && ReadUntil(fd, &buf, answer)) ++alive;
    }
  } else {
    alive = n;
  }
  for (int fd : fds) close(fd);
  std::printf("%d %s in %.0f ms%s\n", n,
              stream_tokens > 0 ? "streams of a completion at their first token"
                                : "keep-alive connections opened",
              open_ms,
              stream_tokens > 0 ? "" : absl::StrCat("; ", alive, " of them answered again").c_str());
  std::printf("scheduler VmRSS: %ld KiB before, %ld KiB with them: %.1f KiB per connection\n",
              before, with, double(with - before) / n);
  return Report(alive == n ? 0 : 1,
                {{"mode", "connections"}, {"connections", n}, {"stream_tokens", stream_tokens},
                 {"open_ms", open_ms}, {"answered_again", alive}, {"rss_kib_before", before},
                 {"rss_kib_with", with}});
}

int Interference() {
  const std::string http = absl::GetFlag(FLAGS_http);
  const auto phase_len = std::chrono::seconds(absl::GetFlag(FLAGS_seconds));
  const std::string body = R"({"prompt":[1,2,3,4,5],"max_tokens":4000,"ignore_eos":true,"stream":true})";
  const std::string post = absl::StrCat("POST /v1/completions HTTP/1.1\r\nHost: bench\r\n",
                                        "Content-Length: ", body.size(), "\r\n\r\n", body);
  int fd = Connect(http);
  std::string buf;
  if (fd < 0 || !SendAll(fd, post) || !ReadUntil(fd, &buf, "\r\n\r\n")) {
    std::fprintf(stderr, "interference: the stream did not start\n");
    return 1;
  }
  std::atomic<int> phase{0};  // 0 quiet, 1 flood, 2 done
  std::vector<double> gaps[2];
  std::thread reader([&] {
    auto last = Clock::now();
    bool first = true;
    while (phase.load() < 2) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char tmp[16384];
      ssize_t n = recv(fd, tmp, sizeof(tmp), 0);
      if (n <= 0) break;
      buf.append(tmp, size_t(n));
      for (size_t at; (at = buf.find("\n\n")) != std::string::npos;) {
        buf.erase(0, at + 2);
        const auto now = Clock::now();
        if (!first) gaps[std::min(phase.load(), 1)].push_back(Ms(now - last));
        first = false;
        last = now;
      }
    }
  });
  std::this_thread::sleep_for(phase_len);
  phase = 1;
  std::string text;
  while (int(text.size()) < absl::GetFlag(FLAGS_long_prompt_kb) * 1024) text += "hello world, ";
  const std::string long_body = absl::StrCat(R"({"prompt":")", text, R"(","max_tokens":1})");
  const std::string long_post =
      absl::StrCat("POST /v1/completions HTTP/1.1\r\nHost: bench\r\nContent-Length: ",
                   long_body.size(), "\r\n\r\n", long_body);
  std::atomic<int> long_done{0};
  std::vector<std::thread> flood;
  for (int k = 0; k < 2; ++k) {
    flood.emplace_back([&] {
      int f = Connect(http);
      std::string b;
      while (f >= 0 && phase.load() == 1 && SendAll(f, long_post) && ReadUntil(f, &b, "}}")) {
        b.clear();
        ++long_done;
      }
      if (f >= 0) close(f);
    });
  }
  std::this_thread::sleep_for(phase_len);
  phase = 2;
  for (auto& t : flood) t.join();
  reader.join();
  close(fd);
  auto line = [](const char* name, std::vector<double> g) {
    if (g.empty()) return std::printf("| %s | no events |\n", name);
    std::sort(g.begin(), g.end());
    auto q = [&](double f) { return g[std::min(g.size() - 1, size_t(f * g.size()))]; };
    return std::printf("| %s | %zu | %.1f | %.1f | %.1f |\n", name, g.size(), q(0.5), q(0.99),
                       g.back());
  };
  std::printf("| phase | events | gap p50 ms | gap p99 ms | gap max ms |\n|---|---|---|---|---|\n");
  line("quiet", gaps[0]);
  line("long prompts", gaps[1]);
  std::printf("%d long prompts (%d KiB each) in %lld s\n", long_done.load(),
              absl::GetFlag(FLAGS_long_prompt_kb), (long long)phase_len.count());
  return Report(gaps[1].empty() ? 1 : 0,
                {{"mode", "interference"}, {"quiet_gaps_ms", gaps[0]},
                 {"long_prompt_gaps_ms", gaps[1]}, {"long_prompts", long_done.load()},
                 {"long_prompt_kb", absl::GetFlag(FLAGS_long_prompt_kb)},
                 {"phase_s", (long long)phase_len.count()}});
}

}  // namespace

int main(int argc, char** argv) {
  g_header = kvcast::bench::ResultHeader("http_api_bench", argc, argv);
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  const std::string mode = args.size() > 1 ? args[1] : "";
  if (mode == "ttft") return Ttft();
  if (mode == "connections") return Connections();
  if (mode == "interference") return Interference();
  std::fprintf(stderr,
               "usage: http_api_bench ttft|connections|interference [flags] (see the source's "
               "header)\n");
  return 2;
}
