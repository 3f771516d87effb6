// kv_path_bench: the KV data path at real sizes, all cases in one run and
// in turn, round after round, so the ratios compare like with like (issues
// 19 and 40). Llama-3-8B-shaped KV (32 layers, 8 KV heads x 128), per track
// and prompt length:
//   moqt-bytes  the track's bytes from a hot buffer (objects of one token's
//               size, 128 a group, sent by reference) to a subscriber that
//               counts them: MoQT + QUIC + TLS 1.3, no codec
//   tls         the same bytes on one TLS 1.3 TCP stream (GnuTLS, AES-128-GCM
//               as QUIC negotiates), 1 MiB writes and reads: the byte baseline
//   direct      KvPublisher -> KvLander over MoQT: pages encoded into the
//               track, landed and decoded into the decode side's pages
//   tls-kv      the same KV work over TLS/TCP: pages encoded (TokenCodec) and
//               written, read and decoded into pages (fixed-size tracks)
//   direct2     direct over two connections, each landing half of the
//               groups on a decode loop of its own (the publisher keeps one)
//   relay       KvPublisher -> Relay -> KvLander, live (the track not cached
//               yet; the relay's cache full of other tracks: --relay_warm)
//   cached      Relay -> KvLander, the same track again (from the relay cache)
// then live fan-out through the relay to 1, 4, 16 subscribers that count
// the bytes (the relay fans out; the publisher sends one copy).
//
//   bazel build -c opt //tools/bench:kv_path_bench &&
//   bazel-bin/tools/bench/kv_path_bench [--tokens 1024,4096] [--tracks fp16,int8,ac]
//                                       [--rounds 3] [--cases ...] [--fanout 1,4,16]
//
// Each side (prefill, relay, decode, fan-out clients; the TLS pair's two
// ends) has a thread of its own; MiB/s counts the track's encoded bytes.
// Time runs from SUBSCRIBE (the first write for TLS) to the last byte
// counted or the last token landed. CPU ms/MiB: what the whole process
// spent on the case per MiB moved, and the same by thread name (the loops
// "prefill", "relay", "decode", "decode2", "fanout"; "ac-coder"; "tls-send"
// and "tls-recv"): with both cores busy, rate ~= 2 cores / CPU per byte, so
// the ratio of two cases' CPU per MiB bounds the ratio of their rates. The
// tables give each case's median and range over the rounds, and the ratios
// of the cases that compare like with like, round by round.
#include <gnutls/gnutls.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>

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
#include "tools/bench/result_file.h"
#include "tools/bench/thread_cpu.h"
#include "tools/bench/tls_tcp_pair.h"
#include "tools/devcert/devcert.h"

ABSL_FLAG(std::string, tokens, "1024,4096", "prompt lengths (tokens)");
ABSL_FLAG(std::string, tracks, "fp16,int8,ac", "KV tracks");
ABSL_FLAG(std::string, fanout, "1,4,16", "subscriber counts for the fan-out case");
ABSL_FLAG(int, fanout_tokens, 1024, "prompt length of the fan-out case");
ABSL_FLAG(int, layers, 32, "layers (Llama-3-8B: 32)");
ABSL_FLAG(int, relay_loop_threads, 1,
          "the relay server's loop threads (MoqtServer::Create: connections spread over them, "
          "sessions and cache on the first)");
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
ABSL_FLAG(std::string, cases, "moqt-bytes,tls,direct,tls-kv,direct2,relay,cached,fanout",
          "the cases to run, e.g. direct alone under perf");
