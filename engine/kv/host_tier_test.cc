// The host KV tier: a chunk demoted and promoted back holds the same KV
// (through its format), the budget drops the least recently used chunk, a
// corrupted chunk is refused, and with the prefix cache eviction goes to
// the tier first while KV events report only what left both.
#include "engine/kv/host_tier.h"

#include <numeric>

#include "engine/kv/prefix_cache.h"
#include "gtest/gtest.h"

namespace kvcast {
namespace {

constexpr int kChunk = 32;  // 2 pages of 16 tokens
const KvLayout kLayout{2, 2, 16, 16};

class HostTierTest : public testing::Test {
 protected:
  HostTierTest()
      : be_(NewCpuBackend()), pool_(*KvPagePool::Create(be_.get(), kLayout, 8)) {
    // Multiples of 1/8 below 64: exact in fp16, so a round trip is exact.
    const size_t n = pool_->layer_floats();
    for (int l = 0; l < kLayout.num_layers; ++l) {
      for (size_t i = 0; i < n; ++i) {
        const uint32_t x = uint32_t(i * 2 + l) * 2654435761u;
        pool_->k_cache(l)[i] = float(int(x >> 23) - 256) / 8;
        pool_->v_cache(l)[i] = float(int((x >> 7) & 511) - 256) / 8;
      }
    }
  }
  std::vector<float> Read(const std::vector<int32_t>& pages) {
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
  auto src = *pool_->Allocate(2);
  const std::vector<float> want = Read(src);
  std::vector<Hash128> dropped;
  tier.Demote(h, src, &dropped);
  EXPECT_TRUE(dropped.empty());
  EXPECT_TRUE(tier.Contains(h));
  auto dst = *pool_->Allocate(2);
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

TEST_F(HostTierTest, TheBudgetDropsTheLeastRecentlyUsedChunk) {
  HostKvTier probe(pool_.get(), be_.get(), kChunk, KvFormat::kFp16, 1);
  HostKvTier tier(pool_.get(), be_.get(), kChunk, KvFormat::kFp16, 2 * probe.chunk_bytes());
  auto pages = *pool_->Allocate(2);
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

TEST_F(HostTierTest, ACorruptedChunkIsRefusedAndDropped) {
  HostKvTier tier(pool_.get(), be_.get(), kChunk, KvFormat::kFp16, 1 << 20);
  const Hash128 h = Chain(1)[0];
  auto pages = *pool_->Allocate(2);
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
  int stored = 0, evicted = 0;
  cache.SetObserver([&](PrefixCache::Event e, const Hash128&) {
    (e == PrefixCache::Event::kStored ? stored : evicted)++;
  });
  const auto chain = Chain(2);
  std::vector<std::vector<float>> want;
  for (const Hash128& h : chain) {
    auto pages = *pool_->Allocate(2);
    want.push_back(Read(pages));
    cache.Insert(h, pages);
    ASSERT_TRUE(pool_->ReleaseAll(pages).ok());
  }
  // Taking the whole pool evicts both chunks: into the tier, not reported.
  auto all = *pool_->Allocate(8);
  EXPECT_EQ(cache.num_chunks(), 0);
  EXPECT_EQ(tier.stats().chunks, 2u);
  EXPECT_EQ(evicted, 0);
  // A chain reaching them while the pool is full stops: no pages to promote into.
  EXPECT_TRUE(cache.Acquire(chain, 2).empty());
  ASSERT_TRUE(pool_->ReleaseAll(all).ok());
  const std::vector<int32_t> got = cache.Acquire(chain, 2);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(Read({got[0], got[1]}), want[0]);
  EXPECT_EQ(Read({got[2], got[3]}), want[1]);
  EXPECT_EQ(cache.num_chunks(), 2);
  EXPECT_EQ(tier.stats().hits, 2u);
  for (int32_t p : got) EXPECT_EQ(pool_->RefCount(p), 2) << "the cache's and ours";
  ASSERT_TRUE(pool_->ReleaseAll(got).ok());
  EXPECT_EQ(stored, 2);
  EXPECT_EQ(evicted, 0);
  // A corrupted copy: the chunk is gone from both tiers once the pool drops it.
  cache.Reclaim(1 << 30);
  tier.CorruptForTest(chain[0]);
  EXPECT_TRUE(cache.Acquire(chain, 2).empty());
  EXPECT_EQ(evicted, 1);
  EXPECT_EQ(pool_->free_pages(), 8);
}

}  // namespace
}  // namespace kvcast
