// KvPublisher -> (relay) -> KvLander over real loopback QUIC: live chunks in
// any order for every compression, a relay serving a dropped prompt from its
// cache, prefix reuse by FETCH of another prompt's groups, and the errors a
// subscriber sees.
#include "transport/kvcache/publisher.h"

#include <chrono>
#include <thread>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "common/dtype.h"
#include "kernels/hadamard.h"
#include "kernels/profiling_backend.h"
#include "transport/kvcache/lander.h"
#include "transport/kvcache/naming.h"
#include "transport/kvcache/xl/kv_basis.h"
#include "transport/kvcache/xl_pages.h"
#include "transport/moqt/testing/moqt_test_util.h"

namespace kvcast::kvcache {
namespace {

using moqt::testing::ClientHandler;
using moqt::testing::RelayHarness;
using moqt::testing::WaitOnLoop;

const Hash128 kModel{0x1234, 0x5678};
constexpr int kChunk = 32;
const KvLayout kLayout{2, 2, 32, 16};

std::string Digest(int n) { return absl::StrCat(std::string(31, 'd'), n); }

// `v` (a multiple of 32 values) through fp16 and back.
void RoundToFp16(std::vector<float>& v) {
  std::vector<uint8_t> h(v.size() * 2);
  EncodeKvRow(KvFormat::kFp16, v.data(), int(v.size() / 32), 32, 32, h.data());
  DecodeKvRow(KvFormat::kFp16, h.data(), int(v.size() / 32), 32, 32, v.data());
}

// Tokens [first, first + count) of the sequence in `pages` of `pool`, in
// the ac codec's order (per token: each layer's K row, then its V row),
// through fp16 as the publisher codes them.
std::vector<float> AcGroupInput(KvPagePool& pool, absl::Span<const int32_t> pages, int first,
                                int count) {
  const KvLayout& layout = pool.layout();
  const int row = layout.token_floats(), n = 2 * layout.num_layers * row;
  std::vector<float> kv(size_t(count) * n);
  for (int t = 0; t < count; ++t) {
    const int32_t s = SlotsOf(pages, 16, first + t, 1)[0];
    for (int l = 0; l < layout.num_layers; ++l) {
      std::copy_n(pool.k_cache(l) + size_t(s) * row, row, &kv[t * n + 2 * l * row]);
      std::copy_n(pool.v_cache(l) + size_t(s) * row, row, &kv[t * n + (2 * l + 1) * row]);
    }
  }
  RoundToFp16(kv);
  return kv;
}

// One side's memory: a CPU backend and a page pool.
struct Memory {
  explicit Memory(KvLayout layout = kLayout) {
    backend = NewCpuBackend();
    pool = *KvPagePool::Create(backend.get(), layout, 64);
  }
  std::unique_ptr<Backend> backend;
  std::unique_ptr<KvPagePool> pool;
};

// The publisher connected to the relay as a client.
class PublisherHandler : public KvPublisher {
 public:
  using KvPublisher::KvPublisher;
  void OnSessionReady(moqt::MoqtSession* session) override { SetUpstream(session); }
};

// A MoqtServer on the harness's loop serving `handler` (a publisher), and
// a client of it on a loop thread of its own, which a test can stall.
struct Direct {
  Direct(RelayHarness& h, moqt::RequestHandler* handler) : h(h) {
    thread = *quic::LoopThread::Start();
    h.thread()->RunSync([&] {
      quic::TlsOptions tls;
      tls.cert_file = h.certs().server_cert;
      tls.key_file = h.certs().server_key;
      server = *moqt::MoqtServer::Create(h.loop(), "127.0.0.1", 0, tls, quic::TransportOptions{},
                                         moqt::SessionOptions{}, handler);
    });
    thread->RunSync([&] {
      quic::TlsOptions tls;
      tls.ca_file = h.certs().ca_cert;
      tls.server_name = "localhost";
      client = *moqt::MoqtClient::Connect(thread->loop(), "127.0.0.1", server->port(), tls,
                                          quic::TransportOptions{}, moqt::SessionOptions{},
                                          &client_handler);
    });
    EXPECT_TRUE(WaitOnLoop(thread.get(), [&] { return client_handler.ready; }));
  }
  ~Direct() { Close(); }
  // Subscribes to `track` from its start, then stalls the client's loop
  // for 400 ms: it neither takes data nor acknowledges meanwhile.
  std::shared_ptr<moqt::testing::CollectingConsumer> SubscribeAndStall(
      const moqt::FullTrackName& track) {
    auto consumer = std::make_shared<moqt::testing::CollectingConsumer>();
    absl::Status reply = absl::UnknownError("pending");
    thread->RunSync([&] {
      moqt::Subscribe s;
      s.track = track;
      s.filter_type = moqt::FilterType::kAbsoluteStart;
      s.start = moqt::Location{0, 0};
      EXPECT_TRUE(client->session()
                      ->Subscribe(s, consumer,
                                  [&](absl::StatusOr<moqt::TrackInfo> r) { reply = r.status(); })
                      .ok());
    });
    EXPECT_TRUE(WaitOnLoop(thread.get(), [&] { return reply.ok(); })) << reply;
    thread->loop()->Post([] { std::this_thread::sleep_for(std::chrono::milliseconds(400)); });
    return consumer;
  }
  bool WaitDone(const moqt::testing::CollectingConsumer& c) {
    return WaitOnLoop(thread.get(), [&] { return c.done; }, absl::Seconds(20));
  }
  void Close() {
    if (thread == nullptr) return;
    h.thread()->RunSync([&] { server.reset(); });
    thread->RunSync([&] { client.reset(); });
    thread.reset();
  }

  RelayHarness& h;
  std::unique_ptr<quic::LoopThread> thread;
  std::unique_ptr<moqt::MoqtServer> server;
  std::unique_ptr<moqt::MoqtClient> client;
  ClientHandler client_handler;
};

class KvOverMoqt : public ::testing::Test {
 protected:
  void SetUp() override {
    std::mt19937 rng(5);
    std::normal_distribution<float> dist(0.f, 2.f);
    const size_t floats = 64 * kLayout.page_floats();
    for (int l = 0; l < kLayout.num_layers; ++l) {
      for (size_t i = 0; i < floats; ++i) {
        src_.pool->k_cache(l)[i] = dist(rng);
        src_.pool->v_cache(l)[i] = dist(rng);
      }
    }
    baseline_ = src_.pool->free_pages();
    h_.thread()->RunSync([&] {
      publisher_ = std::make_unique<PublisherHandler>(src_.pool.get(), PublisherBackend(),
                                                      kModel, kChunk);
    });
    pub_client_ = h_.Connect(publisher_.get());
  }
  // The backend the publisher reads pages through (src_'s, or a wrapper).
  virtual Backend* PublisherBackend() { return src_.backend.get(); }
  void TearDown() override {
    h_.Disconnect(pub_client_);
    h_.thread()->RunSync([&] { publisher_.reset(); });
    held_.clear();
    EXPECT_EQ(src_.pool->free_pages(), baseline_) << "publisher leaked pages";
  }
  // Pages for a `tokens`-token prompt (their KV is the random fill above),
  // as ids; the handle stays in held_ until ReleasePages.
  std::vector<int32_t> Pages(int tokens) {
    held_.push_back(*src_.pool->Allocate((tokens + 15) / 16));
    return {held_.back().ids().begin(), held_.back().ids().end()};
  }
  void ReleasePages(const std::vector<int32_t>& pages) {
    for (auto it = held_.begin(); it != held_.end(); ++it) {
      if (std::vector<int32_t>(it->ids().begin(), it->ids().end()) == pages) {
        held_.erase(it);
        return;
      }
    }
    ADD_FAILURE() << "no such pages";
  }
  // A share of page `id` from the handle holding it.
  KvPages ShareOf(int32_t id) {
    for (const KvPages& h : held_) {
      for (int i = 0; i < h.size(); ++i) {
        if (h[i] == id) return *h.Share(i, 1);
      }
    }
    ADD_FAILURE() << "page " << id << " is not held";
    return KvPages();
  }
  // Hands chunk `group` of the prompt whose page table is `pages` over (a
  // share of its pages, as the engine hands the prefill's).
  void Ready(const std::string& digest, const std::vector<int32_t>& pages, int group) {
    const int per_chunk = kChunk / 16;
    const int end = std::min<int>(pages.size(), (group + 1) * per_chunk);
    KvPages chunk;
    for (int i = group * per_chunk; i < end; ++i) chunk.Append(ShareOf(pages[size_t(i)]));
    h_.thread()->RunSync(
        [&] { ASSERT_TRUE(publisher_->ChunkReady(digest, group, std::move(chunk)).ok()); });
  }
  // Checks that tokens [first, end) landed in `dst_pages` equal the source
  // tokens in `src_pages` after one trip through `format` (rotated: the
  // fp16 values' heads rotated, coded, rotated back and rounded to fp16).
  void ExpectLanded(KvCompression c, const std::vector<int32_t>& src_pages,
                    const std::vector<int32_t>& dst_pages, int first, int end,
                    int dst_first = 0) {
    const KvFormat format = c.format;
    TokenCodec codec(kLayout, format);
    std::vector<uint8_t> enc(codec.row_bytes());
    std::vector<float> want(kLayout.token_floats()), x(want.size());
    for (int t = first; t < end; ++t) {
      const int32_t s = SlotsOf(src_pages, 16, t, 1)[0];
      const int32_t d = SlotsOf(dst_pages, 16, t - dst_first, 1)[0];
      for (int l = 0; l < kLayout.num_layers; ++l) {
        for (bool v : {false, true}) {
          const float* src = (v ? src_.pool->v_cache(l) : src_.pool->k_cache(l)) +
                             size_t(s) * kLayout.token_floats();
          const float* got = (v ? dst_.pool->v_cache(l) : dst_.pool->k_cache(l)) +
                             size_t(d) * kLayout.token_floats();
          for (size_t i = 0; i < x.size(); ++i) {
            x[i] = c.rotated ? HalfToFloat(FloatToHalf(src[i])) : src[i];
          }
          if (c.rotated) RotateHeads(x.data(), int(x.size()), 32, /*inverse=*/false);
          EncodeKvRow(format, x.data(), 2, 32, codec.block(), enc.data());
          DecodeKvRow(format, enc.data(), 2, 32, codec.block(), want.data());
          if (c.rotated) {
            RotateHeads(want.data(), int(want.size()), 32, /*inverse=*/true);
            for (float& w : want) w = HalfToFloat(FloatToHalf(w));
          }
          for (size_t i = 0; i < want.size(); ++i) {
            ASSERT_EQ(got[i], want[i]) << TrackNameOf(c) << " token " << t;
          }
        }
      }
    }
  }

  // Checks that tokens [0, tokens) landed in `dst_pages` equal what the ac
  // codec makes of the source tokens, group by group, through fp16 both
  // ways (ac_pages.h).
  void ExpectLandedAc(const ac::AcPolicy& policy, const std::vector<int32_t>& src_pages,
                      const std::vector<int32_t>& dst_pages, int tokens) {
    const ac::AcShape shape{kLayout.num_layers, kLayout.num_kv_heads, kLayout.head_dim};
    const int n = shape.token_floats(), row = kLayout.token_floats();
    for (int g = 0; g * kChunk < tokens; ++g) {
      const int count = std::min(kChunk, tokens - g * kChunk);
      std::vector<float> kv = AcGroupInput(*src_.pool, src_pages, g * kChunk, count);
      std::vector<std::vector<uint8_t>> objects;
      ac::AcGroupEncoder(shape, policy).Encode(kv.data(), count, &objects,
                                               /*starts_sequence=*/g == 0);
      const std::vector<absl::Span<const uint8_t>> spans(objects.begin(), objects.end());
      ASSERT_TRUE(ac::AcGroupDecoder(shape).DecodeGroup(spans, kv.data()).ok());
      RoundToFp16(kv);
      for (int t = 0; t < count; ++t) {
        const int32_t d = SlotsOf(dst_pages, 16, g * kChunk + t, 1)[0];
        for (int l = 0; l < kLayout.num_layers; ++l) {
          for (bool v : {false, true}) {
            const float* got = (v ? dst_.pool->v_cache(l) : dst_.pool->k_cache(l)) + size_t(d) * row;
            const float* want = &kv[t * n + (2 * l + v) * row];
            for (int i = 0; i < row; ++i) {
              ASSERT_EQ(got[i], want[i]) << policy.track << " token " << g * kChunk + t;
            }
          }
        }
      }
    }
  }

  // A subscription (or fetch) landing groups [first, end) of a `tokens`
  // sequence into fresh pages of dst_.
  struct Landing {
    std::shared_ptr<KvLander> lander;
    std::vector<int32_t> pages;  // the ids of the pages it lands into
    bool done = false;
    absl::StatusOr<KvPages> result = absl::UnknownError("pending");
    absl::Status reply;
  };
  std::unique_ptr<Landing> Subscribe(moqt::MoqtSession* session, const moqt::FullTrackName& track,
                                     int tokens, int first, int end, bool fetch = false,
                                     Memory* into = nullptr) {
    Memory* mem = into ? into : &dst_;
    auto landing = std::make_unique<Landing>();
    Landing* l = landing.get();
    h_.thread()->RunSync([&] {
      const int n = std::min(end * kChunk, tokens) - first * kChunk;
      KvPages fresh = *mem->pool->Allocate((n + 15) / 16);
      l->pages.assign(fresh.ids().begin(), fresh.ids().end());
      LandingSpec spec{kChunk, tokens, first, end, std::move(fresh)};
      spec.xl = landing_xl_;
      spec.ac_thread = landing_ac_thread_;
      auto lander = KvLander::Create(mem->pool.get(), mem->backend.get(), kModel, track,
                                     std::move(spec),
                                     [l](auto r) {
                                       l->done = true;
                                       l->result = std::move(r);
                                     });
      ASSERT_TRUE(lander.ok()) << lander.status();
      l->lander = *lander;
      auto on_reply = [l](absl::StatusOr<moqt::TrackInfo> r) { l->reply = r.status(); };
      if (fetch) {
        moqt::Fetch f;
        f.track = track;
        f.start = {uint64_t(first), 0};
        f.end = {uint64_t(end - 1), 0};
        ASSERT_TRUE(session->Fetch(f, l->lander, on_reply).ok());
      } else {
        moqt::Subscribe s;
        s.track = track;
        s.filter_type = moqt::FilterType::kAbsoluteRange;
        s.start = moqt::Location{uint64_t(first), 0};
        s.end_group = end - 1;
        ASSERT_TRUE(session->Subscribe(s, l->lander, on_reply).ok());
      }
    });
    return landing;
  }
  bool WaitDone(Landing& l) {
    return WaitOnLoop(h_.thread(), [&] { return l.done; }, absl::Seconds(20));
  }
  void ReleaseLanded(Landing& l) {
    h_.thread()->RunSync([&] { l.result = absl::CancelledError("released"); });
  }

  // Subscriptions wait briefly for the publisher's PUBLISH_NAMESPACE.
  static moqt::RelayOptions RelayWithWait() {
    moqt::RelayOptions options;
    options.subscribe_wait = absl::Seconds(5);
    return options;
  }
  // The xl tracks' codec the landings get (LandingSpec::xl), on the
  // harness's loop; null: none.
  XlPageCodec* landing_xl_ = nullptr;
  AcCodecThread* landing_ac_thread_ = nullptr;  // LandingSpec::ac_thread
  // Destroyed after the harness, which closes the sessions using them.
  Memory src_, dst_;
  ClientHandler decode_;
  RelayHarness h_{RelayWithWait()};
  int baseline_ = 0;
  std::vector<KvPages> held_;  // Pages()' handles (of src_'s pool)
  std::unique_ptr<PublisherHandler> publisher_;
  moqt::MoqtClient* pub_client_ = nullptr;
};

TEST_F(KvOverMoqt, LiveChunksInAnyOrderLandForEveryCompression) {
  const int tokens = 80;  // groups 0, 1 of 32 tokens, group 2 of 16
  const auto pages = Pages(tokens);
  h_.thread()->RunSync([&] { ASSERT_TRUE(publisher_->BeginPrompt(Digest(1), tokens).ok()); });
  Ready(Digest(1), pages, 0);  // before anyone subscribes
  moqt::MoqtClient* client = h_.Connect(&decode_);
  std::vector<std::unique_ptr<Landing>> landings;
  std::vector<KvCompression> fixed(std::begin(kAllKvFormats), std::end(kAllKvFormats));
  fixed.push_back(KvCompression(KvFormat::kFp4E2M1, /*rotated=*/true));
  fixed.push_back(KvCompression(KvFormat::kInt4, /*rotated=*/true));
  for (const KvCompression& c : fixed) {
    landings.push_back(Subscribe(client->session(),
                                 FullTrackNameOf({ModelId(kModel), Digest(1), c}), tokens, 0, 3));
  }
  const ac::AcPolicy* const kAc[] = {&ac::AcHigh(), &ac::AcLow()};
  for (const ac::AcPolicy* p : kAc) {
    landings.push_back(Subscribe(client->session(),
                                 FullTrackNameOf({ModelId(kModel), Digest(1), KvCompression(p)}),
                                 tokens, 0, 3));
  }
  Ready(Digest(1), pages, 2);  // out of order
  Ready(Digest(1), pages, 1);
  h_.thread()->RunSync([&] { ASSERT_TRUE(publisher_->EndPrompt(Digest(1), absl::OkStatus()).ok()); });
  int i = 0;
  for (const KvCompression& c : fixed) {
    Landing& l = *landings[i++];
    ASSERT_TRUE(WaitDone(l)) << TrackNameOf(c);
    ASSERT_TRUE(l.result.ok()) << TrackNameOf(c) << ": " << l.result.status();
    ExpectLanded(c, pages, l.pages, 0, tokens);
    ReleaseLanded(l);
  }
  for (const ac::AcPolicy* p : kAc) {
    Landing& l = *landings[i++];
    ASSERT_TRUE(WaitDone(l)) << p->track;
    ASSERT_TRUE(l.result.ok()) << p->track << ": " << l.result.status();
    ExpectLandedAc(*p, pages, l.pages, tokens);
    ReleaseLanded(l);
  }
  h_.thread()->RunSync([&] {
    // Pieces of a quarter chunk: 4 + 4 + 2 for each of 8 fixed-size tracks;
    // the ac tracks encode each of the 3 groups once for all its pieces.
    EXPECT_EQ(publisher_->stats().encodes, 8u * 10 + 2 * 3);
    publisher_->DropPrompt(Digest(1));
  });
  ReleasePages(pages);
  EXPECT_EQ(dst_.pool->free_pages(), dst_.pool->num_pages());
}

// The xl tracks cross with the worker's KV basis at both ends: what lands
// is what XlPageCodec makes of each source group (RoPE off at the group's
// positions, coded, decoded, RoPE back), coded and decoded on the loops or
// on AcCodecThreads alike; a publisher without a basis refuses the track,
// a landing without one cannot start.
TEST_F(KvOverMoqt, XlGroupsLandWithTheWorkersBasis) {
  const int tokens = 80;
  const auto pages = Pages(tokens);
  std::vector<float> inv_freq(kLayout.head_dim / 2);
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    inv_freq[i] = float(std::pow(10000.0, -2.0 * double(i) / kLayout.head_dim));
  }
  // A basis fitted on the source pool's KV (random: every component kept
  // at these steps, so the round trip is lossy but close).
  XlPageCodec reader(kLayout, inv_freq, nullptr);
  std::vector<float> kv;
  std::vector<int32_t> all_slots(64 * 16);
  for (size_t i = 0; i < all_slots.size(); ++i) all_slots[i] = int32_t(i);
  ASSERT_TRUE(reader.GatherPreRope(src_.backend.get(), *src_.pool, all_slots, 0, &kv).ok());
  xl::KvBasisFitter fitter({kLayout.num_layers, kLayout.num_kv_heads, kLayout.head_dim}, 2);
  fitter.Add(kv.data(), int(all_slots.size()));
  auto fitted = fitter.Fit();
  ASSERT_TRUE(fitted.ok()) << fitted.status();
  const auto basis = std::make_shared<const xl::KvBasis>(*std::move(fitted));

  // A prompt per round (the relay would serve a second round from its cache).
  const auto publish = [&](const std::string& digest) {
    h_.thread()->RunSync([&] { ASSERT_TRUE(publisher_->BeginPrompt(digest, tokens).ok()); });
    for (int g = 0; g < 3; ++g) Ready(digest, pages, g);
    h_.thread()->RunSync([&] { ASSERT_TRUE(publisher_->EndPrompt(digest, absl::OkStatus()).ok()); });
  };
  publish(Digest(1));
  moqt::MoqtClient* client = h_.Connect(&decode_);
  const auto name = [&](const xl::XlPoint& p, int prompt = 1) {
    return FullTrackNameOf({ModelId(kModel), Digest(prompt), KvCompression(&p)});
  };
  XlPageCodec landing_codec(kLayout, inv_freq, basis);
  landing_xl_ = &landing_codec;
  // No basis at the publisher: refused, naming why.
  auto refused = Subscribe(client->session(), name(xl::XlHigh()), tokens, 0, 3);
  ASSERT_TRUE(WaitOnLoop(h_.thread(), [&] { return !refused->reply.ok() || refused->done; }));
  EXPECT_NE(refused->reply.message().find("needs a KV basis"), std::string::npos)
      << refused->reply;
  ReleaseLanded(*refused);

  h_.thread()->RunSync([&] {
    ASSERT_TRUE(publisher_->SetKvBasis(basis, inv_freq).ok());
    EXPECT_EQ(publisher_->SetKvBasis(basis, inv_freq).code(),
              absl::StatusCode::kFailedPrecondition);
  });
  std::unique_ptr<AcCodecThread> landing_thread;
  for (bool background : {false, true}) {
    if (background) {
      h_.thread()->RunSync([&] {
        publisher_->CodeAcInBackground(h_.loop());  // takes the basis set before
        landing_thread = std::make_unique<AcCodecThread>(kLayout, h_.loop());
        landing_thread->SetKvBasis(basis, inv_freq);
      });
      landing_ac_thread_ = landing_thread.get();
      publish(Digest(2));
    }
    for (const xl::XlPoint* p : {&xl::XlHigh(), &xl::XlLow()}) {
      auto l = Subscribe(client->session(), name(*p, background ? 2 : 1), tokens, 0, 3);
      ASSERT_TRUE(WaitDone(*l)) << p->track;
      ASSERT_TRUE(l->result.ok()) << p->track << ": " << l->result.status();
      // What the codec makes of each group, decoded into pages of a third pool.
      Memory want;
      KvPages want_pages = *want.pool->Allocate((tokens + 15) / 16);
      XlPageCodec codec(kLayout, inv_freq, basis);
      double err = 0, energy = 0;
      for (int g = 0; g * kChunk < tokens; ++g) {
        const int n = std::min(kChunk, tokens - g * kChunk);
        std::vector<std::vector<uint8_t>> objects;
        ASSERT_TRUE(codec.Encode(*p, src_.backend.get(), *src_.pool,
                                 SlotsOf(pages, 16, g * kChunk, n), g * kChunk, &objects)
                        .ok());
        const std::vector<absl::Span<const uint8_t>> spans(objects.begin(), objects.end());
        ASSERT_TRUE(codec.Decode(want.backend.get(), spans,
                                 SlotsOf(want_pages.ids(), 16, g * kChunk, n), g * kChunk,
                                 want.pool.get()).ok());
      }
      for (int t = 0; t < tokens; ++t) {
        const int32_t s = SlotsOf(pages, 16, t, 1)[0];
        const int32_t d = SlotsOf(l->pages, 16, t, 1)[0];
        const int32_t w = SlotsOf(want_pages.ids(), 16, t, 1)[0];
        for (int layer = 0; layer < kLayout.num_layers; ++layer) {
          for (bool v : {false, true}) {
            const size_t row = kLayout.token_floats();
            auto at = [&](Memory& m, int32_t slot) {
              return (v ? m.pool->v_cache(layer) : m.pool->k_cache(layer)) + size_t(slot) * row;
            };
            for (size_t i = 0; i < row; ++i) {
              ASSERT_EQ(at(dst_, d)[i], at(want, w)[i]) << p->track << " token " << t;
              err += std::pow(at(dst_, d)[i] - at(src_, s)[i], 2);
              energy += std::pow(at(src_, s)[i], 2);
            }
          }
        }
      }
      EXPECT_LT(err, 0.2 * energy) << p->track;  // close: the landed KV is the source's, coded
      EXPECT_GT(err, 1e-6 * energy) << p->track;  // and coded, not copied
      ReleaseLanded(*l);
    }
  }
  h_.thread()->RunSync([&] {
    // 3 groups x 2 tracks on the loop, then the same on the thread.
    EXPECT_EQ(publisher_->stats().encodes_ahead, 6u);
    EXPECT_EQ(publisher_->stats().encodes, 12u);
    landing_thread.reset();
  });
  landing_ac_thread_ = nullptr;
  landing_xl_ = nullptr;
  // A landing without a basis cannot start.
  h_.thread()->RunSync([&] {
    KvPages fresh = *dst_.pool->Allocate(5);
    auto lander = KvLander::Create(dst_.pool.get(), dst_.backend.get(), kModel, name(xl::XlHigh()),
                                   LandingSpec{kChunk, tokens, 0, 3, std::move(fresh)},
                                   [](auto) {});
    EXPECT_EQ(lander.status().code(), absl::StatusCode::kFailedPrecondition) << lander.status();
    publisher_->DropPrompt(Digest(1));
    publisher_->DropPrompt(Digest(2));
  });
  ReleasePages(pages);
  EXPECT_EQ(dst_.pool->free_pages(), dst_.pool->num_pages());
}

// With CodeAcInBackground the ac groups are coded on the publisher's own
// thread, each exactly once per track although two requests of each track
// (a subscription, a fetch of part of it) take them piece by piece; the
// objects are the same as the loop thread's. Through the relay the fetch's
// copy of a group often arrives before the subscription's: the relay must
// still give the subscriber every object (it once dropped the second copy
// as a duplicate, and the subscription lost those groups).
TEST_F(KvOverMoqt, AcGroupsCodedInTheBackgroundLandTheSame) {
  const int tokens = 5 * kChunk - 7;
  const auto pages = Pages(tokens);
  h_.thread()->RunSync([&] {
    publisher_->CodeAcInBackground(h_.loop());
    ASSERT_TRUE(publisher_->BeginPrompt(Digest(3), tokens).ok());
  });
  for (int g = 0; g < 5; ++g) Ready(Digest(3), pages, g);
  h_.thread()->RunSync([&] { ASSERT_TRUE(publisher_->EndPrompt(Digest(3), absl::OkStatus()).ok()); });
  moqt::MoqtClient* client = h_.Connect(&decode_);
  const ac::AcPolicy* const kAc[] = {&ac::AcHigh(), &ac::AcLow()};
  std::vector<std::unique_ptr<Landing>> landings;
  for (const ac::AcPolicy* p : kAc) {
    const auto track = FullTrackNameOf({ModelId(kModel), Digest(3), KvCompression(p)});
    landings.push_back(Subscribe(client->session(), track, tokens, 0, 5));
    landings.push_back(Subscribe(client->session(), track, tokens, 1, 3, /*fetch=*/true));
  }
  for (size_t i = 0; i < landings.size(); ++i) {
    Landing& l = *landings[i];
    ASSERT_TRUE(WaitDone(l)) << i;
    ASSERT_TRUE(l.result.ok()) << i << ": " << l.result.status();
    if (i % 2 == 0) ExpectLandedAc(*kAc[i / 2], pages, l.pages, tokens);
    ReleaseLanded(l);
  }
  h_.thread()->RunSync([&] {
    EXPECT_EQ(publisher_->stats().encodes_ahead, publisher_->stats().encodes);
    EXPECT_GE(publisher_->stats().encodes, 2u * 5);
    EXPECT_LE(publisher_->stats().encodes, 2u * 5 + 2);  // the fetch may miss the cache once
    publisher_->DropPrompt(Digest(3));
  });
  ReleasePages(pages);
}

// A publisher given the model's ac tuning codes the ac tracks at the
// tuned levels and K channel weights (a decoder reads them as any group); a
// tuning of another shape is refused.
TEST_F(KvOverMoqt, AcTuningSetsTheLevelsOfTheAcTracks) {
  const int tokens = 2 * kChunk;
  const auto pages = Pages(tokens);
  ac::AcLayerTuning tuning{std::vector<float>(kLayout.num_layers, 0.25f),
                           std::vector<float>(kLayout.num_layers, 0.5f)};
  tuning.kv_heads = kLayout.num_kv_heads;
  tuning.head_dim = kLayout.head_dim;
  for (int i = 0; i < kLayout.num_layers * kLayout.num_kv_heads * kLayout.head_dim; ++i) {
    tuning.k_channel.push_back(i % 3 == 0 ? 4.f : 0.5f);
  }
  ac::AcLayerTuning other_heads = tuning;
  other_heads.kv_heads += 1;
  h_.thread()->RunSync([&] {
    EXPECT_EQ(publisher_->SetAcTuning({{1.f}, {1.f}}).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(publisher_->SetAcTuning(other_heads).code(), absl::StatusCode::kInvalidArgument);
    ASSERT_TRUE(publisher_->SetAcTuning(tuning).ok());
    ASSERT_TRUE(publisher_->BeginPrompt(Digest(4), tokens).ok());
  });
  for (int g = 0; g < 2; ++g) Ready(Digest(4), pages, g);
  h_.thread()->RunSync([&] { ASSERT_TRUE(publisher_->EndPrompt(Digest(4), absl::OkStatus()).ok()); });
  moqt::MoqtClient* client = h_.Connect(&decode_);
  // ac takes the levels; ac-lo the levels and the channel weights.
  for (const ac::AcPolicy* p : {&ac::AcHigh(), &ac::AcLow()}) {
    const auto track = FullTrackNameOf({ModelId(kModel), Digest(4), KvCompression(p)});
    auto landing = Subscribe(client->session(), track, tokens, 0, 2);
    ASSERT_TRUE(WaitDone(*landing));
    ASSERT_TRUE(landing->result.ok()) << landing->result.status();
    const ac::AcPolicy tuned = ac::Tuned(*p, tuning);
    ExpectLandedAc(p == &ac::AcLow() ? ac::WithChannelWeights(tuned, tuning) : tuned, pages,
                   landing->pages, tokens);
    ReleaseLanded(*landing);
  }
  h_.thread()->RunSync([&] { publisher_->DropPrompt(Digest(4)); });
  ReleasePages(pages);
}

TEST_F(KvOverMoqt, RelayServesADroppedPromptFromItsCache) {
  const int tokens = 64;
  const auto pages = Pages(tokens);
  h_.thread()->RunSync([&] { ASSERT_TRUE(publisher_->BeginPrompt(Digest(2), tokens).ok()); });
  Ready(Digest(2), pages, 0);
  Ready(Digest(2), pages, 1);
  h_.thread()->RunSync([&] { ASSERT_TRUE(publisher_->EndPrompt(Digest(2), absl::OkStatus()).ok()); });
  const auto track = FullTrackNameOf({ModelId(kModel), Digest(2), KvFormat::kInt8});
  moqt::MoqtClient* client = h_.Connect(&decode_);
  auto first = Subscribe(client->session(), track, tokens, 0, 2);
  ASSERT_TRUE(WaitDone(*first));
  ASSERT_TRUE(first->result.ok()) << first->result.status();
  h_.thread()->RunSync([&] { publisher_->DropPrompt(Digest(2)); });
  ReleasePages(pages);

  uint64_t cached_before = 0;
  h_.thread()->RunSync([&] { cached_before = h_.relay()->stats().served_from_cache; });
  auto again = Subscribe(client->session(), track, tokens, 0, 2);
  ASSERT_TRUE(WaitDone(*again));
  ASSERT_TRUE(again->result.ok()) << again->result.status();
  h_.thread()->RunSync([&] { EXPECT_GT(h_.relay()->stats().served_from_cache, cached_before); });
  // Same bytes as the first landing, with the publisher's pages gone.
  for (int l = 0; l < kLayout.num_layers; ++l) {
    for (int t = 0; t < tokens; ++t) {
      const float* a = dst_.pool->k_cache(l) + size_t(SlotsOf(first->pages, 16, t, 1)[0]) * 64;
      const float* b = dst_.pool->k_cache(l) + size_t(SlotsOf(again->pages, 16, t, 1)[0]) * 64;
      ASSERT_EQ(std::vector<float>(a, a + 64), std::vector<float>(b, b + 64));
    }
  }
  ReleaseLanded(*first);
  ReleaseLanded(*again);
}

TEST_F(KvOverMoqt, PrefixReuseFetchesAnotherPromptsGroupsAndSubscribesTheRest) {
  // Prompt A (64 tokens) is published; prompt B (100 tokens) shares A's two
  // chunks, and its prefill computed only chunks 2 and 3.
  const auto a_pages = Pages(64);
  const auto b_tail = Pages(100 - 64);
  h_.thread()->RunSync([&] {
    ASSERT_TRUE(publisher_->BeginPrompt(Digest(3), 64).ok());
    ASSERT_TRUE(publisher_->BeginPrompt(Digest(4), 100).ok());
  });
  Ready(Digest(3), a_pages, 0);
  Ready(Digest(3), a_pages, 1);
  std::vector<int32_t> b_pages = a_pages;
  b_pages.insert(b_pages.end(), b_tail.begin(), b_tail.end());
  for (int g = 0; g < 4; ++g) Ready(Digest(4), b_pages, g);

  moqt::MoqtClient* client = h_.Connect(&decode_);
  auto prefix = Subscribe(client->session(),
                          FullTrackNameOf({ModelId(kModel), Digest(3), KvFormat::kBf16}), 100,
                          0, 2, /*fetch=*/true);
  auto rest = Subscribe(client->session(),
                        FullTrackNameOf({ModelId(kModel), Digest(4), KvFormat::kBf16}), 100, 2,
                        4);
  ASSERT_TRUE(WaitDone(*prefix));
  ASSERT_TRUE(prefix->result.ok()) << prefix->result.status();
  ASSERT_TRUE(WaitDone(*rest));
  ASSERT_TRUE(rest->result.ok()) << rest->result.status();
  ExpectLanded(KvFormat::kBf16, b_pages, prefix->pages, 0, 64);
  ExpectLanded(KvFormat::kBf16, b_pages, rest->pages, 64, 100, /*dst_first=*/64);
  ReleaseLanded(*prefix);
  ReleaseLanded(*rest);
  h_.thread()->RunSync([&] {
    publisher_->DropPrompt(Digest(3));
    publisher_->DropPrompt(Digest(4));
  });
  ReleasePages(a_pages);
  ReleasePages(b_tail);
}

TEST_F(KvOverMoqt, RequestsThePublisherCannotServeAreRefusedWithTheirReason) {
  // Directly to the publisher (no relay): the prefill worker's own endpoint.
  std::unique_ptr<moqt::MoqtServer> server;
  h_.thread()->RunSync([&] {
    quic::TlsOptions tls;
    tls.cert_file = h_.certs().server_cert;
    tls.key_file = h_.certs().server_key;
    server = *moqt::MoqtServer::Create(h_.loop(), "127.0.0.1", 0, tls, quic::TransportOptions{},
                                       moqt::SessionOptions{}, publisher_.get());
    ASSERT_TRUE(publisher_->BeginPrompt(Digest(5), 40).ok());
  });
  const auto pages = Pages(40);
  Ready(Digest(5), pages, 0);
  std::unique_ptr<moqt::MoqtClient> client;
  h_.thread()->RunSync([&] {
    quic::TlsOptions tls;
    tls.ca_file = h_.certs().ca_cert;
    tls.server_name = "localhost";
    client = *moqt::MoqtClient::Connect(h_.loop(), "127.0.0.1", server->port(), tls,
                                        quic::TransportOptions{}, moqt::SessionOptions{}, &decode_);
  });
  ASSERT_TRUE(WaitOnLoop(h_.thread(), [&] { return decode_.ready; }));

  struct Case {
    moqt::FullTrackName track;
    bool fetch;
    uint64_t end_group;
    const char* message;
  };
  const Case cases[] = {
      {{NamespaceOf(ModelId(kModel), Digest(5)), "zstd"}, false, 0, "unknown KV compression"},
      {FullTrackNameOf({ModelId(Hash128{1, 1}), Digest(5), KvFormat::kFp16}), false, 0,
       "is not served here"},
      {FullTrackNameOf({ModelId(kModel), Digest(6), KvFormat::kFp16}), false, 0,
       "no KV published for prompt"},
      {FullTrackNameOf({ModelId(kModel), Digest(5), KvFormat::kFp16}), true, 2,
       "past the prompt's 2 chunks"},
      {FullTrackNameOf({ModelId(kModel), Digest(5), KvFormat::kFp16}), true, 1,
       "chunk 1 is not computed yet"},
  };
  for (const Case& c : cases) {
    bool replied = false;
    absl::Status reply;
    h_.thread()->RunSync([&] {
      auto sink = std::make_shared<moqt::testing::CollectingConsumer>();
      auto on_reply = [&](absl::StatusOr<moqt::TrackInfo> r) {
        replied = true;
        reply = r.status();
      };
      if (c.fetch) {
        moqt::Fetch f;
        f.track = c.track;
        f.end = {c.end_group, 0};
        ASSERT_TRUE(client->session()->Fetch(f, sink, on_reply).ok());
      } else {
        moqt::Subscribe s;
        s.track = c.track;
        ASSERT_TRUE(client->session()->Subscribe(s, sink, on_reply).ok());
      }
    });
    ASSERT_TRUE(WaitOnLoop(h_.thread(), [&] { return replied; })) << c.message;
    EXPECT_FALSE(reply.ok()) << c.message;
    EXPECT_NE(reply.message().find(c.message), std::string::npos) << reply;
  }

  // The prompt fails after its first chunk: a FETCH of both gets the one
  // computed (FETCH_OK ending there), a FETCH of the other names the failure.
  h_.thread()->RunSync([&] {
    ASSERT_TRUE(
        publisher_->EndPrompt(Digest(5), absl::UnavailableError("prefill worker lost")).ok());
  });
  for (uint64_t start : {uint64_t{0}, uint64_t{1}}) {
    auto sink = std::make_shared<moqt::testing::CollectingConsumer>();
    absl::StatusOr<moqt::TrackInfo> reply = absl::UnknownError("pending");
    bool replied = false;
    h_.thread()->RunSync([&] {
      moqt::Fetch f;
      f.track = FullTrackNameOf({ModelId(kModel), Digest(5), KvFormat::kFp16});
      f.start = {start, 0};
      f.end = {1, 0};
      ASSERT_TRUE(client->session()
                      ->Fetch(f, sink,
                              [&](absl::StatusOr<moqt::TrackInfo> r) {
                                replied = true;
                                reply = std::move(r);
                              })
                      .ok());
    });
    ASSERT_TRUE(WaitOnLoop(h_.thread(), [&] { return replied && (!reply.ok() || sink->done); }));
    if (start == 1) {
      EXPECT_FALSE(reply.ok());
      EXPECT_NE(reply.status().message().find("chunk 1 was never computed: the prompt failed"),
                std::string::npos)
          << reply.status();
      continue;
    }
    ASSERT_TRUE(reply.ok()) << reply.status();
    EXPECT_EQ(reply->largest->group, 0u) << "the range ends at the last chunk computed";
    EXPECT_TRUE(reply->end_of_track);
    h_.thread()->RunSync([&] {
      EXPECT_TRUE(sink->done_status.ok()) << sink->done_status;
      EXPECT_EQ(sink->objects.size(), 32u) << "chunk 0's tokens";
      for (const auto& [loc, payload] : sink->objects) EXPECT_EQ(loc.first, 0u);
    });
  }

  // A decoder whose model has another KV shape refuses the objects by size
  // and gets its pages back.
  Memory other(KvLayout{2, 2, 16, 16});
  const int free_before = other.pool->free_pages();
  moqt::FullTrackName track = FullTrackNameOf({ModelId(kModel), Digest(5), KvFormat::kFp16});
  auto wrong = Subscribe(client->session(), track, 40, 0, 1, false, &other);
  ASSERT_TRUE(WaitDone(*wrong));
  EXPECT_EQ(wrong->result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(wrong->result.status().message().find("has 512 bytes; fp16 tokens of this model have 256"),
            std::string::npos)
      << wrong->result.status();
  EXPECT_EQ(other.pool->free_pages(), free_before);

  h_.thread()->RunSync([&] {
    wrong->lander.reset();
    client.reset();
    server.reset();
    publisher_->DropPrompt(Digest(5));
  });
  ReleasePages(pages);
}

}  // namespace
// Directly to the publisher, a SUBSCRIBE that beats BeginPrompt (the decode
// worker's call racing the prefill's) waits for the prompt with
// SetSubscribeWait, and gets every chunk; one whose prompt never begins is
// refused when the wait ends.
TEST_F(KvOverMoqt, DirectSubscribeBeforeThePromptBeginsWaitsForIt) {
  std::unique_ptr<moqt::MoqtServer> server;
  std::unique_ptr<moqt::MoqtClient> client;
  h_.thread()->RunSync([&] {
    publisher_->SetSubscribeWait(h_.loop(), absl::Milliseconds(500));
    quic::TlsOptions tls;
    tls.cert_file = h_.certs().server_cert;
    tls.key_file = h_.certs().server_key;
    server = *moqt::MoqtServer::Create(h_.loop(), "127.0.0.1", 0, tls, quic::TransportOptions{},
                                       moqt::SessionOptions{}, publisher_.get());
    quic::TlsOptions ctls;
    ctls.ca_file = h_.certs().ca_cert;
    ctls.server_name = "localhost";
    client = *moqt::MoqtClient::Connect(h_.loop(), "127.0.0.1", server->port(), ctls,
                                        quic::TransportOptions{}, moqt::SessionOptions{}, &decode_);
  });
  ASSERT_TRUE(WaitOnLoop(h_.thread(), [&] { return decode_.ready; }));
  const auto track = FullTrackNameOf({ModelId(kModel), Digest(7), KvFormat::kFp16});
  auto early = Subscribe(client->session(), track, 50, 0, 2);  // 2 chunks of 32
  auto never = Subscribe(client->session(),
                         FullTrackNameOf({ModelId(kModel), Digest(8), KvFormat::kFp16}), 40, 0, 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  h_.thread()->RunSync([&] { ASSERT_TRUE(publisher_->BeginPrompt(Digest(7), 50).ok()); });
  const auto pages = Pages(50);
  Ready(Digest(7), pages, 0);
  Ready(Digest(7), pages, 1);
  ASSERT_TRUE(WaitDone(*early));
  ASSERT_TRUE(early->result.ok()) << early->result.status();
  ExpectLanded(KvFormat::kFp16, pages, early->pages, 0, 50);
  ASSERT_TRUE(WaitDone(*never));
  EXPECT_NE(never->result.status().message().find("within"), std::string::npos)
      << never->result.status();
  ReleaseLanded(*early);
  h_.thread()->RunSync([&] {
    early->lander.reset();
    never->lander.reset();
    client.reset();
    server.reset();
    publisher_->DropPrompt(Digest(7));
  });
  ReleasePages(pages);
}

// A subscriber that stops reading (its loop thread busy for 400 ms, so it
// neither takes data nor acknowledges) while a whole prompt becomes ready:
// the publisher queues about a send window for it, not the prompt, and
// everything arrives once it reads again.
TEST_F(KvOverMoqt, ASlowSubscriberHoldsAWindowNotItsBacklog) {
  constexpr int kTokens = 1024;  // 32 chunks, 512 KiB of fp16
  constexpr size_t kWindow = 16 << 10;
  h_.thread()->RunSync([&] { publisher_->SetSendWindow(kWindow); });
  const auto track = FullTrackNameOf({ModelId(kModel), Digest(9), KvFormat::kFp16});
  h_.thread()->RunSync([&] { ASSERT_TRUE(publisher_->BeginPrompt(Digest(9), kTokens).ok()); });
  Direct direct(h_, publisher_.get());
  auto consumer = direct.SubscribeAndStall(track);
  const auto pages = Pages(kTokens);
  for (int g = 0; g < kTokens / kChunk; ++g) Ready(Digest(9), pages, g);
  h_.thread()->RunSync([&] { ASSERT_TRUE(publisher_->EndPrompt(Digest(9), absl::OkStatus()).ok()); });
  ASSERT_TRUE(direct.WaitDone(*consumer));
  const size_t token_bytes = TokenCodec(kLayout, KvFormat::kFp16).token_bytes();
  direct.thread->RunSync([&] {
    EXPECT_TRUE(consumer->done_status.ok()) << consumer->done_status;
    ASSERT_EQ(consumer->objects.size(), size_t(kTokens));
    for (const auto& [loc, payload] : consumer->objects) ASSERT_EQ(payload.size(), token_bytes);
  });
  h_.thread()->RunSync([&] {
    const KvPublisher::Stats& st = publisher_->stats();
    EXPECT_GT(st.paced_waits, 0u) << "the subscriber never fell behind";
    // A window plus one piece (a quarter chunk) and object headers.
    EXPECT_LE(st.max_queued_bytes, kWindow + (kChunk / 4) * (token_bytes + 16))
        << "of " << kTokens * token_bytes << " bytes";
    EXPECT_EQ(st.objects_sent, uint64_t(kTokens));
    publisher_->DropPrompt(Digest(9));
  });
  direct.Close();
  ReleasePages(pages);
}

// The ac tracks' objects go to the streams from the publisher's cache of
// coded groups (it keeps the last 3), shared, not copied. With the
// subscriber stalled, groups 0-2 leave that cache while its streams still
// hold their objects: those must still arrive byte for byte (the objects
// are the ac codec's own encoding of the fp16 KV).
TEST_F(KvOverMoqt, AcObjectsOutliveTheirGroupInThePublishersCache) {
  const KvLayout layout{32, 4, 64, 16};  // ac objects of several KiB: sent shared
  constexpr int kGroups = 6, kTokens = kGroups * kChunk;
  Memory mem(layout);
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.f, 1.f);
  for (int l = 0; l < layout.num_layers; ++l) {
    for (size_t i = 0; i < 64 * layout.page_floats(); ++i) {
      mem.pool->k_cache(l)[i] = dist(rng);
      mem.pool->v_cache(l)[i] = dist(rng);
    }
  }
  KvPages pages = *mem.pool->Allocate(kTokens / 16);
  std::unique_ptr<PublisherHandler> publisher;
  h_.thread()->RunSync([&] {
    publisher = std::make_unique<PublisherHandler>(mem.pool.get(), mem.backend.get(), kModel, kChunk);
    ASSERT_TRUE(publisher->BeginPrompt(Digest(0), kTokens).ok());
  });
  Direct direct(h_, publisher.get());
  const ac::AcPolicy& policy = ac::AcHigh();
  auto consumer =
      direct.SubscribeAndStall(FullTrackNameOf({ModelId(kModel), Digest(0), KvCompression(&policy)}));
  h_.thread()->RunSync([&] {
    for (int g = 0; g < kGroups; ++g) {
      ASSERT_TRUE(publisher->ChunkReady(Digest(0), g, *pages.Share(2 * g, 2)).ok());
    }
    ASSERT_TRUE(publisher->EndPrompt(Digest(0), absl::OkStatus()).ok());
  });
  ASSERT_TRUE(direct.WaitDone(*consumer));

  const ac::AcShape shape{layout.num_layers, layout.num_kv_heads, layout.head_dim};
  direct.thread->RunSync([&] {
    ASSERT_TRUE(consumer->done_status.ok()) << consumer->done_status;
    ASSERT_EQ(consumer->objects.size(), size_t(kTokens));
  });
  for (int g = 0; g < kGroups; ++g) {
    const std::vector<float> kv = AcGroupInput(*mem.pool, pages.ids(), g * kChunk, kChunk);
    std::vector<std::vector<uint8_t>> want;
    ac::AcGroupEncoder(shape, policy).Encode(kv.data(), kChunk, &want, /*starts_sequence=*/g == 0);
    for (int t = 0; t < kChunk; ++t) {
      ASSERT_GT(want[t].size(), 4096u) << "small objects are copied, not shared";
      const std::string& got = consumer->objects.at({uint64_t(g), uint64_t(t)});
      ASSERT_EQ(got, std::string(want[t].begin(), want[t].end())) << "group " << g << " token " << t;
    }
  }
  h_.thread()->RunSync([&] {
    EXPECT_EQ(publisher->stats().encodes, uint64_t(kGroups));  // each group once, then evicted
    publisher->DropPrompt(Digest(0));
  });
  direct.Close();
  h_.thread()->RunSync([&] { publisher.reset(); });
  pages.Reset();
}

namespace {

// A backend whose KV reads fail, as a device's copy would (a CUDA error).
class EncodeFailingBackend : public ProfilingBackend {
 public:
  using ProfilingBackend::ProfilingBackend;
  absl::Status EncodeKv(KvFormat, int, const KvArrays&, const int32_t*, int, uint8_t*,
                        size_t) override {
    return absl::InternalError("cuda backend: EncodeKv: an illegal copy");
  }
};

class KvOverMoqtFailingEncode : public KvOverMoqt {
 protected:
  Backend* PublisherBackend() override {
    failing_ = std::make_unique<EncodeFailingBackend>(src_.backend.get());
    return failing_.get();
  }
  std::unique_ptr<EncodeFailingBackend> failing_;
};

// The publisher cannot read a group's pages: that group's requests are told
// so at once (the decode worker computes the rest), for fixed-size and ac
// tracks alike, instead of the failure surfacing at a later step.
TEST_F(KvOverMoqtFailingEncode, AGroupTheBackendCannotReadEndsItsRequestsWithTheError) {
  const int tokens = 80;
  const auto pages = Pages(tokens);
  h_.thread()->RunSync([&] { ASSERT_TRUE(publisher_->BeginPrompt(Digest(1), tokens).ok()); });
  Ready(Digest(1), pages, 0);
  moqt::MoqtClient* client = h_.Connect(&decode_);
  std::vector<std::unique_ptr<Landing>> landings;
  for (KvCompression c : {KvCompression(KvFormat::kFp16), KvCompression(KvFormat::kInt8),
                          KvCompression(&ac::AcHigh())}) {
    landings.push_back(Subscribe(client->session(),
                                 FullTrackNameOf({ModelId(kModel), Digest(1), c}), tokens, 0, 3));
  }
  for (auto& l : landings) {
    ASSERT_TRUE(WaitDone(*l));
    EXPECT_FALSE(l->result.ok());
    EXPECT_NE(l->result.status().message().find("KV group 0"), std::string::npos)
        << l->result.status();
  }
  h_.thread()->RunSync([&] { publisher_->DropPrompt(Digest(1)); });
  ReleasePages(pages);
  EXPECT_EQ(dst_.pool->free_pages(), dst_.pool->num_pages());
}

}  // namespace

}  // namespace kvcast::kvcache
