// kv_path_bench: the KV data path at real sizes, all cases in one run so
// the ratios compare like with like (issue 19). Llama-3-8B-shaped KV (32
// layers, 8 KV heads x 128), per track and prompt length:
//   direct   KvPublisher -> KvLander over MoQT (QUIC + TLS 1.3)
//   direct2  the same over two connections, each landing half of the
//            groups on a decode loop of its own (the publisher keeps one)
//   relay    KvPublisher -> Relay -> KvLander, live (the track not cached
//            yet; the relay's cache full of other tracks: --relay_warm)
//   cached   Relay -> KvLander, the same track again (from the relay cache)
//   tls-tcp  the same bytes on one TLS 1.3 TCP stream (GnuTLS, AES-128-GCM
//            as QUIC negotiates), written and read by this tool
// then live fan-out through the relay to 1, 4, 16 subscribers that count
// the bytes (the relay fans out; the publisher sends one copy).
//
//   bazel build -c opt //tools/bench:kv_path_bench &&
//   bazel-bin/tools/bench/kv_path_bench [--tokens 1024,4096] [--tracks fp16,int8,ac]
//                                       [--fanout 1,4,16] [--fanout_tokens 1024]
//
// Each side (prefill, relay, decode, fan-out clients) has a loop thread of
// its own; MiB/s counts the track's encoded bytes. Time runs from
// SUBSCRIBE to the last token landed: encoding on demand, the transport,
// decoding into the decode side's pages. tls-tcp moves bytes only. CPU
// ms/MiB: what every thread of the process (publisher, relay, decode side,
// or the TLS pair) spent on the case, per MiB moved: with both cores busy,
// rate ~= 2 cores / CPU per byte, so the ratio of two cases' CPU per MiB
// bounds the ratio of their rates.
#include <arpa/inet.h>
#include <dirent.h>
#include <gnutls/gnutls.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/dtype.h"
#include "kernels/backend.h"
#include "transport/kvcache/lander.h"
#include "transport/kvcache/naming.h"
#include "transport/kvcache/publisher.h"
#include "engine/kv/token_codec.h"
#include "transport/moqt/moqt_endpoint.h"
#include "transport/moqt/relay.h"
#include "tools/bench/moqt_peers.h"
#include "tools/devcert/devcert.h"

ABSL_FLAG(std::string, tokens, "1024,4096", "prompt lengths (tokens)");
ABSL_FLAG(std::string, tracks, "fp16,int8,ac", "KV tracks");
ABSL_FLAG(std::string, fanout, "1,4,16", "subscriber counts for the fan-out case");
ABSL_FLAG(int, fanout_tokens, 1024, "prompt length of the fan-out case");
ABSL_FLAG(int, layers, 32, "layers (Llama-3-8B: 32)");
ABSL_FLAG(int, relay_window_kb, 8192, "the relay's send window per downstream request");
ABSL_FLAG(int, relay_cache_mb, 3072,
          "the relay's cache budget (the cached case needs a whole track to fit)");
ABSL_FLAG(bool, relay_warm, true,
          "before the cases, fill the relay's cache once with throwaway fp16 tracks, as a relay "
          "in service has: a fresh relay also pays the kernel's first touch of every page its "
          "cache fills (false: measure that relay)");
ABSL_FLAG(std::string, kv_cache_precision, "fp16",
          "how both sides' pages keep KV: fp16 (the workers' default: the fp16 track is a copy) "
          "or fp32");
ABSL_FLAG(int, max_udp_payload, 0,
          "QUIC datagrams up to this size (0: 1452; quic::TransportOptions::max_udp_payload)");
ABSL_FLAG(bool, ac_threads, true,
          "ac groups coded and decoded on threads of their own, as the workers do "
          "(KvPublisher::CodeAcInBackground, LandingSpec.ac_thread); false: on the loops");
ABSL_FLAG(std::string, cases, "direct,direct2,relay,cached,tls,fanout",
          "the cases to run (others print -), e.g. direct alone under perf");

namespace kvcast::kvcache {
namespace {

constexpr int kChunk = 128;
const Hash128 kModel{0xbe4c, 0x4c};

struct Loop {
  explicit Loop(const std::string& name) : thread(*quic::LoopThread::Start(name)) {}
  std::unique_ptr<quic::LoopThread> thread;
  void Run(std::function<void()> fn) { thread->RunSync(std::move(fn)); }
};

// The prefill side: a publisher serving its own port and connected to the
// relay as a client (`upstream`).
using Publisher = bench::UpstreamPublisher;
using bench::Ready;

// Counts a subscription's payload bytes.
class Counter : public moqt::TrackConsumer {
 public:
  explicit Counter(std::atomic<int>* done) : done_(done) {}
  void OnObject(const moqt::ObjectHeader&, absl::Span<const uint8_t> p) override {
    bytes += p.size();
  }
  void OnDone(const absl::Status& s) override {
    status = s;
    ++*done_;
  }
  uint64_t bytes = 0;
  absl::Status status;

 private:
  std::atomic<int>* done_;
};

std::vector<int> Ints(const std::string& list) {
  std::vector<int> out;
  for (absl::string_view s : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    int v = 0;
    if (!absl::SimpleAtoi(s, &v) || v <= 0) {
      std::fprintf(stderr, "kv_path_bench: bad number '%s'\n", std::string(s).c_str());
      std::exit(2);
    }
    out.push_back(v);
  }
  return out;
}

quic::TransportOptions Transport() {
  quic::TransportOptions t;
  t.max_udp_payload = absl::GetFlag(FLAGS_max_udp_payload);
  return t;
}


// ---- TLS 1.3 over TCP, the baseline ------------------------------------------

void Check(int rc, const char* what) {
  if (rc < 0) {
    std::fprintf(stderr, "kv_path_bench: %s: %s\n", what, gnutls_strerror(rc));
    std::exit(1);
  }
}

gnutls_session_t TlsSession(int fd, bool server, gnutls_certificate_credentials_t cred) {
  gnutls_session_t s;
  Check(gnutls_init(&s, server ? GNUTLS_SERVER : GNUTLS_CLIENT), "gnutls_init");
  Check(gnutls_priority_set_direct(
            s, "NORMAL:-VERS-ALL:+VERS-TLS1.3:-CIPHER-ALL:+AES-128-GCM", nullptr),
        "priority");
  Check(gnutls_credentials_set(s, GNUTLS_CRD_CERTIFICATE, cred), "credentials");
  if (!server) {
    gnutls_server_name_set(s, GNUTLS_NAME_DNS, "localhost", 9);
    gnutls_session_set_verify_cert(s, "localhost", 0);
  }
  gnutls_transport_set_int(s, fd);
  int rc;
  do rc = gnutls_handshake(s);
  while (rc < 0 && !gnutls_error_is_fatal(rc));
  Check(rc, "handshake");
  return s;
}

// Seconds to move `bytes` from a client to a server over loopback TCP with
// TLS 1.3 (handshake excluded), written in 1 MiB calls.
double TlsTcpSeconds(uint64_t bytes, const devcert::DevCertPaths& certs) {
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(listener, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(listener, 1) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::perror("kv_path_bench: tcp listen");
    std::exit(1);
  }
  gnutls_certificate_credentials_t server_cred, client_cred;
  gnutls_certificate_allocate_credentials(&server_cred);
  gnutls_certificate_allocate_credentials(&client_cred);
  Check(gnutls_certificate_set_x509_key_file(server_cred, certs.server_cert.c_str(),
                                             certs.server_key.c_str(), GNUTLS_X509_FMT_PEM),
        "server key");
  Check(gnutls_certificate_set_x509_trust_file(client_cred, certs.ca_cert.c_str(),
                                               GNUTLS_X509_FMT_PEM),
        "trust file");
  absl::Notification handshaken;
  absl::Time end;
  std::thread server([&] {
    int fd = accept(listener, nullptr, nullptr);
    gnutls_session_t s = TlsSession(fd, true, server_cred);
    handshaken.Notify();
    std::vector<uint8_t> buf(1 << 20);
    uint64_t got = 0;
    while (got < bytes) {
      ssize_t n = gnutls_record_recv(s, buf.data(), buf.size());
      if (n == GNUTLS_E_AGAIN || n == GNUTLS_E_INTERRUPTED) continue;
      Check(int(std::min<ssize_t>(n, 0)), "recv");
      if (n == 0) break;
      got += n;
    }
    end = absl::Now();
    gnutls_bye(s, GNUTLS_SHUT_WR);
    gnutls_deinit(s);
    close(fd);
  });
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    std::perror("kv_path_bench: tcp connect");
    std::exit(1);
  }
  gnutls_session_t c = TlsSession(fd, false, client_cred);
  handshaken.WaitForNotification();
  std::vector<uint8_t> payload(1 << 20, 0x5a);
  const absl::Time start = absl::Now();
  for (uint64_t sent = 0; sent < bytes;) {
    const size_t want = std::min<uint64_t>(payload.size(), bytes - sent);
    ssize_t n = gnutls_record_send(c, payload.data(), want);
    if (n == GNUTLS_E_AGAIN || n == GNUTLS_E_INTERRUPTED) continue;
    Check(int(std::min<ssize_t>(n, 0)), "send");
    sent += n;
  }
  server.join();
  gnutls_deinit(c);
  close(fd);
  close(listener);
  gnutls_certificate_free_credentials(server_cred);
  gnutls_certificate_free_credentials(client_cred);
  return absl::ToDoubleSeconds(end - start);
}

// ---- the MoQT cases ------------------------------------------------------------

// Development certificates in a fresh temporary directory.
bench::LoopbackCerts Certs() {
  absl::StatusOr<bench::LoopbackCerts> certs = bench::MakeLoopbackCerts("/tmp/kv_path_bench");
  if (!certs.ok()) {
    std::fprintf(stderr, "kv_path_bench: %s\n", certs.status().ToString().c_str());
    std::exit(1);
  }
  return *std::move(certs);
}

struct Bench {
  KvLayout layout;
  std::unique_ptr<Backend> prefill_backend = NewCpuBackend(), decode_backend = NewCpuBackend(),
                           decode2_backend = NewCpuBackend();
  std::unique_ptr<KvPagePool> prefill_pool, decode_pool, decode2_pool;
  KvPages prompt_pages;  // the prefill side's KV, shared by every prompt
  bench::LoopbackCerts certs = Certs();
  Loop prefill{"prefill"}, relay_loop{"relay"}, decode{"decode"}, decode2{"decode2"},
      fan{"fanout"};
  std::unique_ptr<Publisher> publisher;
  std::unique_ptr<moqt::MoqtServer> publisher_server, relay_server;
  std::unique_ptr<moqt::Relay> relay;
  std::unique_ptr<moqt::MoqtClient> direct, via_relay, direct2;  // direct2: decode2's
  // The decode loops' ac threads; null without --ac_threads.
  std::unique_ptr<AcCodecThread> decode_ac, decode2_ac;
  Ready direct_ready, relay_ready, direct2_ready;
  int prompts = 0;

