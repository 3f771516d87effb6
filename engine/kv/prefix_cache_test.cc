#include "engine/kv/prefix_cache.h"

#include <numeric>

#include "gtest/gtest.h"

namespace kvcast {
namespace {

constexpr int kChunk = 32;  // 2 pages of 16 tokens

class PrefixCacheTest : public testing::Test {
 protected:
  PrefixCacheTest()
      : be_(NewCpuBackend()),
        pool_(*KvPagePool::Create(be_.get(), KvLayout{1, 1, 4, 16}, 8)),
        cache_(std::make_unique<PrefixCache>(pool_.get(), kChunk)) {
    cache_->SetObserver([this](PrefixCache::Event e, const Hash128&) {
      (e == PrefixCache::Event::kStored ? stored_ : evicted_)++;
    });
  }

  std::vector<Hash128> Chain(int first_token, int chunks) {
    std::vector<int32_t> t(chunks * kChunk);
    std::iota(t.begin(), t.end(), first_token);
    return ChunkHashChain(PrefixSeed(Hash128{1, 2}), t, kChunk);
  }

  // Fills `chunks` chunks with fresh pages, inserts them, drops our refs.
  void Store(const std::vector<Hash128>& chain) {
    for (const Hash128& h : chain) {
      cache_->Insert(h, *pool_->Allocate(2));  // the cache's the only reference
    }
  }

  std::unique_ptr<Backend> be_;
  std::unique_ptr<KvPagePool> pool_;
  std::unique_ptr<PrefixCache> cache_;
  int stored_ = 0, evicted_ = 0;
};

TEST(PrefixHash, ChainDependsOnEveryEarlierTokenSeedAndSalt) {
  std::vector<int32_t> a(96), b;
  std::iota(a.begin(), a.end(), 0);
  b = a;
  b[5] = 999;  // changes chunk 0, hence every later hash
  Hash128 seed = PrefixSeed(Hash128{1, 2});
  auto ca = ChunkHashChain(seed, a, 32), cb = ChunkHashChain(seed, b, 32);
  ASSERT_EQ(ca.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_NE(ca[i], cb[i]);
  EXPECT_EQ(ChunkHashChain(seed, absl::MakeSpan(a).subspan(0, 95), 32).size(), 2u);
  EXPECT_NE(ca[0], ChunkHashChain(PrefixSeed(Hash128{1, 3}), a, 32)[0]);
  EXPECT_NE(ca[0], ChunkHashChain(PrefixSeed(Hash128{1, 2}, "tenant"), a, 32)[0]);
  EXPECT_EQ(ca, ChunkHashChain(seed, a, 32));
  EXPECT_EQ(ca[0].ToHex().size(), 32u);
}

TEST_F(PrefixCacheTest, AcquireReturnsLongestCachedPrefixWithReferences) {
  auto chain = Chain(0, 3);
  Store({chain[0], chain[1]});
  EXPECT_EQ(stored_, 2);
  KvPages pages = cache_->Acquire(chain, 10);
  ASSERT_EQ(pages.size(), 4);  // 2 chunks x 2 pages; chunk 2 not cached
  for (int32_t p : pages.ids()) EXPECT_EQ(pool_->RefCount(p), 2);
  EXPECT_EQ(cache_->Acquire(chain, 1).size(), 2);  // a handle dropped at once
  const int32_t first = pages[0];
  EXPECT_EQ(pool_->RefCount(first), 2);
  pages.Reset();
  EXPECT_EQ(pool_->RefCount(first), 1);  // the cache's own
  // A chain that diverges in chunk 0 matches nothing.
  EXPECT_TRUE(cache_->Acquire(Chain(1, 3), 10).empty());
}

TEST_F(PrefixCacheTest, EvictsLeastRecentlyUsedUnreferencedChunksOnDemand) {
  auto a = Chain(0, 2), b = Chain(100, 2);
  Store(a);
  Store(b);  // pool: 8 pages, all held by the cache
  EXPECT_EQ(pool_->free_pages(), 0);
  auto held = cache_->Acquire(a, 1);  // a[0] in use and most recent
  auto got = pool_->Allocate(4);       // must evict two unshared chunks
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(evicted_, 2);
  // LRU order (newest first) was a0 b1 b0 a1: a1 and b0 went.
  EXPECT_EQ(cache_->num_chunks(), 2);
  EXPECT_EQ(cache_->Acquire(b, 10).size(), 0);  // b0 is gone, so is b's prefix
  auto one = pool_->Allocate(2);                  // evicts b1, the last unpinned
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(evicted_, 3);
  EXPECT_EQ(pool_->Allocate(1).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(cache_->num_chunks(), 1);  // a0 survives: it is in use
  one->Reset();
  got->Reset();
  held.Reset();
  cache_.reset();  // releases the cache's own references
  EXPECT_EQ(pool_->free_pages(), 8);
}

TEST_F(PrefixCacheTest, PinnedChunksAreNeverReclaimed) {
  auto pinned = Chain(0, 2), other = Chain(1000, 1);
  cache_->Pin({pinned[0], pinned[1]});
  Store(pinned);
  Store(other);
  EXPECT_EQ(cache_->num_pinned(), 2);
  cache_->Reclaim(1 << 30);  // the pool wants every page back
  EXPECT_EQ(cache_->num_chunks(), 2) << "only the unpinned chunk went";
  EXPECT_EQ(pool_->free_pages(), 8 - 2 * 2);
  auto got = cache_->Acquire(pinned, 2);
  EXPECT_EQ(got.size(), 4);
}

TEST(PrefixHash, WireBytesAreLoThenHiLittleEndian) {
  const Hash128 h{0x0807060504030201ull, 0x100f0e0d0c0b0a09ull};
  const std::string b = HashToBytes(h);
  ASSERT_EQ(b.size(), 16u);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(uint8_t(b[i]), i + 1);
  Hash128 back;
  ASSERT_TRUE(HashFromBytes(b, &back));
  EXPECT_EQ(back, h);
  EXPECT_FALSE(HashFromBytes(b.substr(1), &back));
}

}  // namespace
}  // namespace kvcast
