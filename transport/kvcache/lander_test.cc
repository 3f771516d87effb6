// KvLander without a network: objects in any order land in the right slots;
// bad objects are refused with a specific error, write nothing, and give
// the pages back to the pool.
#include "transport/kvcache/lander.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <chrono>
#include <random>
#include <thread>

#include "kernels/profiling_backend.h"
#include "transport/kvcache/naming.h"
#include "transport/quic/event_loop.h"

namespace kvcast::kvcache {
namespace {

const Hash128 kModel{11, 22};
constexpr int kChunk = 8;
constexpr float kSentinel = -12345.f;

// The CPU backend as a device backend would present it: its pages are not
// host memory to the lander, which stages each group.
class StagingCpuBackend : public ProfilingBackend {
 public:
  using ProfilingBackend::ProfilingBackend;
  bool KvPagesInHostMemory() const override { return false; }
};

// A backend whose KV transfers fail from the `fail_after`-th call on, as a
// device's copy would (a CUDA error): landing must fail the group.
class FailingTransferBackend : public ProfilingBackend {
 public:
  FailingTransferBackend(Backend* inner, bool host_pages, int fail_after)
      : ProfilingBackend(inner), host_pages_(host_pages), calls_left_(fail_after) {}
  bool KvPagesInHostMemory() const override { return host_pages_; }
  absl::Status DecodeKv(KvFormat format, int block, const uint8_t* in, size_t in_stride,
                        const int32_t* slots, int num_tokens, const KvArrays& dst) override {
    if (calls_left_-- <= 0) return absl::InternalError("cuda backend: DecodeKv: an illegal copy");
    return ProfilingBackend::DecodeKv(format, block, in, in_stride, slots, num_tokens, dst);
  }

 private:
  const bool host_pages_;
  int calls_left_;
};

class LanderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    backend_ = NewCpuBackend();
    lander_backend_ = backend_.get();
    pool_ = *KvPagePool::Create(backend_.get(), layout_, 16);
    for (int l = 0; l < layout_.num_layers; ++l) {
      std::fill_n(pool_->k_cache(l), 16 * layout_.page_floats(), kSentinel);
      std::fill_n(pool_->v_cache(l), 16 * layout_.page_floats(), kSentinel);
    }
  }
  moqt::FullTrackName Track(KvCompression f, const Hash128& model = kModel) {
    return FullTrackNameOf({ModelId(model), std::string(32, 'a'), f});
  }
  // A deterministic fp16-exact payload for token `token`.
  std::vector<uint8_t> Payload(const TokenCodec& codec, int token) {
    std::vector<float> row(layout_.token_floats());
    std::vector<uint8_t> out;
    for (int r = 0; r < 2 * layout_.num_layers; ++r) {
      for (size_t i = 0; i < row.size(); ++i) row[i] = token + r * 0.25f + i / 64.f;
      std::vector<uint8_t> enc(codec.row_bytes());
      EncodeKvRow(codec.format(), row.data(), layout_.num_kv_heads, layout_.head_dim,
                  codec.block(), enc.data());
      out.insert(out.end(), enc.begin(), enc.end());
    }
    return out;
  }
  // Creates a lander for groups [first, end) of a `tokens`-token sequence.
  std::shared_ptr<KvLander> Make(int tokens, int first, int end,
                                 KvCompression f = KvFormat::kFp16,
                                 AcCodecThread* ac_thread = nullptr,
                                 bool keep_whole_groups = false) {
    const int n = std::min(end * kChunk, tokens) - first * kChunk;
    LandingSpec spec{kChunk, tokens, first, end,
                     *pool_->Allocate((n + layout_.page_tokens - 1) / layout_.page_tokens),
                     ac_thread, keep_whole_groups};
    pages_.assign(spec.pages.ids().begin(), spec.pages.ids().end());
    auto lander = KvLander::Create(pool_.get(), lander_backend_, kModel, Track(f),
                                   std::move(spec), [this](auto r) {
                                     ++done_calls_;
                                     result_ = std::move(r);
                                   });
    EXPECT_TRUE(lander.ok()) << lander.status();
    return *lander;
  }
  ac::AcShape AcShapeOf() const {
    return {layout_.num_layers, layout_.num_kv_heads, layout_.head_dim};
  }
  // 12 tokens of synthetic KV (*kv) coded in `policy` as groups of 8 and 4.
  std::array<std::vector<std::vector<uint8_t>>, 2> AcGroups(const ac::AcPolicy& policy,
                                                            float freq, int period,
                                                            std::vector<float>* kv) const {
    const ac::AcShape shape = AcShapeOf();
    const int n = shape.token_floats();
    kv->resize(size_t(12) * n);
    for (size_t i = 0; i < kv->size(); ++i) (*kv)[i] = std::sin(freq * i) * (1 + i % period);
    std::array<std::vector<std::vector<uint8_t>>, 2> groups;
    ac::AcGroupEncoder(shape, policy).Encode(kv->data(), 8, &groups[0]);
    ac::AcGroupEncoder(shape, policy).Encode(kv->data() + 8 * n, 4, &groups[1]);
    return groups;
  }
  void Send(KvLander& lander, uint64_t group, uint64_t object, absl::Span<const uint8_t> p) {
    moqt::ObjectHeader h;
    h.group = group;
    h.object = object;
    lander.OnObject(h, p);
  }
  bool Untouched(int32_t page) {
    const float* k = pool_->k_cache(0) + size_t(page) * layout_.page_floats();
    return std::all_of(k, k + layout_.page_floats(), [](float x) { return x == kSentinel; });
  }

  KvLayout layout_{2, 2, 16, 4};
  std::unique_ptr<Backend> backend_;
  Backend* lander_backend_ = nullptr;  // backend_, or a wrapper of it
  std::unique_ptr<KvPagePool> pool_;
  std::vector<int32_t> pages_;
  int done_calls_ = 0;
  absl::StatusOr<KvPages> result_ = absl::UnknownError("not done");  // before pool_ goes
};

TEST_F(LanderTest, OutOfOrderGroupsLandInTheirSlotsAndHandOverThePages) {
  const int tokens = 19;  // groups 0, 1 full; group 2 holds 3 tokens
  auto lander = Make(tokens, 0, 3);
  TokenCodec codec(layout_, KvFormat::kFp16);
  std::vector<int> order(tokens);
  for (int i = 0; i < tokens; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), std::mt19937(3));
  for (int t : order) Send(*lander, t / kChunk, t % kChunk, Payload(codec, t));
  ASSERT_EQ(done_calls_, 1);
  ASSERT_TRUE(result_.ok()) << result_.status();
  EXPECT_EQ(std::vector<int32_t>(result_->ids().begin(), result_->ids().end()), pages_);
  for (int t = 0; t < tokens; ++t) {
    const int slot = pages_[t / 4] * 4 + t % 4;
    EXPECT_EQ(pool_->k_cache(0)[size_t(slot) * 32], float(t));
    EXPECT_EQ(pool_->v_cache(1)[size_t(slot) * 32 + 1], t + 3 * 0.25f + 1 / 64.f);
  }
  EXPECT_EQ(pool_->RefCount(pages_[0]), 1);  // ours now
}

// On host pages each token lands as it arrives, with a DecodeKv call of
// its own (no staging copy).
TEST_F(LanderTest, OnHostPagesEachTokenLandsOnArrival) {
  ASSERT_TRUE(backend_->KvPagesInHostMemory());
  auto lander = Make(12, 0, 2);
  TokenCodec codec(layout_, KvFormat::kFp16);
  Send(*lander, 1, 2, Payload(codec, 10));
  EXPECT_EQ(lander->flushes(), 1);
  const int slot = pages_[10 / 4] * 4 + 10 % 4;
  EXPECT_EQ(pool_->k_cache(0)[size_t(slot) * 32], 10.f);
  EXPECT_TRUE(Untouched(pages_[0]));
  for (int t = 0; t < 12; ++t) Send(*lander, t / kChunk, t % kChunk, Payload(codec, t));
  EXPECT_EQ(lander->flushes(), 12) << "the duplicate of token 10 lands nothing";
  ASSERT_EQ(done_calls_, 1);
  ASSERT_TRUE(result_.ok()) << result_.status();
}

// On a device, tokens are staged and land a group at a time (one DecodeKv
// for every layer): a full group, a group closed by its end marker, and
// the last, partial group when its final token arrives.
TEST_F(LanderTest, StagedTokensLandPerGroupOnFullEndMarkerOrLastToken) {
  StagingCpuBackend staging(backend_.get());
  lander_backend_ = &staging;
  const int tokens = 19;
  auto lander = Make(tokens, 0, 3);
  TokenCodec codec(layout_, KvFormat::kFp16);
  for (int t = 0; t < kChunk - 1; ++t) Send(*lander, 0, t, Payload(codec, t));
  EXPECT_EQ(lander->flushes(), 0);
  EXPECT_TRUE(Untouched(pages_[0])) << "staged tokens are not in the pages yet";
  Send(*lander, 0, kChunk - 1, Payload(codec, kChunk - 1));
  EXPECT_EQ(lander->flushes(), 1);
  EXPECT_EQ(pool_->k_cache(0)[size_t(pages_[0]) * 4 * 32], 0.f);
  for (int t = kChunk; t < kChunk + 3; ++t) Send(*lander, 1, t - kChunk, Payload(codec, t));
  moqt::ObjectHeader marker;
  marker.group = 1;
  marker.object = kChunk;
  marker.status = moqt::ObjectStatus::kEndOfGroup;
  lander->OnObject(marker, {});
  EXPECT_EQ(lander->flushes(), 2);
  EXPECT_EQ(pool_->k_cache(0)[size_t(pages_[2]) * 4 * 32], float(kChunk));
  for (int t = kChunk + 3; t < tokens; ++t) {
    Send(*lander, t / kChunk, t % kChunk, Payload(codec, t));
  }
  ASSERT_EQ(done_calls_, 1);
  ASSERT_TRUE(result_.ok()) << result_.status();
  // Tokens 11..18 fill the staging buffer (kChunk tokens) together; the
  // last token then finds nothing left to land.
  EXPECT_EQ(lander->flushes(), 3);
  for (int t = 0; t < tokens; ++t) {
    const int slot = pages_[t / 4] * 4 + t % 4;
    EXPECT_EQ(pool_->k_cache(0)[size_t(slot) * 32], float(t)) << t;
  }
}

TEST_F(LanderTest, ASuffixRangeLandsOnlyItsGroups) {
  auto lander = Make(20, 1, 3);  // tokens 8..19 into 3 pages
  TokenCodec codec(layout_, KvFormat::kFp16);
  for (int t = 8; t < 20; ++t) Send(*lander, t / kChunk, t % kChunk, Payload(codec, t));
  ASSERT_TRUE(result_.ok()) << result_.status();
  EXPECT_EQ(pool_->k_cache(1)[size_t(pages_[0] * 4) * 32], 8 + 2 * 0.25f);
}

TEST_F(LanderTest, BadObjectsAreRefusedWriteNothingAndReleaseThePages) {
  TokenCodec codec(layout_, KvFormat::kInt8);
  const int free_before = pool_->free_pages();
  struct Case {
    const char* what;
    uint64_t group, object;
    int payload_delta;
    const char* message;
  };
  const Case cases[] = {
      {"short payload", 0, 0, -1, "has 143 bytes; int8 tokens of this model have 144"},
      {"long payload", 0, 0, +1, "bytes"},
      {"object past the chunk", 0, kChunk, 0, "past the"},
      {"object past the sequence", 1, 3, 0, "past the 11-token sequence"},
      {"group past the prompt", 2, 0, 0, "outside the requested groups"},
  };
  for (const Case& c : cases) {
    done_calls_ = 0;
    auto lander = Make(11, 0, 2, KvFormat::kInt8);
    std::vector<uint8_t> p = Payload(codec, 1);
    p.resize(p.size() + c.payload_delta);
    Send(*lander, c.group, c.object, p);
    ASSERT_EQ(done_calls_, 1) << c.what;
    EXPECT_EQ(result_.status().code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_NE(result_.status().message().find(c.message), std::string::npos)
        << c.what << ": " << result_.status();
    for (int32_t page : pages_) EXPECT_TRUE(Untouched(page)) << c.what;
    EXPECT_EQ(pool_->free_pages(), free_before) << c.what;
    Send(*lander, 0, 1, Payload(codec, 1));  // ignored after the failure
    EXPECT_EQ(done_calls_, 1);
  }
}

TEST_F(LanderTest, AnotherModelsTrackIsRefusedAtCreateAndThePagesReleased) {
  const int free_before = pool_->free_pages();
  LandingSpec spec{kChunk, 8, 0, 1, *pool_->Allocate(2)};
  auto lander = KvLander::Create(pool_.get(), backend_.get(), kModel,
                                 Track(KvFormat::kFp16, Hash128{99, 22}), std::move(spec),
                                 [](auto) {});
  EXPECT_EQ(lander.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(lander.status().message().find("cannot land in model"), std::string::npos);
  EXPECT_EQ(pool_->free_pages(), free_before);

  LandingSpec wrong_pages{kChunk, 8, 0, 1, *pool_->Allocate(1)};
  lander = KvLander::Create(pool_.get(), backend_.get(), kModel, Track(KvFormat::kFp16),
                            std::move(wrong_pages), [](auto) {});
  EXPECT_NE(lander.status().message().find("needs 2 pages, got 1"), std::string::npos);
  EXPECT_EQ(pool_->free_pages(), free_before);
}

TEST_F(LanderTest, TrackEndingEarlyIsDataLossAndAbortReleases) {
  const int free_before = pool_->free_pages();
  TokenCodec codec(layout_, KvFormat::kFp16);
  auto lander = Make(16, 0, 2);
  Send(*lander, 0, 0, Payload(codec, 0));
  Send(*lander, 0, 0, Payload(codec, 0));  // duplicate: ignored
  EXPECT_EQ(lander->tokens_landed(), 1);
  lander->OnDone(absl::OkStatus());
  EXPECT_EQ(result_.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(result_.status().message().find("15 of 16 tokens missing"), std::string::npos);
  EXPECT_EQ(pool_->free_pages(), free_before);

  lander = Make(16, 0, 2);
  lander->Abort(absl::DeadlineExceededError("deadline"));
  EXPECT_EQ(result_.status().code(), absl::StatusCode::kDeadlineExceeded);
  lander->OnDone(absl::OkStatus());  // nothing more
  EXPECT_EQ(pool_->free_pages(), free_before);

  lander = Make(16, 0, 2);
  lander.reset();  // destroyed unfinished: pages go back too
  EXPECT_EQ(pool_->free_pages(), free_before);
}

// keep_whole_groups: a track cut short hands over its leading whole groups
// (here 0 and 1; group 2 lacks tokens, so group 3 cannot follow), staged
// tokens included, and releases the rest; with no whole leading group, or
// without the option, it fails as before.
TEST_F(LanderTest, TrackCutShortKeepsItsLeadingWholeGroups) {
  StagingCpuBackend staging(backend_.get());
  TokenCodec codec(layout_, KvFormat::kFp16);
  const int free_before = pool_->free_pages();
  const int per_group = kChunk / layout_.page_tokens;
  for (bool staged : {false, true}) {
    SCOPED_TRACE(staged ? "device pages (staged)" : "host pages");
    lander_backend_ = staged ? static_cast<Backend*>(&staging) : backend_.get();
    auto lander = Make(32, 0, 4, KvFormat::kFp16, nullptr, /*keep_whole_groups=*/true);
    const std::vector<int32_t> pages = pages_;
    // Groups 0 and 3 whole, group 1 whole once its last token (15) comes,
    // group 2 only 3 of 8 tokens.
    for (int t : {0, 1, 2, 3, 4, 5, 6, 7, 24, 25, 26, 27, 28, 29, 30, 31, 8, 9, 10, 11, 12, 13,
                  14, 16, 17, 18, 15}) {
      Send(*lander, t / kChunk, t % kChunk, Payload(codec, t));
    }
    EXPECT_EQ(done_calls_, 0);
    lander->OnDone(absl::UnavailableError("publisher gone"));
    ASSERT_TRUE(result_.ok()) << result_.status();
    EXPECT_EQ(result_->ids(), absl::MakeConstSpan(pages).first(2 * per_group));
    EXPECT_EQ(lander->shortfall().code(), absl::StatusCode::kUnavailable);
    EXPECT_NE(lander->shortfall().message().find("with 5 tokens missing: publisher gone"),
              std::string::npos)
        << lander->shortfall();
    for (int p = 0; p < 2 * per_group; ++p) EXPECT_FALSE(Untouched(pages[p])) << p;
    EXPECT_EQ(pool_->free_pages(), free_before - 2 * per_group);
    result_ = absl::UnknownError("taken");
    EXPECT_EQ(pool_->free_pages(), free_before);
    done_calls_ = 0;
  }
  lander_backend_ = backend_.get();
  // Group 0 incomplete: nothing to keep.
  auto lander = Make(32, 0, 4, KvFormat::kFp16, nullptr, /*keep_whole_groups=*/true);
  for (int t = 1; t < 16; ++t) Send(*lander, t / kChunk, t % kChunk, Payload(codec, t));
  lander->OnDone(absl::OkStatus());
  EXPECT_EQ(result_.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(lander->shortfall().ok());
  EXPECT_EQ(pool_->free_pages(), free_before);
  // A bad object keeps nothing, whole groups or not.
  lander = Make(32, 0, 4, KvFormat::kFp16, nullptr, /*keep_whole_groups=*/true);
  for (int t = 0; t < 8; ++t) Send(*lander, 0, t, Payload(codec, t));
  Send(*lander, 1, 0, std::vector<uint8_t>(3));
  EXPECT_EQ(result_.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pool_->free_pages(), free_before);
}

// An ac track: objects wait for their group, which decodes whole (in any
// group order, duplicates ignored); a damaged group fails the landing.
TEST_F(LanderTest, AcGroupsDecodeWholeWhenComplete) {
  const ac::AcShape shape = AcShapeOf();
  const int tokens = 12, n = shape.token_floats();
  std::vector<float> kv;
  const auto groups = AcGroups(ac::AcLow(), 0.37f, 7, &kv);
  const KvCompression track(&ac::AcLow());
  auto lander = Make(tokens, 0, 2, track);
  for (int t = 0; t < 4; ++t) Send(*lander, 1, t, groups[1][t]);
  EXPECT_EQ(lander->flushes(), 1);
  for (int t = 0; t < 7; ++t) Send(*lander, 0, t, groups[0][t]);
  Send(*lander, 0, 3, groups[0][3]);  // duplicate: ignored
  EXPECT_TRUE(Untouched(pages_[0])) << "group 0 waits for its last object";
  Send(*lander, 0, 7, groups[0][7]);
  ASSERT_EQ(done_calls_, 1);
  ASSERT_TRUE(result_.ok()) << result_.status();
  // What the codec decodes, through fp16 as the pages hold it.
  std::vector<float> want(kv.size());
  for (int g = 0; g < 2; ++g) {
    const std::vector<absl::Span<const uint8_t>> spans(groups[g].begin(), groups[g].end());
    ASSERT_TRUE(ac::AcGroupDecoder(shape).DecodeGroup(spans, want.data() + g * 8 * n).ok());
  }
  std::vector<uint8_t> half(want.size() * 2);
  EncodeKvRow(KvFormat::kFp16, want.data(), int(want.size() / 16), 16, 16, half.data());
  DecodeKvRow(KvFormat::kFp16, half.data(), int(want.size() / 16), 16, 16, want.data());
  const int row = layout_.token_floats();
  for (int t = 0; t < tokens; ++t) {
    const int32_t slot = SlotsOf(pages_, layout_.page_tokens, t, 1)[0];
    for (int l = 0; l < layout_.num_layers; ++l) {
      for (int i = 0; i < row; ++i) {
        ASSERT_EQ(pool_->k_cache(l)[size_t(slot) * row + i], want[t * n + 2 * l * row + i]);
        ASSERT_EQ(pool_->v_cache(l)[size_t(slot) * row + i], want[t * n + (2 * l + 1) * row + i]);
      }
    }
  }
  result_->Reset();

  const int free_before = pool_->free_pages();
  lander = Make(tokens, 0, 2, track);
  auto damaged = groups[1][2];
  damaged.pop_back();
  for (int t = 0; t < 4; ++t) Send(*lander, 1, t, t == 2 ? damaged : groups[1][t]);
  EXPECT_EQ(result_.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(result_.status().message().find("KV group 1"), std::string::npos) << result_.status();
  EXPECT_EQ(pool_->free_pages(), free_before);  // the pages went back
}

// With an AcCodecThread a complete group decodes there and lands when it
// comes back to the loop: the same pages as on the loop, the same errors;
// a lander the session lets go of while its groups decode still lands, and
// one aborted meanwhile releases its pages at once.
TEST_F(LanderTest, AcGroupsDecodedOnTheCodecThreadLandTheSame) {
  const int tokens = 12;
  std::vector<float> kv;
  const auto groups = AcGroups(ac::AcHigh(), 0.23f, 5, &kv);
  const KvCompression track(&ac::AcHigh());
  auto send_all = [&](KvLander& lander, int damaged_token) {
    for (int g : {1, 0}) {
      for (size_t t = 0; t < groups[g].size(); ++t) {
        auto object = groups[g][t];
        if (g * 8 + int(t) == damaged_token) object.pop_back();
        Send(lander, g, t, object);
      }
    }
  };
  // On the loop: what the pages must hold.
  auto lander = Make(tokens, 0, 2, track);
  send_all(*lander, -1);
  ASSERT_TRUE(result_.ok()) << result_.status();
  KvPages reference = *std::move(result_);  // kept while the second landing runs
  auto loop = quic::LoopThread::Start();
  ASSERT_TRUE(loop.ok()) << loop.status();
  auto codec_thread = std::make_unique<AcCodecThread>(layout_, (*loop)->loop());
  auto wait_done = [&](int calls) {
    for (int i = 0; i < 500 && done_calls_ < calls; ++i) {
      (*loop)->RunSync([] {});
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    (*loop)->RunSync([] {});
    return done_calls_ == calls;
  };

  (*loop)->RunSync([&] {
    lander = Make(tokens, 0, 2, track, codec_thread.get());
    send_all(*lander, -1);
    // The decodes come back through this loop, busy with this task: the
    // groups are still out and the track ending changes nothing.
    lander->OnDone(absl::OkStatus());
    EXPECT_EQ(done_calls_, 1);
    EXPECT_EQ(lander->flushes(), 0);
  });
  ASSERT_TRUE(wait_done(2));
  ASSERT_TRUE(result_.ok()) << result_.status();
  EXPECT_EQ(lander->flushes(), 2);
  const int row = layout_.token_floats();
  for (int l = 0; l < layout_.num_layers; ++l) {
    for (int t = 0; t < tokens; ++t) {
      const size_t a = size_t(SlotsOf(reference.ids(), layout_.page_tokens, t, 1)[0]) * row;
      const size_t b = size_t(SlotsOf(result_->ids(), layout_.page_tokens, t, 1)[0]) * row;
      ASSERT_TRUE(std::equal(pool_->k_cache(l) + a, pool_->k_cache(l) + a + row,
                             pool_->k_cache(l) + b));
      ASSERT_TRUE(std::equal(pool_->v_cache(l) + a, pool_->v_cache(l) + a + row,
                             pool_->v_cache(l) + b));
    }
  }
  result_->Reset();
  reference.Reset();

  const int free_before = pool_->free_pages();
  (*loop)->RunSync([&] {
    lander = Make(tokens, 0, 2, track, codec_thread.get());
    send_all(*lander, 9);  // group 1's second token
  });
  ASSERT_TRUE(wait_done(3));
  EXPECT_EQ(result_.status().code(), absl::StatusCode::kDataLoss) << result_.status();
  EXPECT_NE(result_.status().message().find("KV group 1"), std::string::npos) << result_.status();
  EXPECT_EQ(pool_->free_pages(), free_before);

  // Let go of while its groups decode (as a session does once the track
  // ends): the decodes keep it, and it lands.
  std::weak_ptr<KvLander> weak;
  (*loop)->RunSync([&] {
    lander = Make(tokens, 0, 2, track, codec_thread.get());
    weak = lander;
    send_all(*lander, -1);
    lander.reset();
  });
  ASSERT_TRUE(wait_done(4));
  ASSERT_TRUE(result_.ok()) << result_.status();
  result_->Reset();
  (*loop)->RunSync([] {});
  EXPECT_TRUE(weak.expired());
  // Aborted while decoding: done says so at once and the pages go back;
  // the decodes, when they return, write nothing.
  (*loop)->RunSync([&] {
    lander = Make(tokens, 0, 2, track, codec_thread.get());
    send_all(*lander, -1);
    lander->Abort(absl::CancelledError("client went away"));
    EXPECT_EQ(pool_->free_pages(), free_before);
  });
  EXPECT_EQ(done_calls_, 5);
  EXPECT_EQ(result_.status().code(), absl::StatusCode::kCancelled);
  codec_thread.reset();  // waits for the job running; the rest is dropped
  (*loop)->RunSync([] {});
  EXPECT_EQ(done_calls_, 5);
  EXPECT_EQ(pool_->free_pages(), free_before);
}

TEST_F(LanderTest, AFailedTransferFailsTheLandingNamingItsGroupAndFreesThePages) {
  TokenCodec codec(layout_, KvFormat::kFp16);
  for (bool host_pages : {true, false}) {
    SCOPED_TRACE(host_pages ? "host pages, a token at a time" : "staged, a group at a time");
    // The first group lands; the second's transfer fails.
    FailingTransferBackend failing(backend_.get(), host_pages,
                                   /*fail_after=*/host_pages ? kChunk : 1);
    lander_backend_ = &failing;
    const int free_before = pool_->free_pages();
    done_calls_ = 0;
    auto lander = Make(19, 0, 3);
    for (int t = 0; t < 19 && done_calls_ == 0; ++t) {
      Send(*lander, t / kChunk, t % kChunk, Payload(codec, t));
    }
    ASSERT_EQ(done_calls_, 1);
    EXPECT_EQ(result_.status().code(), absl::StatusCode::kInternal);
    EXPECT_NE(result_.status().message().find("KV group 1"), std::string::npos)
        << result_.status();
    EXPECT_NE(result_.status().message().find("an illegal copy"), std::string::npos);
    lander.reset();
    result_ = absl::UnknownError("not done");
    EXPECT_EQ(pool_->free_pages(), free_before);
  }
}

}  // namespace
}  // namespace kvcast::kvcache