  Bench(int layers, int max_tokens) : layout{layers, 8, 128, 16} {
    // As the workers keep KV (fp16 pages by default).
    if (absl::GetFlag(FLAGS_kv_cache_precision) == "fp16") layout.storage = KvStorage::kF16;
    const int pages = (max_tokens + layout.page_tokens - 1) / layout.page_tokens;
    prefill_pool = *KvPagePool::Create(prefill_backend.get(), layout, pages);
    decode_pool = *KvPagePool::Create(decode_backend.get(), layout, pages);
    decode2_pool = *KvPagePool::Create(decode2_backend.get(), layout, pages);
    uint32_t x = 1;  // xorshift: values in [-2, 2)
    auto next = [&x] {
      x ^= x << 13;
      x ^= x >> 17;
      x ^= x << 5;
      return float(x) * 0x1p-30f - 2.f;
    };
    const bool half = layout.storage == KvStorage::kF16;
    for (int l = 0; l < layout.num_layers; ++l) {
      for (void* pages_of : {prefill_pool->k_pages(l), prefill_pool->v_pages(l)}) {
        for (size_t i = 0; i < prefill_pool->layer_values(); ++i) {
          if (half) {
            static_cast<uint16_t*>(pages_of)[i] = FloatToHalf(next());
          } else {
            static_cast<float*>(pages_of)[i] = next();
          }
        }
      }
    }
    for (int l = 0; l < layout.num_layers; ++l) {  // no first-touch faults in the timed runs
      for (KvPagePool* p : {decode_pool.get(), decode2_pool.get()}) {
        std::memset(p->k_pages(l), 0, p->layer_bytes());
        std::memset(p->v_pages(l), 0, p->layer_bytes());
      }
    }
    prompt_pages = *prefill_pool->Allocate(pages);
    const quic::TlsOptions server_tls = certs.Server();
    relay_loop.Run([&] {
      moqt::RelayOptions options;
      options.cache_bytes = uint64_t(absl::GetFlag(FLAGS_relay_cache_mb)) << 20;
      options.send_window_bytes = uint64_t(absl::GetFlag(FLAGS_relay_window_kb)) << 10;
      options.subscribe_wait = absl::Seconds(10);
      relay = std::make_unique<moqt::Relay>(relay_loop.thread->loop(), options);
      relay_server = *moqt::MoqtServer::Create(relay_loop.thread->loop(), "127.0.0.1", 0,
                                               server_tls, Transport(),
                                               moqt::SessionOptions{}, relay.get());
    });
    prefill.Run([&] {
      publisher = std::make_unique<Publisher>(prefill_pool.get(), prefill_backend.get(), kModel,
                                              kChunk);
      if (absl::GetFlag(FLAGS_ac_threads)) publisher->CodeAcInBackground(prefill.thread->loop());
      publisher_server = *moqt::MoqtServer::Create(prefill.thread->loop(), "127.0.0.1", 0,
                                                   server_tls, Transport(),
                                                   moqt::SessionOptions{}, publisher.get());
      publisher->upstream = *moqt::MoqtClient::Connect(prefill.thread->loop(), "127.0.0.1",
                                            relay_server->port(), certs.Client(),
                                            Transport(), moqt::SessionOptions{},
                                            publisher.get());
    });
    publisher->ready.WaitForNotification();
    // A decode side's client of `port` and its ac thread (--ac_threads).
    auto connect = [&](Loop& side, uint16_t port, Ready* ready) {
      return *moqt::MoqtClient::Connect(side.thread->loop(), "127.0.0.1", port, certs.Client(),
                                        Transport(), moqt::SessionOptions{}, ready);
    };
    auto ac_thread = [&](Loop& side) {
      return absl::GetFlag(FLAGS_ac_threads)
                 ? std::make_unique<AcCodecThread>(layout, side.thread->loop())
                 : nullptr;
    };
    decode.Run([&] {
      decode_ac = ac_thread(decode);
      direct = connect(decode, publisher_server->port(), &direct_ready);
      via_relay = connect(decode, relay_server->port(), &relay_ready);
    });
    decode2.Run([&] {
      decode2_ac = ac_thread(decode2);
      direct2 = connect(decode2, publisher_server->port(), &direct2_ready);
    });
    direct_ready.ready.WaitForNotification();
    relay_ready.ready.WaitForNotification();
    direct2_ready.ready.WaitForNotification();
  }

  ~Bench() {
    decode.Run([&] {
      direct.reset();
      via_relay.reset();
      decode_ac.reset();
    });
    decode2.Run([&] {
      direct2.reset();
      decode2_ac.reset();
    });
    prefill.Run([&] {
      publisher->upstream.reset();
      publisher_server.reset();
      publisher.reset();
      prompt_pages.Reset();
    });
    relay_loop.Run([&] {
      relay_server.reset();
      relay.reset();
    });
  }

  // Publishes a new prompt of `tokens` tokens (every chunk ready, as after
  // a prefill) and returns its digest.
  std::string NewPrompt(int tokens) {
    char digest[33];
    std::snprintf(digest, sizeof(digest), "%032x", ++prompts);
    prefill.Run([&] {
      (void)publisher->BeginPrompt(digest, tokens);
      const int per_chunk = kChunk / layout.page_tokens;
      for (int g = 0; g * kChunk < tokens; ++g) {
        const int pages = (std::min(kChunk, tokens - g * kChunk) + 15) / 16;
        (void)publisher->ChunkReady(digest, g, *prompt_pages.Share(g * per_chunk, pages));
      }
      (void)publisher->EndPrompt(digest, absl::OkStatus());
    });
    return digest;
  }

  // One decode side: a loop, its pool, its ac thread.
  struct Side {
    Loop* loop;
    KvPagePool* pool;
    Backend* backend;
    AcCodecThread* ac;
  };
  Side Decode1() { return {&decode, decode_pool.get(), decode_backend.get(), decode_ac.get()}; }
  Side Decode2() { return {&decode2, decode2_pool.get(), decode2_backend.get(), decode2_ac.get()}; }

  // Subscribes to groups [first, end) of `track` through `client` (on
  // `side`'s loop) into `side`'s pages; `done` is notified when they landed.
  void StartLanding(const Side& side, moqt::MoqtClient* client, const moqt::FullTrackName& track,
                    int tokens, int first, int end, absl::Notification* done,
                    absl::Status* result) {
    side.loop->Run([&] {
      const int n = std::min(end * kChunk, tokens) - first * kChunk;
      auto lander = KvLander::Create(
          side.pool, side.backend, kModel, track,
          LandingSpec{kChunk, tokens, first, end, *side.pool->Allocate((n + 15) / 16), side.ac},
          [done, result](absl::StatusOr<KvPages> r) {  // landed pages go back at once
            *result = r.status();
            done->Notify();
          });
      moqt::Subscribe s;
      s.track = track;
      s.filter_type = moqt::FilterType::kAbsoluteRange;
      s.start = moqt::Location{uint64_t(first), 0};
      s.end_group = end - 1;
      (void)client->session()->Subscribe(s, *lander, [](auto) {});
    });
  }

  static void Check(const moqt::FullTrackName& track, const absl::Status& result) {
    if (result.ok()) return;
    std::fprintf(stderr, "kv_path_bench: %s: %s\n", moqt::ToString(track).c_str(),
                 result.ToString().c_str());
    std::exit(1);
  }

  // Lands the whole track through `client`'s session; seconds.
  double Land(moqt::MoqtClient* client, const moqt::FullTrackName& track, int tokens) {
    absl::Notification done;
    absl::Status result;
    const absl::Time start = absl::Now();
    StartLanding(Decode1(), client, track, tokens, 0, (tokens + kChunk - 1) / kChunk, &done,
                 &result);
    done.WaitForNotification();
    const double secs = absl::ToDoubleSeconds(absl::Now() - start);
    Check(track, result);
    return secs;
  }

  // Lands the whole track over two connections to the publisher, each on a
  // decode loop of its own with half of the groups; seconds.
  double LandSplit(const moqt::FullTrackName& track, int tokens) {
    absl::Notification done[2];
    absl::Status result[2];
    const int groups = (tokens + kChunk - 1) / kChunk, half = (groups + 1) / 2;
    const absl::Time start = absl::Now();
    StartLanding(Decode1(), direct.get(), track, tokens, 0, half, &done[0], &result[0]);
    StartLanding(Decode2(), direct2.get(), track, tokens, half, groups, &done[1], &result[1]);
    done[0].WaitForNotification();
    done[1].WaitForNotification();
    const double secs = absl::ToDoubleSeconds(absl::Now() - start);
    Check(track, result[0]);
    Check(track, result[1]);
    return secs;
  }