ABSL_FLAG(std::string, json, "", "also write every round's numbers here as a JSON result file");
ABSL_FLAG(int, rounds, 3, "rounds: each runs every case once, in turn; results are medians and "
          "ranges over the rounds");

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
  // The byte-transport case: a hot buffer served on the prefill loop.
  bench::BytePublisher byte_publisher;
  std::unique_ptr<moqt::MoqtServer> byte_server;
  std::unique_ptr<moqt::MoqtClient> byte_client;
  Ready byte_ready;
  // The decode loops' ac threads; null without --ac_threads.
  std::unique_ptr<AcCodecThread> decode_ac, decode2_ac;
  Ready direct_ready, relay_ready, direct2_ready;
  int prompts = 0, byte_tracks = 0;

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
                                               server_tls, Transport(), moqt::SessionOptions{},
                                               relay.get(), absl::GetFlag(FLAGS_relay_loop_threads));
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
    prefill.Run([&] {
      byte_server = *moqt::MoqtServer::Create(prefill.thread->loop(), "127.0.0.1", 0, server_tls,
                                              Transport(), moqt::SessionOptions{},
                                              &byte_publisher);
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
      byte_client = connect(decode, byte_server->port(), &byte_ready);
    });
    decode2.Run([&] {
      decode2_ac = ac_thread(decode2);
      direct2 = connect(decode2, publisher_server->port(), &direct2_ready);
    });
    direct_ready.ready.WaitForNotification();
    relay_ready.ready.WaitForNotification();
    direct2_ready.ready.WaitForNotification();
    byte_ready.ready.WaitForNotification();
  }

  ~Bench() {
    decode.Run([&] {
      direct.reset();
      via_relay.reset();
      byte_client.reset();
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
      byte_server.reset();
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

  // About `bytes` (whole objects of bytes / tokens) from the byte
  // publisher's hot buffer to a counting subscriber on the decode loop, over
  // MoQT as the track would go: seconds.
  double MoveBytes(uint64_t bytes, int tokens) {
    const size_t object_bytes = bytes / uint64_t(tokens);
    prefill.Run([&] { byte_publisher.SetTrack(object_bytes, uint64_t(tokens)); });
    std::atomic<int> done{0};
    auto counter = std::make_shared<Counter>(&done);
    moqt::Subscribe s;
    s.track = moqt::FullTrackName{{"kv_path_bench"}, absl::StrCat("bytes-", ++byte_tracks)};
    s.filter_type = moqt::FilterType::kAbsoluteStart;
    s.start = moqt::Location{0, 0};
    const absl::Time start = absl::Now();
    decode.Run([&] {
      if (auto id = byte_client->session()->Subscribe(s, counter, [](auto) {}); !id.ok()) {
        Check(s.track, id.status());
      }
    });
    while (done.load() == 0) absl::SleepFor(absl::Microseconds(200));
    const double secs = absl::ToDoubleSeconds(absl::Now() - start);
    decode.Run([&] { Check(s.track, counter->status); });
    if (counter->bytes != object_bytes * tokens) {
      std::fprintf(stderr, "kv_path_bench: byte track: %llu of %llu bytes\n",
                   (unsigned long long)counter->bytes,
                   (unsigned long long)(object_bytes * tokens));
      std::exit(1);
    }
    return secs;
  }

  // The direct case's KV work over TLS 1.3/TCP instead of MoQT: the sender
  // encodes the prompt's pages into the track's bytes (TokenCodec, as
  // KvPublisher does for host pages, about 1 MiB of tokens at a time) and
  // writes them; the receiver reads each batch and decodes it into the decode
  // side's pages, as KvLander does. Fixed-size tracks only.
  bench::TlsTcpRun TlsKv(const KvCompression& c, int tokens) {
    const TokenCodec codec(layout, c.format);
    const size_t token_bytes = codec.token_bytes();
    const int batch = std::max<int>(1, int((1 << 20) / token_bytes));
    // The pool is the decode loop's (whose landings return pages there).
    KvPages landing;
    decode.Run([&] {
      landing = *decode_pool->Allocate((tokens + layout.page_tokens - 1) / layout.page_tokens);
    });
    const std::vector<int32_t> from = SlotsOf(prompt_pages.ids(), layout.page_tokens, 0, tokens);
    const std::vector<int32_t> to = SlotsOf(landing.ids(), layout.page_tokens, 0, tokens);
    auto check = [](const absl::Status& st) {
      if (st.ok()) return;
      std::fprintf(stderr, "kv_path_bench: tls-kv: %s\n", st.ToString().c_str());
      std::exit(1);
    };
    const bench::TlsTcpRun run = bench::OverTlsTcp(
        certs.paths,
        [&](gnutls_session_t session) {
          std::vector<uint8_t> buf(batch * token_bytes);
          for (int t = 0; t < tokens; t += batch) {
            const int n = std::min(batch, tokens - t);
            check(codec.Encode(prefill_backend.get(), *prefill_pool,
                               absl::MakeConstSpan(from).subspan(t, n), buf.data()));
            bench::TlsSendAll(session, buf.data(), n * token_bytes);
          }
        },
        [&](gnutls_session_t session) {
          std::vector<uint8_t> buf(batch * token_bytes);
          for (int t = 0; t < tokens; t += batch) {
            const int n = std::min(batch, tokens - t);
            bench::TlsReceiveExactly(session, buf.data(), n * token_bytes);
            check(codec.Decode(decode_backend.get(), buf.data(),
                               absl::MakeConstSpan(to).subspan(t, n), decode_pool.get()));
          }
        });
    decode.Run([&] { landing.Reset(); });
    return run;
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
  if (c.fixed_size()) return uint64_t(TokenCodec(b.layout, c.format).token_bytes()) * tokens;
  // ac: what the publisher sent for one direct landing of it.
  const uint64_t before = b.PublisherBytes();
  b.Land(b.direct.get(), FullTrackNameOf({ModelId(kModel), digest, c}), tokens);
  return b.PublisherBytes() - before;
}

double MiBps(uint64_t bytes, double secs) { return bytes / secs / (1 << 20); }

// `bytes` from a hot buffer over loopback TLS 1.3/TCP, written and read
// 1 MiB at a time: the byte-transport baseline.
bench::TlsTcpRun TlsBytes(const devcert::DevCertPaths& certs, uint64_t bytes) {
  constexpr size_t kPiece = 1 << 20;
  return bench::OverTlsTcp(
      certs,
      [&](gnutls_session_t session) {
        const std::vector<uint8_t> payload(kPiece, 0x5a);
        for (uint64_t sent = 0; sent < bytes; sent += kPiece) {
          bench::TlsSendAll(session, payload.data(), std::min<uint64_t>(kPiece, bytes - sent));
        }
      },
      [&](gnutls_session_t session) {
        std::vector<uint8_t> buf(kPiece);
        for (uint64_t got = 0; got < bytes; got += kPiece) {
          bench::TlsReceiveExactly(session, buf.data(), std::min<uint64_t>(kPiece, bytes - got));
        }
      });
}

// One run of a case: wall seconds, the process's CPU seconds, and CPU
// seconds by thread name.
struct Cost {
  double secs = 0, cpu = 0;
  std::vector<std::pair<std::string, double>> threads;
};
template <typename F>
Cost Measure(F run) {
  const double cpu0 = bench::ProcessCpuSeconds();
  const bench::ThreadCpu threads0 = bench::SnapshotThreadCpu();
  const double secs = run();
  return {secs, bench::ProcessCpuSeconds() - cpu0,
          bench::CpuByName(threads0, bench::SnapshotThreadCpu())};
}
// The TLS ends' threads are gone when Measure looks: they report their own.
template <typename F>
Cost MeasureTls(F run) {
  bench::TlsTcpRun r;
  Cost c = Measure([&] {
    r = run();
    return r.seconds;
  });
  c.threads.emplace_back("tls-send", r.send_cpu_seconds);
  c.threads.emplace_back("tls-recv", r.receive_cpu_seconds);
  std::sort(c.threads.begin(), c.threads.end(),
            [](const auto& a, const auto& b) { return a.second > b.second; });
  return c;
}

bool Want(absl::string_view name) {
  for (absl::string_view c : absl::StrSplit(absl::GetFlag(FLAGS_cases), ',')) {
    if (c == name) return true;
  }
  return false;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
// "812 (730-850)": the median and the range of `v`, printf-formatted.
std::string MedianRange(const std::vector<double>& v, const char* format) {
  if (v.empty()) return "-";
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return absl::StrCat(absl::StrFormat(format, Median(v)), " (", absl::StrFormat(format, *lo), "-",
                      absl::StrFormat(format, *hi), ")");
}

// Every round's runs of each case of one track and prompt length.
struct Runs {
  uint64_t bytes = 0;
  std::map<std::string, std::vector<Cost>> by_case;
  double Mib() const { return bytes / double(1 << 20); }
  std::vector<double> Rates(const std::string& c) const {
    std::vector<double> out;
    if (auto it = by_case.find(c); it != by_case.end()) {
      for (const Cost& r : it->second) out.push_back(MiBps(bytes, r.secs));
    }
    return out;
  }
  std::vector<double> CpuPerMib(const std::string& c) const {
    std::vector<double> out;
    if (auto it = by_case.find(c); it != by_case.end()) {
      for (const Cost& r : it->second) out.push_back(r.cpu * 1e3 / Mib());
    }
    return out;
  }
  // Per round: case a's value over case b's (rates or CPU per MiB).
  static std::vector<double> Ratios(const std::vector<double>& a, const std::vector<double>& b) {
    std::vector<double> out;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) out.push_back(a[i] / b[i]);
    return out;
  }
  // The threads of the case's median-rate run: "prefill 1.10, decode 0.85".
  std::string Threads(const std::string& c) const {
    auto it = by_case.find(c);
    if (it == by_case.end() || it->second.empty()) return "-";
    std::vector<Cost> runs = it->second;
    std::sort(runs.begin(), runs.end(), [](const Cost& x, const Cost& y) { return x.secs < y.secs; });
    std::string out;
    for (const auto& [name, cpu] : runs[runs.size() / 2].threads) {
      const double ms = cpu * 1e3 / Mib();
      if (ms >= 0.05) absl::StrAppend(&out, out.empty() ? "" : ", ", name, absl::StrFormat(" %.2f", ms));
    }
    return out;
  }
};

// The cases in the order each round runs them ("cached" reads what "relay"
// left in the relay's cache).
constexpr const char* kCases[] = {"moqt-bytes", "tls", "direct", "tls-kv", "direct2", "relay",
                                  "cached"};

// One result row per case: every round's rate, CPU per MiB, and CPU per
// MiB by thread name.
void AddRows(const Runs& runs, nlohmann::json extra, nlohmann::json* rows) {
  for (const auto& [name, costs] : runs.by_case) {
    nlohmann::json threads = nlohmann::json::array();
    for (const Cost& c : costs) {
      nlohmann::json t = nlohmann::json::object();
      for (const auto& [thread, seconds] : c.threads) t[thread] = seconds * 1e3 / runs.Mib();
      threads.push_back(std::move(t));
    }
    nlohmann::json row = extra;
    row.update({{"case", name}, {"mib", runs.Mib()}, {"mib_per_s", runs.Rates(name)},
                {"cpu_ms_per_mib", runs.CpuPerMib(name)},
                {"thread_cpu_ms_per_mib", std::move(threads)}});
    rows->push_back(std::move(row));
  }
}

void PrintRuns(const std::map<std::pair<int, std::string>, Runs>& all) {
  std::printf("\n| tokens | track | case | MiB | MiB/s: median (range) | CPU ms/MiB, process: median "
              "(range) | CPU ms/MiB by thread (the median run) |\n"
              "|---|---|---|---|---|---|---|\n");
  for (const auto& [key, runs] : all) {
    for (const char* c : kCases) {
      if (!runs.by_case.count(c)) continue;
      std::printf("| %d | %s | %s | %.1f | %s | %s | %s |\n", key.first, key.second.c_str(), c,
                  runs.Mib(), MedianRange(runs.Rates(c), "%.0f").c_str(),
                  MedianRange(runs.CpuPerMib(c), "%.2f").c_str(), runs.Threads(c).c_str());
    }
  }
  std::printf("\nRatios of the same round's runs, median (range):\n\n"
              "| tokens | track | moqt-bytes / tls: rate | CPU per MiB | direct / tls-kv: rate | "
              "CPU per MiB | relay live / direct: rate |\n|---|---|---|---|---|---|---|\n");
  for (const auto& [key, r] : all) {
    std::printf("| %d | %s | %s | %s | %s | %s | %s |\n", key.first, key.second.c_str(),
                MedianRange(Runs::Ratios(r.Rates("moqt-bytes"), r.Rates("tls")), "%.2fx").c_str(),
                MedianRange(Runs::Ratios(r.CpuPerMib("moqt-bytes"), r.CpuPerMib("tls")), "%.2fx")
                    .c_str(),
                MedianRange(Runs::Ratios(r.Rates("direct"), r.Rates("tls-kv")), "%.2fx").c_str(),
                MedianRange(Runs::Ratios(r.CpuPerMib("direct"), r.CpuPerMib("tls-kv")), "%.2fx")
                    .c_str(),
                MedianRange(Runs::Ratios(r.Rates("relay"), r.Rates("direct")), "%.2fx").c_str());
  }
  std::fflush(stdout);
}

absl::Status WriteJson(nlohmann::json header, nlohmann::json rows) {
  const std::string path = absl::GetFlag(FLAGS_json);
  if (path.empty()) return absl::OkStatus();
  header.update({{"layers", absl::GetFlag(FLAGS_layers)}, {"rounds", absl::GetFlag(FLAGS_rounds)},
                 {"max_udp_payload", absl::GetFlag(FLAGS_max_udp_payload)}});
  return bench::WriteResultFile(path, std::move(header), std::move(rows));
}

int Main(nlohmann::json header) {
  const std::vector<int> token_counts = Ints(absl::GetFlag(FLAGS_tokens));
  const std::vector<int> fanouts = Ints(absl::GetFlag(FLAGS_fanout));
  const int fan_tokens = absl::GetFlag(FLAGS_fanout_tokens);
  const int rounds = absl::GetFlag(FLAGS_rounds);
  if (rounds < 1) {
    std::fprintf(stderr, "kv_path_bench: --rounds must be at least 1\n");
    return 2;
  }
  std::vector<KvCompression> tracks;
  for (absl::string_view t : absl::StrSplit(absl::GetFlag(FLAGS_tracks), ',', absl::SkipEmpty())) {
    absl::StatusOr<KvCompression> c = CompressionOfTrackName(std::string(t));
    if (!c.ok()) {
      std::fprintf(stderr, "kv_path_bench: --tracks: %s\n", c.status().ToString().c_str());
      return 2;
    }
    if (c->xl != nullptr) {
      std::fprintf(stderr, "kv_path_bench: --tracks: %s needs a model's KV basis, which this "
                           "benchmark's synthetic model has not\n", std::string(t).c_str());
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

  std::map<std::pair<int, std::string>, Runs> all;
  for (int tokens : token_counts) {
    for (const KvCompression& c : tracks) {
      all[{tokens, TrackNameOf(c)}].bytes = TrackBytes(b, c, b.NewPrompt(tokens), tokens);
    }
  }
  for (int round = 1; round <= rounds; ++round) {
    for (int tokens : token_counts) {
      for (const KvCompression& c : tracks) {
        Runs& runs = all[{tokens, TrackNameOf(c)}];
        const auto track = FullTrackNameOf({ModelId(kModel), b.NewPrompt(tokens), c});
        auto run = [&](const char* name, auto measure) {
          if (!Want(name)) return;
          const Cost cost = measure();
          runs.by_case[name].push_back(cost);
          std::fprintf(stderr, "kv_path_bench: round %d/%d, %d tokens, %s, %s: %.0f MiB/s, %.2f "
                       "CPU ms/MiB\n", round, rounds, tokens, TrackNameOf(c).c_str(), name,
                       MiBps(runs.bytes, cost.secs), cost.cpu * 1e3 / runs.Mib());
        };
        run("moqt-bytes", [&] { return Measure([&] { return b.MoveBytes(runs.bytes, tokens); }); });
        run("tls", [&] { return MeasureTls([&] { return TlsBytes(b.certs.paths, runs.bytes); }); });
        run("direct", [&] { return Measure([&] { return b.Land(b.direct.get(), track, tokens); }); });
        if (c.fixed_size()) run("tls-kv", [&] { return MeasureTls([&] { return b.TlsKv(c, tokens); }); });
        run("direct2", [&] { return Measure([&] { return b.LandSplit(track, tokens); }); });
        run("relay", [&] { return Measure([&] { return b.Land(b.via_relay.get(), track, tokens); }); });
        run("cached", [&] { return Measure([&] { return b.Land(b.via_relay.get(), track, tokens); }); });
      }
    }
  }
  PrintRuns(all);
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& [key, runs] : all) {
    AddRows(runs, {{"tokens", key.first}, {"track", key.second}}, &rows);
  }
  auto finish = [&] {
    if (absl::Status s = WriteJson(std::move(header), std::move(rows)); !s.ok()) {
      std::fprintf(stderr, "kv_path_bench: %s\n", s.ToString().c_str());
      return 1;
    }
    return 0;
  };
  if (!Want("fanout")) return finish();
  const KvCompression fan_track = tracks.front();
  const uint64_t fan_bytes = TrackBytes(b, fan_track, b.NewPrompt(fan_tokens), fan_tokens);
  std::map<int, Runs> fan;  // by subscribers; bytes: what they all received
  std::map<int, std::vector<double>> copies;  // the publisher's bytes / one track's
  for (int round = 1; round <= rounds; ++round) {
    for (int n : fanouts) {
      Runs& runs = fan[n];
      runs.bytes = fan_bytes * n;
      const Cost cost = Measure([&] {
        const auto [secs, publisher_sent] = b.FanOut(n, fan_track, fan_tokens, fan_bytes);
        copies[n].push_back(double(publisher_sent) / fan_bytes);
        return secs;
      });
      runs.by_case["fanout"].push_back(cost);
      std::fprintf(stderr, "kv_path_bench: round %d/%d, fan-out to %d: %.0f MiB/s delivered\n",
                   round, rounds, n, MiBps(runs.bytes, cost.secs));
    }
  }
  std::printf("\nLive fan-out through the relay, %s, %d tokens (%.1f MiB), median (range):\n\n"
              "| subscribers | delivered MiB/s | publisher sent (copies) | CPU ms per MiB delivered "
              "| CPU ms per MiB delivered by thread (the median run) |\n|---|---|---|---|---|\n",
              TrackNameOf(fan_track).c_str(), fan_tokens, fan_bytes / double(1 << 20));
  for (const auto& [n, runs] : fan) {
    std::printf("| %d | %s | %s | %s | %s |\n", n, MedianRange(runs.Rates("fanout"), "%.0f").c_str(),
                MedianRange(copies[n], "%.2f").c_str(),
                MedianRange(runs.CpuPerMib("fanout"), "%.2f").c_str(),
                runs.Threads("fanout").c_str());
    AddRows(runs, {{"tokens", fan_tokens}, {"track", TrackNameOf(fan_track)}, {"subscribers", n},
                   {"publisher_copies", copies[n]}},
            &rows);
  }
  return finish();
}

}  // namespace
}  // namespace kvcast::kvcache

int main(int argc, char** argv) {
  nlohmann::json header = kvcast::bench::ResultHeader("kv_path_bench", argc, argv);
  absl::ParseCommandLine(argc, argv);
  const std::string precision = absl::GetFlag(FLAGS_kv_cache_precision);
  if (precision != "fp16" && precision != "fp32") {
    std::fprintf(stderr, "kv_path_bench: --kv_cache_precision: '%s' is not fp16 or fp32\n",
                 precision.c_str());
    return 2;
  }
  return kvcast::kvcache::Main(std::move(header));
}
