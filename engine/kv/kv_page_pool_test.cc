#include "engine/kv/kv_page_pool.h"

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
  EXPECT_EQ(pool->free_pages(), 1);
  auto b = pool->Allocate(2);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(pool->free_pages(), 1);  // nothing taken by the failed call
  EXPECT_TRUE(pool->ReleaseAll(*a).ok());
  EXPECT_EQ(pool->free_pages(), 4);
}

TEST(KvPagePool, SharedPageIsFreedAfterLastReferenceAndOnlyOnce) {
  auto be = NewCpuBackend();
  auto pool = MakePool(be.get(), 2);
  int32_t p = (*pool->Allocate(1))[0];
  ASSERT_TRUE(pool->AddRef(p).ok());
  EXPECT_EQ(pool->RefCount(p), 2);
  ASSERT_TRUE(pool->Release(p).ok());
  EXPECT_EQ(pool->free_pages(), 1);
  ASSERT_TRUE(pool->Release(p).ok());
  EXPECT_EQ(pool->free_pages(), 2);
  EXPECT_EQ(pool->Release(p).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(pool->AddRef(p).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(pool->Release(7).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(pool->free_pages(), 2);
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
