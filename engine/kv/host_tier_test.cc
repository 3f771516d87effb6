// The host and disk KV tiers: a chunk demoted and promoted back holds the
// same KV (through its format), budgets drop the least recently used chunk
// (host to disk, disk to nothing), a corrupted chunk is refused, chunk
// files survive a restart and are refused by another model, and with the
// prefix cache eviction goes to the tiers first while KV events report
// only what left them all.
#include "engine/kv/host_tier.h"

#include <cstdio>
#include <filesystem>
#include <numeric>

#include "engine/kv/prefix_cache.h"
#include "kernels/profiling_backend.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "xxhash.h"

namespace kvcast {
namespace {

constexpr int kChunk = 32;  // 2 pages of 16 tokens
const KvLayout kLayout{2, 2, 16, 16};

class HostTierTest : public testing::Test {
 protected:
  HostTierTest()
      : be_(NewCpuBackend()), pool_(*KvPagePool::Create(be_.get(), kLayout, 8)) {
    // Multiples of 1/8 below 64: exact in fp16, so a round trip is exact.
    const size_t n = pool_->layer_values();
    for (int l = 0; l < kLayout.num_layers; ++l) {
      for (size_t i = 0; i < n; ++i) {
        const uint32_t x = uint32_t(i * 2 + l) * 2654435761u;
        pool_->k_cache(l)[i] = float(int(x >> 23) - 256) / 8;
        pool_->v_cache(l)[i] = float(int((x >> 7) & 511) - 256) / 8;
      }
    }
  }
  std::vector<float> Read(absl::Span<const int32_t> pages) {
    std::vector<float> out;
    for (int l = 0; l < kLayout.num_layers; ++l) {
      for (float* cache : {pool_->k_cache(l), pool_->v_cache(l)}) {
        for (int32_t p : pages) {
          out.insert(out.end(), cache + size_t(p) * kLayout.page_floats(),
                     cache + size_t(p + 1) * kLayout.page_floats());
        }
      }
    }
    return out;
  }
  std::vector<Hash128> Chain(int chunks) {
    std::vector<int32_t> t(chunks * kChunk);
    std::iota(t.begin(), t.end(), 0);
    return ChunkHashChain(PrefixSeed(Hash128{1, 2}), t, kChunk);
  }

