#include "engine/kv/kv_page_pool.h"

#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace kvcast {
namespace {

std::unique_ptr<KvPagePool> MakePool(Backend* be, int pages) {
  KvLayout layout{/*num_layers=*/2, /*num_kv_heads=*/2, /*head_dim=*/4, /*page_tokens=*/16};
  return *KvPagePool::Create(be, layout, pages);
}

TEST(KvPagePool, AllocatesAllPagesThenRefusesWithoutPartialAllocation) {
  auto be = NewCpuBackend();
  auto pool = MakePool(be.get(), 4);
  auto a = pool->Allocate(3);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->size(), 3);
  EXPECT_EQ(a->pool(), pool.get());
  EXPECT_EQ(pool->free_pages(), 1);
  auto b = pool->Allocate(2);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(pool->free_pages(), 1);  // nothing taken by the failed call
  a->Reset();
  EXPECT_TRUE(a->empty());
  EXPECT_EQ(pool->free_pages(), 4);
}

// AllocateBy waits for pages coming back, up to its deadline; more pages
// than the pool has fail at once.
TEST(KvPagePool, AllocateByWaitsForPagesComingBack) {
  auto be = NewCpuBackend();
  auto pool = MakePool(be.get(), 4);
  KvPages held = *pool->Allocate(3);
  absl::Time start = absl::Now();
  auto short_of_pages = pool->AllocateBy(2, start + absl::Milliseconds(100));
  EXPECT_EQ(short_of_pages.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(100));
  start = absl::Now();
  EXPECT_EQ(pool->AllocateBy(5, start + absl::Seconds(10)).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  std::thread ender([&] {
    absl::SleepFor(absl::Milliseconds(50));
    held.Reset();
  });
  start = absl::Now();
  auto pages = pool->AllocateBy(2, start + absl::Seconds(10));
  const absl::Duration waited = absl::Now() - start;
  ender.join();
  ASSERT_TRUE(pages.ok()) << pages.status();
  EXPECT_EQ(pages->size(), 2);
  EXPECT_GE(waited, absl::Milliseconds(40));
  EXPECT_LT(waited, absl::Seconds(5));
}

// KvPages: a destroyed, reset or moved-over handle gives its references
// back; shares keep a page until the last handle goes.
TEST(KvPages, HandlesReleaseTheirReferencesExactlyOnce) {
  auto be = NewCpuBackend();
  auto pool = MakePool(be.get(), 4);
  {
    KvPages a = *pool->Allocate(2);
    EXPECT_EQ(pool->free_pages(), 2);
  }
  EXPECT_EQ(pool->free_pages(), 4);

  KvPages a = *pool->Allocate(3);
  const int32_t p = a[1];
  KvPages shared = *a.Share(1, 2);  // pages 1, 2 of `a`
  EXPECT_EQ(shared.size(), 2);
  EXPECT_EQ(shared[0], p);
  EXPECT_EQ(pool->RefCount(p), 2);
  a.Reset();
  EXPECT_EQ(pool->free_pages(), 2);  // a's first page only
  EXPECT_EQ(pool->RefCount(p), 1);
  KvPages moved = std::move(shared);
  EXPECT_TRUE(shared.empty());
  moved = *pool->Allocate(1);  // assigning over a handle releases what it held
  EXPECT_EQ(pool->RefCount(p), 0);
  EXPECT_EQ(pool->free_pages(), 3);

  KvPages grown = *pool->Allocate(1);
  grown.Append(std::move(moved));
  EXPECT_EQ(grown.size(), 2);
  EXPECT_TRUE(moved.empty());
  EXPECT_EQ(pool->free_pages(), 2);
  grown.Reset();
  EXPECT_EQ(pool->free_pages(), 4);

  KvPages c = *pool->Allocate(1);
  EXPECT_EQ(c.Share(1, 1).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(c.Share(0, 2).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(pool->free_pages(), 3);
}

TEST(KvPagesDeathTest, AReleaseOfAFreePageIsABugThatStopsTheProcess) {
  auto be = NewCpuBackend();
  auto pool = MakePool(be.get(), 2);
  EXPECT_DEATH(
      {
        KvPages a = *pool->Allocate(1);
        KvPages forged = KvPages::Adopt(pool.get(), {a[0]});  // a second owner of one reference
        a.Reset();
        forged.Reset();
      },
      "released twice");
}

TEST(KvPagePool, LayerCachesDoNotOverlap) {
  auto be = NewCpuBackend();
  auto pool = MakePool(be.get(), 3);
  const size_t layer = pool->layout().page_floats() * 3;
  EXPECT_EQ(pool->v_cache(0), pool->k_cache(0) + layer);
  EXPECT_EQ(pool->k_cache(1), pool->v_cache(0) + layer);
  // Writing the last float of the last layer stays inside the allocation.
  pool->v_cache(1)[layer - 1] = 1.f;
}

TEST(KvPagePool, RejectsBadLayout) {
  auto be = NewCpuBackend();
  EXPECT_EQ(KvPagePool::Create(be.get(), KvLayout{}, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvcast
