// kv_transfer_bench: KV handoff throughput over MoQT on loopback QUIC, per
// compression, in one run (so the ratios compare like with like).
//
//   bazel build //transport/kvcache:kv_transfer_bench &&
//   bazel-bin/transport/kvcache/kv_transfer_bench [--chunks 8] [--layers 32]
//
// A KvPublisher (prefill side, its own loop thread) holds --chunks chunks of
// 128 tokens of a Llama-3-8B-shaped KV (8 KV heads x 128, --layers layers);
// a client (decode side, another loop thread) subscribes one track with a
// KvLander into its own page pool. Time runs from SUBSCRIBE to the last
// token landed: encode, QUIC + TLS, decode into pages.
#include <cstdio>
#include <random>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "transport/kvcache/lander.h"
#include "transport/kvcache/naming.h"
#include "transport/kvcache/publisher.h"
#include "transport/moqt/moqt_endpoint.h"
#include "transport/quic/quic_test_util.h"

ABSL_FLAG(int, chunks, 8, "128-token chunks per transfer");
ABSL_FLAG(int, layers, 32, "layers (Llama-3-8B: 32)");
ABSL_FLAG(int, runs, 2, "transfers per compression (best is reported)");

namespace kvcast::kvcache {
namespace {

constexpr int kChunk = 128;
const Hash128 kModel{0xbe4c, 0x4b};

struct Side {
  explicit Side(const KvLayout& layout, int pages) {
    thread = *quic::LoopThread::Start();
    backend = NewCpuBackend();
    pool = *KvPagePool::Create(backend.get(), layout, pages);
  }
  std::unique_ptr<quic::LoopThread> thread;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<KvPagePool> pool;
};

class Ready : public moqt::RequestHandler {
 public:
  void OnSessionReady(moqt::MoqtSession*) override { ready.Notify(); }
  absl::Notification ready;
};

int Main() {
  const int chunks = absl::GetFlag(FLAGS_chunks);
  const int tokens = chunks * kChunk;
  const KvLayout layout{absl::GetFlag(FLAGS_layers), 8, 128, 16};
  const int pages = tokens / layout.page_tokens;
  Side prefill(layout, pages), decode(layout, pages);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.f, 1.5f);
  for (int l = 0; l < layout.num_layers; ++l) {
    for (size_t i = 0; i < size_t(pages) * layout.page_floats(); ++i) {
      prefill.pool->k_cache(l)[i] = dist(rng);
      prefill.pool->v_cache(l)[i] = dist(rng);
    }
  }
  const auto certs = quic::testing::MakeTestCerts("kv-bench");
  std::unique_ptr<KvPublisher> publisher;
  std::unique_ptr<moqt::MoqtServer> server;
  const std::string digest(32, 'b');
  prefill.thread->RunSync([&] {
    publisher = std::make_unique<KvPublisher>(prefill.pool.get(), prefill.backend.get(), kModel,
                                              kChunk);
    quic::TlsOptions tls;
    tls.cert_file = certs.server_cert;
    tls.key_file = certs.server_key;
    server = *moqt::MoqtServer::Create(prefill.thread->loop(), "127.0.0.1", 0, tls,
                                       quic::TransportOptions{}, moqt::SessionOptions{},
                                       publisher.get());
    std::vector<int32_t> all = *prefill.pool->Allocate(pages);
    (void)publisher->BeginPrompt(digest, tokens);
    const int per_chunk = kChunk / layout.page_tokens;
    for (int g = 0; g < chunks; ++g) {
      (void)publisher->ChunkReady(digest, g, absl::MakeSpan(all).subspan(g * per_chunk, per_chunk));
    }
    (void)publisher->EndPrompt(digest, absl::OkStatus());
    (void)prefill.pool->ReleaseAll(all);  // the publisher holds its own references
  });
  Ready handler;
  std::unique_ptr<moqt::MoqtClient> client;
  decode.thread->RunSync([&] {
    quic::TlsOptions tls;
    tls.ca_file = certs.ca_cert;
    tls.server_name = "localhost";
    client = *moqt::MoqtClient::Connect(decode.thread->loop(), "127.0.0.1", server->port(), tls,
                                        quic::TransportOptions{}, moqt::SessionOptions{}, &handler);
  });
  handler.ready.WaitForNotification();

  std::printf("| track | bytes/token | MiB on the wire | seconds | Gbit/s | tokens/s | vs fp16 |\n"
              "|---|---|---|---|---|---|---|\n");
  double fp16_rate = 0;
  for (KvFormat f : kAllKvFormats) {
    double best = 1e9;
    for (int run = 0; run < absl::GetFlag(FLAGS_runs); ++run) {
      absl::Notification done;
      absl::Status result;
      const absl::Time start = absl::Now();
      decode.thread->RunSync([&] {
        auto lander = KvLander::Create(
            decode.pool.get(), decode.backend.get(), kModel,
            FullTrackNameOf({ModelId(kModel), digest, f}),
            LandingSpec{kChunk, tokens, 0, chunks, *decode.pool->Allocate(pages)},
            [&, pool = decode.pool.get()](absl::StatusOr<std::vector<int32_t>> r) {
              result = r.status();
              if (r.ok()) (void)pool->ReleaseAll(*r);
              done.Notify();
            });
        moqt::Subscribe s;
        s.track = FullTrackNameOf({ModelId(kModel), digest, f});
        s.filter_type = moqt::FilterType::kAbsoluteStart;
        s.start = moqt::Location{0, 0};
        (void)client->session()->Subscribe(s, *lander, [](auto) {});
      });
      done.WaitForNotification();
      const double secs = absl::ToDoubleSeconds(absl::Now() - start);
      if (!result.ok()) {
        std::fprintf(stderr, "%s: %s\n", TrackNameOf(f).c_str(), result.ToString().c_str());
        return 1;
      }
      best = std::min(best, secs);
    }
    const size_t token_bytes = TokenCodec(layout, f).token_bytes();
    const double rate = tokens / best;
    if (f == KvFormat::kFp16) fp16_rate = rate;
    std::printf("| %s | %zu | %.1f | %.3f | %.2f | %.0f | %.2fx |\n", TrackNameOf(f).c_str(),
                token_bytes, double(token_bytes) * tokens / (1 << 20), best,
                8.0 * token_bytes * tokens / best / 1e9, rate, rate / fp16_rate);
    std::fflush(stdout);
  }
  decode.thread->RunSync([&] { client.reset(); });
  prefill.thread->RunSync([&] {
    server.reset();
    publisher.reset();
  });
  return 0;
}

}  // namespace
}  // namespace kvcast::kvcache

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return kvcast::kvcache::Main();
}