  std::unique_ptr<Backend> be_;
  std::unique_ptr<KvPagePool> pool_;
};

TEST_F(HostTierTest, ADemotedChunkComesBackIntoOtherPages) {
  HostKvTier tier(pool_.get(), be_.get(), kChunk, KvFormat::kFp16, 1 << 20);
  const Hash128 h = Chain(1)[0];
  KvPages src_pages = *pool_->Allocate(2);
  const absl::Span<const int32_t> src = src_pages.ids();
  const std::vector<float> want = Read(src);
  std::vector<Hash128> dropped;
  tier.Demote(h, src, &dropped);
  EXPECT_TRUE(dropped.empty());
  EXPECT_TRUE(tier.Contains(h));
  KvPages dst_pages = *pool_->Allocate(2);
  const absl::Span<const int32_t> dst = dst_pages.ids();
  EXPECT_NE(Read(dst), want);
  ASSERT_TRUE(tier.Promote(h, dst).ok());
  EXPECT_EQ(Read(dst), want);
  EXPECT_EQ(tier.Promote(Chain(2)[1], dst).code(), absl::StatusCode::kNotFound);
  const HostKvTier::Stats st = tier.stats();
  EXPECT_EQ(st.chunks, 1u);
  EXPECT_EQ(st.bytes, tier.chunk_bytes());
  EXPECT_EQ(st.demotions, 1u);
  EXPECT_EQ(st.hits, 1u);
  // int8 keeps half the bytes (plus scales).
  HostKvTier int8(pool_.get(), be_.get(), kChunk, KvFormat::kInt8, 1 << 20);
  EXPECT_LT(int8.chunk_bytes() * 10, tier.chunk_bytes() * 6);
}

// A backend whose KV transfers fail while `failing` is set, as a device's
// copy would (a CUDA error).
class FlakyTransferBackend : public ProfilingBackend {
 public:
  using ProfilingBackend::ProfilingBackend;
  bool failing = false;
  absl::Status EncodeKv(KvFormat format, int block, const KvArrays& src, const int32_t* slots,
                        int num_tokens, uint8_t* out, size_t out_stride) override {
    if (failing) return absl::InternalError("EncodeKv: an illegal copy");
    return ProfilingBackend::EncodeKv(format, block, src, slots, num_tokens, out, out_stride);
  }
  absl::Status DecodeKv(KvFormat format, int block, const uint8_t* in, size_t in_stride,
                        const int32_t* slots, int num_tokens, const KvArrays& dst) override {
    if (failing) return absl::InternalError("DecodeKv: an illegal copy");
    return ProfilingBackend::DecodeKv(format, block, in, in_stride, slots, num_tokens, dst);
  }
};

TEST_F(HostTierTest, AFailedTransferLosesOnlyThatCopy) {
  FlakyTransferBackend flaky(be_.get());
  HostKvTier tier(pool_.get(), &flaky, kChunk, KvFormat::kFp16, 1 << 20);
  const std::vector<Hash128> chain = Chain(2);
  KvPages pages = *pool_->Allocate(2);
  std::vector<Hash128> dropped;
  // A demotion whose copy out fails keeps nothing (the chunk leaves as it
  // would without a tier) and says so in the stats.
  flaky.failing = true;
  tier.Demote(chain[0], pages.ids(), &dropped);
  EXPECT_FALSE(tier.Contains(chain[0]));
  EXPECT_EQ(tier.stats().transfer_failures, 1u);
  EXPECT_EQ(tier.stats().chunks, 0u);
  // A promotion whose copy in fails is an error, and the chunk stays.
  flaky.failing = false;
  tier.Demote(chain[1], pages.ids(), &dropped);
  ASSERT_TRUE(tier.Contains(chain[1]));
  flaky.failing = true;
  const absl::Status s = tier.Promote(chain[1], pages.ids());
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_NE(s.message().find("an illegal copy"), std::string::npos);
  EXPECT_TRUE(tier.Contains(chain[1]));
  flaky.failing = false;
  EXPECT_TRUE(tier.Promote(chain[1], pages.ids()).ok());
}

TEST_F(HostTierTest, TheBudgetDropsTheLeastRecentlyUsedChunk) {
  HostKvTier probe(pool_.get(), be_.get(), kChunk, KvFormat::kFp16, 1);
  HostKvTier tier(pool_.get(), be_.get(), kChunk, KvFormat::kFp16, 2 * probe.chunk_bytes());
  KvPages pages_pages = *pool_->Allocate(2);
  const absl::Span<const int32_t> pages = pages_pages.ids();
  const auto chain = Chain(3);
  std::vector<Hash128> dropped;
  tier.Demote(chain[0], pages, &dropped);
  tier.Demote(chain[1], pages, &dropped);
  ASSERT_TRUE(tier.Promote(chain[0], pages).ok());  // now the most recent
  tier.Demote(chain[2], pages, &dropped);
  EXPECT_EQ(dropped, std::vector<Hash128>{chain[1]});
  EXPECT_TRUE(tier.Contains(chain[0]));
  EXPECT_FALSE(tier.Contains(chain[1]));
  EXPECT_EQ(tier.stats().evictions, 1u);
  EXPECT_EQ(tier.stats().bytes, 2 * tier.chunk_bytes());
  probe.Demote(chain[0], pages, &dropped);  // smaller than a chunk: holds nothing
  EXPECT_FALSE(probe.Contains(chain[0]));
}

// LFU keeps a chunk used often through a run of chunks used once; LRU
// gives it up.
TEST_F(HostTierTest, LfuKeepsAPopularChunkThroughAScan) {
  const auto chain = Chain(4);
  KvPages pages_pages = *pool_->Allocate(2);
  const absl::Span<const int32_t> pages = pages_pages.ids();
  for (HostKvTier::Policy policy : {HostKvTier::Policy::kLru, HostKvTier::Policy::kLfu}) {
    HostKvTier probe(pool_.get(), be_.get(), kChunk, KvFormat::kFp16, 1);
    HostKvTier tier(pool_.get(), be_.get(), kChunk, KvFormat::kFp16, 2 * probe.chunk_bytes(),
                    policy);
    std::vector<Hash128> dropped;
    tier.Demote(chain[0], pages, &dropped);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(tier.Promote(chain[0], pages).ok());
    tier.Demote(chain[1], pages, &dropped);
    tier.Demote(chain[2], pages, &dropped);  // one must go
    tier.Demote(chain[3], pages, &dropped);  // and another
    EXPECT_EQ(tier.Contains(chain[0]), policy == HostKvTier::Policy::kLfu);
    EXPECT_TRUE(tier.Contains(chain[3]));
  }
}

TEST_F(HostTierTest, ACorruptedChunkIsRefusedAndDropped) {
  HostKvTier tier(pool_.get(), be_.get(), kChunk, KvFormat::kFp16, 1 << 20);
  const Hash128 h = Chain(1)[0];
  KvPages pages_pages = *pool_->Allocate(2);
  const absl::Span<const int32_t> pages = pages_pages.ids();
  std::vector<Hash128> dropped;
  tier.Demote(h, pages, &dropped);
  tier.CorruptForTest(h);
  EXPECT_EQ(tier.Promote(h, pages).code(), absl::StatusCode::kDataLoss);
  EXPECT_FALSE(tier.Contains(h));
  EXPECT_EQ(tier.stats().corrupt, 1u);
  EXPECT_EQ(tier.stats().chunks, 0u);
}

TEST_F(HostTierTest, ThePrefixCacheDemotesOnEvictionAndPromotesOnReuse) {
  HostKvTier tier(pool_.get(), be_.get(), kChunk, KvFormat::kFp16, 1 << 20);
  PrefixCache cache(pool_.get(), kChunk);
  cache.SetHostTier(&tier);
  int stored = 0, in_host = 0, evicted = 0;
  cache.SetObserver([&](PrefixCache::Event e, const Hash128&) {
    (e == PrefixCache::Event::kStored ? stored : e == PrefixCache::Event::kInHost ? in_host : evicted)++;
  });
  const auto chain = Chain(2);
  std::vector<std::vector<float>> want;
  for (const Hash128& h : chain) {
    KvPages pages = *pool_->Allocate(2);
    want.push_back(Read(pages.ids()));
    cache.Insert(h, std::move(pages));  // the cache's the only reference
  }
  // Taking the whole pool evicts both chunks: into the tier, reported as such.
  KvPages all_pages = *pool_->Allocate(8);
  EXPECT_EQ(cache.num_chunks(), 0);
  EXPECT_EQ(tier.stats().chunks, 2u);
  EXPECT_EQ(evicted, 0);
  EXPECT_EQ(in_host, 2);
  // A chain reaching them while the pool is full stops: no pages to promote into.
  EXPECT_TRUE(cache.Acquire(chain, 2).empty());
  all_pages.Reset();
  KvPages got = cache.Acquire(chain, 2);
  ASSERT_EQ(got.size(), 4);
  EXPECT_EQ(Read({got[0], got[1]}), want[0]);
  EXPECT_EQ(Read({got[2], got[3]}), want[1]);
  EXPECT_EQ(cache.num_chunks(), 2);
  EXPECT_EQ(tier.stats().hits, 2u);
  for (int32_t p : got.ids()) EXPECT_EQ(pool_->RefCount(p), 2) << "the cache's and ours";
  got.Reset();
  EXPECT_EQ(stored, 4) << "inserted, then promoted back";
  EXPECT_EQ(evicted, 0);
  // A corrupted copy: the chunk is gone from both tiers once the pool drops it.
  cache.Reclaim(1 << 30);
  EXPECT_EQ(in_host, 4);
  tier.CorruptForTest(chain[0]);
  EXPECT_TRUE(cache.Acquire(chain, 2).empty());
  EXPECT_EQ(evicted, 1);
  EXPECT_EQ(pool_->free_pages(), 8);
}

// ---- the disk tier below -------------------------------------------------------

class DiskTierTest : public HostTierTest {
 protected:
  DiskKvTier::Shape Shape(KvFormat format = KvFormat::kFp16) {
    HostKvTier probe(pool_.get(), be_.get(), kChunk, format, 1);
    return DiskKvTier::Shape{Hash128{7, 8}, format, kChunk, kLayout, probe.chunk_bytes()};
  }
  std::string Dir() {
    return absl::StrCat(testing::TempDir(), "/disk_tier_",
                        testing::UnitTest::GetInstance()->current_test_info()->name());
  }
};

TEST_F(DiskTierTest, ChunksPushedOutOfHostMemoryComeBackFromDiskAfterARestart) {
  const auto chain = Chain(3);
  KvPages pages_pages = *pool_->Allocate(2);
  const absl::Span<const int32_t> pages = pages_pages.ids();
  const std::vector<float> want = Read(pages);
  {
    auto disk = *DiskKvTier::Open(Dir(), Shape(), 1 << 20);
    HostKvTier host(pool_.get(), be_.get(), kChunk, KvFormat::kFp16, 1);  // holds nothing
    host.SetDiskTier(disk.get());
    std::vector<Hash128> dropped;
    host.Demote(chain[0], pages, &dropped);  // too big for host memory: to disk
    EXPECT_TRUE(dropped.empty());
    EXPECT_TRUE(host.Contains(chain[0]));
    EXPECT_EQ(disk->stats().chunks, 1u);
  }  // the tier finishes its writes before it goes
  auto disk = *DiskKvTier::Open(Dir(), Shape(), 1 << 20);  // a restarted worker
  EXPECT_EQ(disk->Chunks(), std::vector<Hash128>{chain[0]});
  HostKvTier host(pool_.get(), be_.get(), kChunk, KvFormat::kFp16, 1 << 20);
  host.SetDiskTier(disk.get());
  KvPages dst_pages = *pool_->Allocate(2);
  const absl::Span<const int32_t> dst = dst_pages.ids();
  ASSERT_TRUE(host.Promote(chain[0], dst).ok());
  EXPECT_EQ(Read(dst), want);
  EXPECT_EQ(disk->stats().hits, 1u);
  // Another model's worker on the same directory uses nothing and deletes it.
  DiskKvTier::Shape other = Shape();
  other.model_fingerprint = Hash128{9, 9};
  auto foreign = *DiskKvTier::Open(Dir(), other, 1 << 20);
  EXPECT_TRUE(foreign->Chunks().empty());
  EXPECT_EQ(foreign->stats().rejected, 1u);
}

TEST_F(DiskTierTest, HostEvictionsSpillToDiskWithinItsBudget) {
  const auto chain = Chain(3);
  KvPages pages_pages = *pool_->Allocate(2);
  const absl::Span<const int32_t> pages = pages_pages.ids();
  const DiskKvTier::Shape shape = Shape();
  auto disk = *DiskKvTier::Open(Dir(), shape, 2 * shape.chunk_bytes);
  HostKvTier host(pool_.get(), be_.get(), kChunk, KvFormat::kFp16, shape.chunk_bytes);
  host.SetDiskTier(disk.get());
  std::vector<Hash128> dropped, spilled;
  for (const Hash128& h : chain) host.Demote(h, pages, &dropped, &spilled);
  // Host: chain[2]; disk: chain[0], chain[1]; nothing lost yet.
  EXPECT_TRUE(dropped.empty());
  EXPECT_EQ(spilled, (std::vector<Hash128>{chain[0], chain[1]}));
  EXPECT_EQ(host.stats().chunks, 1u);
  EXPECT_EQ(disk->stats().chunks, 2u);
  EXPECT_EQ(host.Locate(chain[2]), HostKvTier::Where::kHost);
  EXPECT_EQ(host.Locate(chain[1]), HostKvTier::Where::kDisk);
  host.Demote(Chain(4)[3], pages, &dropped);  // pushes chain[2] down, chain[0] off the disk
  EXPECT_EQ(dropped, std::vector<Hash128>{chain[0]});
  EXPECT_FALSE(host.Contains(chain[0]));
  EXPECT_EQ(host.Locate(chain[0]), HostKvTier::Where::kNone);
  EXPECT_EQ(disk->stats().evictions, 1u);
}

TEST_F(DiskTierTest, AChangedFileIsRefusedAndDeleted) {
  const Hash128 h = Chain(1)[0];
  KvPages pages_pages = *pool_->Allocate(2);
  const absl::Span<const int32_t> pages = pages_pages.ids();
  auto disk = *DiskKvTier::Open(Dir(), Shape(), 1 << 20);
  std::vector<uint8_t> payload(Shape().chunk_bytes, 3);
  std::vector<Hash128> dropped;
  disk->Put(h, payload, XXH3_64bits(payload.data(), payload.size()), &dropped);
  ASSERT_TRUE(disk->Get(h).ok());  // read back from memory while it is queued
  disk->WaitForWrites();
  EXPECT_EQ(disk->stats().writes, 1u);
  const std::string path = absl::StrCat(Dir(), "/", h.ToHex(), ".kvchunk");
  {
    std::FILE* f = std::fopen(path.c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    std::fseek(f, -1, SEEK_END);
    std::fputc(4, f);
    std::fclose(f);
  }
  EXPECT_EQ(disk->Get(h).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_FALSE(disk->Contains(h));
  EXPECT_FALSE(std::filesystem::exists(path));
  // A truncated file is dropped when the directory is opened.
  disk->Put(h, payload, XXH3_64bits(payload.data(), payload.size()), &dropped);
  disk->WaitForWrites();
  std::filesystem::resize_file(path, 100);
  auto reopened = *DiskKvTier::Open(Dir(), Shape(), 1 << 20);
  EXPECT_FALSE(reopened->Contains(h));
  EXPECT_EQ(reopened->stats().rejected, 1u);
  // A chunk of the wrong size is not written at all.
  std::vector<uint8_t> small(10);
  reopened->Put(h, small, 0, &dropped);
  EXPECT_FALSE(reopened->Contains(h));
}

// Found by engine/kv/fuzz: a file rewritten behind the tier's back whose
// header claims a payload of 2^62 bytes is refused as DataLoss; the reader
// does not try to allocate what the header asks for.
TEST_F(DiskTierTest, AHeaderClaimingAHugePayloadIsDataLossNotAnAllocation) {
  const Hash128 h = Chain(1)[0];
  auto disk = *DiskKvTier::Open(Dir(), Shape(), 1 << 20);
  std::vector<uint8_t> payload(Shape().chunk_bytes, 3);
  std::vector<Hash128> dropped;
  disk->Put(h, payload, XXH3_64bits(payload.data(), payload.size()), &dropped);
  disk->WaitForWrites();
  const std::string path = absl::StrCat(Dir(), "/", h.ToHex(), ".kvchunk");
  {
    std::FILE* f = std::fopen(path.c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    const uint64_t huge = uint64_t(1) << 62;
    std::fseek(f, 8 + 16 + 16 + 5 * 4, SEEK_SET);  // the payload size field
    std::fwrite(&huge, sizeof(huge), 1, f);
    std::fclose(f);
  }
  EXPECT_EQ(disk->Get(h).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_FALSE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace kvcast
