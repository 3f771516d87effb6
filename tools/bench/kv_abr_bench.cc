// kv_abr_bench: lands a published prompt's KV from a kvcast-kvpub endpoint
// the way a decode worker does, in one fixed track or by adaptive bitrate
// (services/decode/kv_abr.h), and reports time, bytes and tracks per group.
// tools/bench/kv_abr_bench.sh runs it across a shaped link whose bandwidth
// steps (docs/benchmarks.md).
//
//   kv_abr_bench --connect HOST:PORT --info kvpub.json --ca ca.pem
//       [--auth_token HEX] (--track fp16 | --abr --ladder fp16,ac,ac-lo
//       --budget_ms 4000 --initial_mbps 200) [--dump exact.f32]
//
// Prints one JSON line: mode, seconds (first request to the last group
// landed), bytes, tokens, per group {group, track, bytes, seconds, at (when
// it landed, since the first request)}, and
// with --dump the largest |landed - exact| per track.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "engine/kv/kv_page_pool.h"
#include "kernels/backend.h"
#include "nlohmann/json.hpp"
#include "services/decode/kv_abr.h"
#include "services/worker/land_kv.h"
#include "tools/bench/result_file.h"
#include "transport/kvcache/ac_codec_thread.h"
#include "transport/kvcache/naming.h"
#include "engine/kv/token_codec.h"
#include "transport/moqt/codec.h"
#include "transport/moqt/moqt_endpoint.h"
#include "transport/moqt/tools/client_tls_flags.h"
#include "transport/moqt/tools/tool_flags.h"
#include "transport/quic/event_loop.h"

ABSL_FLAG(std::string, connect, "", "kvcast-kvpub's --listen address HOST:PORT");
ABSL_FLAG(std::string, info, "", "kvcast-kvpub's JSON line (namespace, tokens, shape)");
ABSL_FLAG(std::string, auth_token, "", "AUTHORIZATION TOKEN value, hex (as kvcast-moqt token prints it)");
ABSL_FLAG(std::string, track, "fp16", "the fixed track (without --abr)");
ABSL_FLAG(bool, abr, false, "adaptive bitrate: a track per group");
ABSL_FLAG(std::string, ladder, "fp16,ac,ac-lo", "--abr: tracks, most bytes first");
ABSL_FLAG(double, budget_ms, 4000, "--abr: time for the whole landing");
ABSL_FLAG(double, initial_mbps, 200, "--abr: goodput assumed before the first group");
ABSL_FLAG(int, depth, 1,
          "--abr: groups in flight (1 as the decode worker does; 2 requests the next group while "
          "one lands, straight from a publisher)");
ABSL_FLAG(bool, ac_decode_thread, true,
          "decode ac groups on a thread of their own, as the workers do (false: on the loop)");
ABSL_FLAG(std::string, ready_file, "",
          "created when the session is up and the pages are ready, just before the first "
          "request (a script times the link's steps from it)");
ABSL_FLAG(std::string, dump, "", "kvcast-kvpub's exact KV (float32): report landed errors");

namespace kvcast {
namespace {

using Clock = std::chrono::steady_clock;

class Handler : public moqt::RequestHandler {
 public:
  void OnSessionReady(moqt::MoqtSession*) override { ready.Notify(); }
  absl::Notification ready;
};

struct Group {
  int group;
  std::string track;
  uint64_t bytes;
  double seconds;  // since the previous group landed (or the start)
  double at;       // when it landed, since the start
};

absl::Status Main(const nlohmann::json& header) {
  ASSIGN_OR_RETURN(auto hp, moqt::ParseHostPort(absl::GetFlag(FLAGS_connect)));
  std::ifstream in(absl::GetFlag(FLAGS_info));
  std::string line, last;
  while (std::getline(in, line)) {
    if (!line.empty()) last = line;
  }
  if (last.empty()) return absl::InvalidArgumentError("--info: no JSON line");
  const auto info = nlohmann::json::parse(last);
  const std::string model_id = info["namespace"][1], digest = info["namespace"][2];
  const int tokens = info["tokens"], chunk = info["chunk_tokens"];
  const KvLayout layout{info["layers"].get<int>(), info["kv_heads"].get<int>(),
                        info["head_dim"].get<int>(), 16};
  const std::string raw = absl::HexStringToBytes(model_id);
  Hash128 fingerprint{0, 0};
  for (int i = 0; i < 8; ++i) fingerprint.hi = fingerprint.hi << 8 | uint8_t(raw[i]);
  for (int i = 8; i < 16; ++i) fingerprint.lo = fingerprint.lo << 8 | uint8_t(raw[i]);
  if (kvcache::ModelId(fingerprint) != model_id) return absl::InvalidArgumentError("bad model id");

  auto backend = NewCpuBackend();
  const int pages_needed = (tokens + 15) / 16;
  ASSIGN_OR_RETURN(auto pool, KvPagePool::Create(backend.get(), layout, pages_needed));
  // A decode worker's pool is touched once and reused; a fresh one would
  // have the kernel zero every page as the first KV lands in it (a fifth
  // of this process's time for 4K Llama-shaped tokens), so touch it first.
  for (int l = 0; l < layout.num_layers; ++l) {
    std::memset(pool->k_pages(l), 0, pool->layer_bytes());
    std::memset(pool->v_pages(l), 0, pool->layer_bytes());
  }
  ASSIGN_OR_RETURN(auto thread, quic::LoopThread::Start());
  std::unique_ptr<kvcache::AcCodecThread> ac_thread;
  if (absl::GetFlag(FLAGS_ac_decode_thread)) {
    ac_thread = std::make_unique<kvcache::AcCodecThread>(layout, thread->loop());
  }
  Handler handler;
  std::unique_ptr<moqt::MoqtClient> client;
  absl::Status connected;
  thread->RunSync([&] {
    auto c = moqt::MoqtClient::Connect(thread->loop(), hp.first, hp.second,
                                       moqt::ClientTlsFromFlags(), quic::TransportOptions{},
                                       moqt::SessionOptions{}, &handler);
    if (c.ok()) client = *std::move(c);
    connected = c.status();
  });
  RETURN_IF_ERROR(connected);
  if (!handler.ready.WaitForNotificationWithTimeout(absl::Seconds(10))) {
    return absl::DeadlineExceededError("no MoQT session within 10 s");
  }
  // The token value (as `kvcast-moqt token` prints it) in a Token structure.
  moqt::AuthToken auth;
  auth.value = absl::HexStringToBytes(absl::GetFlag(FLAGS_auth_token));
  const std::string token = auth.value.empty() ? "" : moqt::SerializeAuthToken(auth);
  const int groups = (tokens + chunk - 1) / chunk;
  const double fp16_token_bytes = 4.0 * layout.num_layers * layout.token_floats();

  // Lands groups [first, end) in `compression` as a decode worker does
  // (blocking; any thread), over this tool's one session.
  const worker::KvLandingTarget target{
      [&](std::function<void()> fn) { thread->RunSync(std::move(fn)); },
      [&](const std::string&) -> absl::StatusOr<moqt::MoqtSession*> { return client->session(); },
      pool.get(), backend.get(), fingerprint, ac_thread.get()};
  auto land = [&](const kvcache::KvCompression& compression, int first, int end) {
    worker::KvRequest request;
    request.track = kvcache::FullTrackNameOf({model_id, digest, compression});
    request.auth_token = token;
    request.chunk_tokens = chunk;
    request.num_tokens = tokens;
    request.first_group = first;
    request.end_group = end;
    return worker::LandKv(target, request, [] { return false; }, nullptr);
  };

  KvPages all_pages;  // the landed groups' pages, in token order
  std::vector<Group> log;
  if (const std::string ready = absl::GetFlag(FLAGS_ready_file); !ready.empty()) {
    if (!std::ofstream(ready)) return absl::UnavailableError(absl::StrCat("cannot create ", ready));
  }
  const auto t0 = Clock::now();
  auto since = [&](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  int landed_groups = 0;
  if (!absl::GetFlag(FLAGS_abr)) {
    ASSIGN_OR_RETURN(auto compression, kvcache::CompressionOfTrackName(absl::GetFlag(FLAGS_track)));
    ASSIGN_OR_RETURN(auto r, land(compression, 0, groups));
    all_pages = std::move(r.pages);
    log.push_back({0, absl::GetFlag(FLAGS_track), r.bytes, since(t0), since(t0)});
    landed_groups = groups;
  } else {
    ASSIGN_OR_RETURN(auto ladder, decode::ParseAbrLadder(absl::GetFlag(FLAGS_ladder), fp16_token_bytes));
    decode::AbrPlanner planner(std::move(ladder), absl::GetFlag(FLAGS_budget_ms) / 1000,
                               absl::GetFlag(FLAGS_initial_mbps) * 1e6 / 8);
    // The decode worker's driver, timing each group.
    int g = 0;
    auto last = t0;
    decode::AbrOutcome outcome = decode::LandAdaptively(
        &planner, 0, groups, chunk, tokens, absl::GetFlag(FLAGS_depth),
        [&](const kvcache::KvCompression& c, int group) { return land(c, group, group + 1); },
        [&](decode::AbrLanded l) {
          all_pages.Append(std::move(l.pages));
          log.push_back({g++, "", l.bytes, since(last), since(t0)});
          last = Clock::now();
        },
        [] { return false; }, nullptr);
    for (size_t i = 0; i < log.size(); ++i) {
      log[i].track = kvcache::TrackNameOf(planner.ladder()[outcome.tracks[i]].compression);
    }
    landed_groups = outcome.landed_groups;
    RETURN_IF_ERROR(outcome.error);
  }
  const double total = since(t0);

  nlohmann::ordered_json out;
  out["mode"] = absl::GetFlag(FLAGS_abr) ? "abr" : absl::GetFlag(FLAGS_track);
  out["seconds"] = total;
  uint64_t bytes = 0;
  for (const Group& g : log) bytes += g.bytes;
  out["bytes"] = bytes;
  out["tokens"] = tokens;
  out["groups_landed"] = landed_groups;
  out["groups"] = groups;
  for (const Group& g : log) {
    out["per_group"].push_back({{"group", g.group}, {"track", g.track}, {"bytes", g.bytes},
                                {"seconds", g.seconds}, {"at", g.at}});
  }
  // Landed vs exact, per track (the dump: [token][layer][K, V][heads * head_dim]).
  if (const std::string dump = absl::GetFlag(FLAGS_dump); !dump.empty()) {
    std::ifstream f(dump, std::ios::binary);
    const size_t tf = layout.token_floats(), per_token = 2 * layout.num_layers * tf;
    std::vector<float> exact(size_t(tokens) * per_token);
    f.read(reinterpret_cast<char*>(exact.data()), exact.size() * sizeof(float));
    std::map<std::string, double> worst;
    for (const Group& g : log) {
      const int first = absl::GetFlag(FLAGS_abr) ? g.group : 0;
      const int end = absl::GetFlag(FLAGS_abr) ? g.group + 1 : groups;
      for (int t = first * chunk; t < std::min(end * chunk, tokens); ++t) {
        const int32_t slot = SlotsOf(all_pages.ids(), 16, t, 1)[0];
        for (int l = 0; l < layout.num_layers; ++l) {
          for (int kv = 0; kv < 2; ++kv) {
            const float* got = (kv ? pool->v_cache(l) : pool->k_cache(l)) + size_t(slot) * tf;
            const float* want = &exact[t * per_token + (2 * l + kv) * tf];
            for (size_t i = 0; i < tf; ++i) {
              worst[g.track] = std::max(worst[g.track], double(std::fabs(got[i] - want[i])));
            }
          }
        }
      }
    }
    out["max_abs_err"] = worst;
  }
  out.update(header);  // the date, CPU, command and commit (tools/bench/result_file.h)
  std::printf("%s\n", out.dump().c_str());
  thread->RunSync([&] {
    client.reset();
    ac_thread.reset();
  });
  return absl::OkStatus();
}

}  // namespace
}  // namespace kvcast

int main(int argc, char** argv) {
  const nlohmann::json header = kvcast::bench::ResultHeader("kv_abr_bench", argc, argv);
  absl::ParseCommandLine(argc, argv);
  absl::Status s = kvcast::Main(header);
  if (!s.ok()) {
    std::fprintf(stderr, "kv_abr_bench: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