  uint64_t PublisherBytes() {
    uint64_t b = 0;
    prefill.Run([&] { b = publisher->stats().bytes_sent; });
    return b;
  }

  // Live fan-out of a new prompt to `n` subscribers of the relay: seconds
  // until all have the track, and the publisher's payload bytes meanwhile.
  std::pair<double, uint64_t> FanOut(int n, const KvCompression& c, int tokens,
                                     uint64_t track_bytes) {
    std::vector<std::unique_ptr<Ready>> ready(n);
    std::vector<std::unique_ptr<moqt::MoqtClient>> clients(n);
    fan.Run([&] {
      for (int i = 0; i < n; ++i) {
        ready[i] = std::make_unique<Ready>();
        clients[i] = *moqt::MoqtClient::Connect(fan.thread->loop(), "127.0.0.1",
                                                relay_server->port(), certs.Client(),
                                                Transport(), moqt::SessionOptions{},
                                                ready[i].get());
      }
    });
    for (auto& r : ready) r->ready.WaitForNotification();
    const std::string digest = NewPrompt(tokens);
    const auto track = FullTrackNameOf({ModelId(kModel), digest, c});
    const uint64_t before = PublisherBytes();
    std::atomic<int> done{0};
    std::vector<std::shared_ptr<Counter>> counters;
    const absl::Time start = absl::Now();
    fan.Run([&] {
      for (int i = 0; i < n; ++i) {
        counters.push_back(std::make_shared<Counter>(&done));
        moqt::Subscribe s;
        s.track = track;
        s.filter_type = moqt::FilterType::kAbsoluteStart;
        s.start = moqt::Location{0, 0};
        (void)clients[i]->session()->Subscribe(s, counters.back(), [](auto) {});
      }
    });
    while (done.load() < n) absl::SleepFor(absl::Milliseconds(1));
    const double secs = absl::ToDoubleSeconds(absl::Now() - start);
    fan.Run([&] {
      for (const auto& counter : counters) {
        if (!counter->status.ok() || counter->bytes != track_bytes) {
          std::fprintf(stderr, "kv_path_bench: fan-out subscriber got %llu of %llu bytes: %s\n",
                       (unsigned long long)counter->bytes, (unsigned long long)track_bytes,
                       counter->status.ToString().c_str());
          std::exit(1);
        }
      }
      clients.clear();
    });
    return {secs, PublisherBytes() - before};
  }
};

// Encoded bytes of a whole prompt in `c`.
uint64_t TrackBytes(Bench& b, const KvCompression& c, const std::string& digest, int tokens) {
  if (!c.ac) return uint64_t(TokenCodec(b.layout, c.format).token_bytes()) * tokens;
  // ac: what the publisher sent for one direct landing of it.
  const uint64_t before = b.PublisherBytes();
  b.Land(b.direct.get(), FullTrackNameOf({ModelId(kModel), digest, c}), tokens);
  return b.PublisherBytes() - before;
}

double MiBps(uint64_t bytes, double secs) { return bytes / secs / (1 << 20); }

// Seconds of CPU (user + system) every thread of this process has used.
double ProcessCpuSeconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// Each thread's name and CPU seconds so far, by thread id
// (/proc/self/task/<tid>/comm and schedstat).
std::map<int, std::pair<std::string, double>> ThreadCpuSeconds() {
  std::map<int, std::pair<std::string, double>> out;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return out;
  while (dirent* e = readdir(dir)) {
    int tid = 0;
    if (!absl::SimpleAtoi(e->d_name, &tid)) continue;
    const std::string task = absl::StrCat("/proc/self/task/", tid, "/");
    std::ifstream comm(task + "comm"), stat(task + "schedstat");
    std::string name;
    uint64_t ns = 0;
    if (std::getline(comm, name) && (stat >> ns)) out[tid] = {name, ns * 1e-9};
  }
  closedir(dir);
  return out;
}

// The two busiest threads between two snapshots, in cores over `secs`:
// "prefill 0.96, decode 0.61". The limit of a case whose busiest thread
// is near 1 is that thread.
std::string Busiest(const std::map<int, std::pair<std::string, double>>& before,
                    const std::map<int, std::pair<std::string, double>>& after, double secs) {
  std::vector<std::pair<double, std::string>> busy;
  for (const auto& [tid, cpu] : after) {
    auto it = before.find(tid);
    busy.emplace_back((cpu.second - (it == before.end() ? 0 : it->second.second)) / secs,
                      cpu.first);
  }
  std::sort(busy.rbegin(), busy.rend());
  std::string out;
  for (size_t i = 0; i < busy.size() && i < 2; ++i) {
    absl::StrAppend(&out, i ? ", " : "", busy[i].second, absl::StrFormat(" %.2f", busy[i].first));
  }
  return out;
}

// A case's wall seconds, the CPU seconds the whole process spent in it,
// and its busiest threads.
struct Cost {
  double secs = 0, cpu = 0;
  std::string threads = "-";
};
template <typename F>
Cost Measure(bool want, F run) {
  if (!want) return {};
  const double cpu0 = ProcessCpuSeconds();
  const auto threads0 = ThreadCpuSeconds();
  const double secs = run();
  return {secs, ProcessCpuSeconds() - cpu0, Busiest(threads0, ThreadCpuSeconds(), secs)};
}

bool Want(absl::string_view name) {
  for (absl::string_view c : absl::StrSplit(absl::GetFlag(FLAGS_cases), ',')) {
    if (c == name) return true;
  }
  return false;
}

int Main() {
  const std::vector<int> token_counts = Ints(absl::GetFlag(FLAGS_tokens));
  const std::vector<int> fanouts = Ints(absl::GetFlag(FLAGS_fanout));
  const int fan_tokens = absl::GetFlag(FLAGS_fanout_tokens);
  std::vector<KvCompression> tracks;
  for (absl::string_view t : absl::StrSplit(absl::GetFlag(FLAGS_tracks), ',', absl::SkipEmpty())) {
    absl::StatusOr<KvCompression> c = CompressionOfTrackName(std::string(t));
    if (!c.ok()) {
      std::fprintf(stderr, "kv_path_bench: --tracks: %s\n", c.status().ToString().c_str());
      return 2;
    }
    tracks.push_back(*c);
  }
  int max_tokens = fan_tokens;
  for (int t : token_counts) max_tokens = std::max(max_tokens, t);
  gnutls_global_init();
  Bench b(absl::GetFlag(FLAGS_layers), max_tokens);

  if (absl::GetFlag(FLAGS_relay_warm) && (Want("relay") || Want("cached") || Want("fanout"))) {
    // The measured tracks then evict the throwaway ones and reuse their memory.
    const KvCompression fp16(KvFormat::kFp16);
    const uint64_t budget = uint64_t(absl::GetFlag(FLAGS_relay_cache_mb)) << 20;
    const uint64_t per_track = uint64_t(TokenCodec(b.layout, fp16.format).token_bytes()) * max_tokens;
    std::fprintf(stderr, "kv_path_bench: warming the relay's cache (%llu MiB)...\n",
                 static_cast<unsigned long long>(budget >> 20));
    for (uint64_t filled = 0; filled < budget; filled += per_track) {
      const std::string digest = b.NewPrompt(max_tokens);
      b.Land(b.via_relay.get(), FullTrackNameOf({ModelId(kModel), digest, fp16}), max_tokens);
    }
  }

  std::printf("| tokens | track | MiB | direct MiB/s | direct, 2 connections MiB/s | relay live "
              "MiB/s | relay cached MiB/s | tls-tcp MiB/s | direct / tls-tcp | live / direct | "
              "CPU ms/MiB: direct, 2 connections, live, tls-tcp | busiest threads (cores): "
              "direct; live |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (int tokens : token_counts) {
    for (const KvCompression& c : tracks) {
      const std::string digest = b.NewPrompt(tokens);
      const auto track = FullTrackNameOf({ModelId(kModel), digest, c});
      const uint64_t bytes = TrackBytes(b, c, digest, tokens);
      const Cost direct_cost =
          Measure(Want("direct"), [&] { return b.Land(b.direct.get(), track, tokens); });
      const Cost split_cost = Measure(Want("direct2"), [&] { return b.LandSplit(track, tokens); });
      const Cost live_cost =
          Measure(Want("relay"), [&] { return b.Land(b.via_relay.get(), track, tokens); });
      const double cached = Want("cached") ? b.Land(b.via_relay.get(), track, tokens) : 0;
      const Cost tls_cost =
          Measure(Want("tls"), [&] { return TlsTcpSeconds(bytes, b.certs.paths); });
      const double direct = direct_cost.secs, live = live_cost.secs, tls = tls_cost.secs;
      auto cpu = [&](const Cost& c) {
        return c.secs > 0 ? absl::StrFormat("%.1f", c.cpu * 1e3 / (bytes / double(1 << 20)))
                          : std::string("-");
      };
      auto rate = [&](double secs) {
        return secs > 0 ? absl::StrFormat("%.0f", MiBps(bytes, secs)) : std::string("-");
      };
      auto ratio = [](double num, double den) {
        return num > 0 && den > 0 ? absl::StrFormat("%.2fx", num / den) : std::string("-");
      };
      std::printf("| %d | %s | %.1f | %s | %s | %s | %s | %s | %s | %s | %s, %s, %s, %s | %s; %s |\n",
                  tokens, TrackNameOf(c).c_str(), bytes / double(1 << 20), rate(direct).c_str(),
                  rate(split_cost.secs).c_str(), rate(live).c_str(), rate(cached).c_str(),
                  rate(tls).c_str(), ratio(tls, direct).c_str(), ratio(direct, live).c_str(),
                  cpu(direct_cost).c_str(), cpu(split_cost).c_str(), cpu(live_cost).c_str(),
                  cpu(tls_cost).c_str(), direct_cost.threads.c_str(), live_cost.threads.c_str());
      std::fflush(stdout);
    }
  }

  if (!Want("fanout")) return 0;
  const KvCompression fan_track = tracks.front();
  const uint64_t fan_bytes = TrackBytes(b, fan_track, b.NewPrompt(fan_tokens), fan_tokens);
  std::printf("\nLive fan-out through the relay, %s, %d tokens (%.1f MiB):\n\n"
              "| subscribers | seconds | delivered MiB/s | publisher sent (copies) | "
              "vs 1 subscriber x N | CPU ms per MiB delivered | cores busy | busiest threads "
              "(cores) |\n"
              "|---|---|---|---|---|---|---|---|\n",
              TrackNameOf(fan_track).c_str(), fan_tokens, fan_bytes / double(1 << 20));
  double one = 0;
  for (int n : fanouts) {
    uint64_t sent = 0;
    const Cost cost = Measure(true, [&] {
      const auto [secs, publisher_sent] = b.FanOut(n, fan_track, fan_tokens, fan_bytes);
      sent = publisher_sent;
      return secs;
    });
    const double rate = MiBps(fan_bytes * n, cost.secs);
    if (one == 0) one = rate / n;
    std::printf("| %d | %.3f | %.0f | %.2f | %.2fx | %.2f | %.2f | %s |\n", n, cost.secs, rate,
                double(sent) / fan_bytes, rate / (one * n),
                cost.cpu * 1e3 / (double(fan_bytes) * n / (1 << 20)), cost.cpu / cost.secs,
                cost.threads.c_str());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace kvcast::kvcache

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string precision = absl::GetFlag(FLAGS_kv_cache_precision);
  if (precision != "fp16" && precision != "fp32") {
    std::fprintf(stderr, "kv_path_bench: --kv_cache_precision: '%s' is not fp16 or fp32\n",
                 precision.c_str());
    return 2;
  }
  return kvcast::kvcache::Main();
}
