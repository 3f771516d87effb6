#include "tools/kvquality/query_energy.h"

#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"

namespace kvcast::kvquality {
namespace {

// Queries on a measured pool's layer add their squared values up per KV
// head (its query heads summed) and channel, averaged over the queries;
// attention elsewhere, or after Measure(nullptr), adds nothing.
TEST(QueryEnergyTest, SumsEachKvHeadsQueriesPerChannel) {
  auto cpu = NewCpuBackend();
  QueryEnergyBackend energy(cpu.get());
  const KvLayout layout{2, 2, 16, 16};
  auto pool = KvPagePool::Create(cpu.get(), layout, 2);
  ASSERT_TRUE(pool.ok()) << pool.status();
  auto other = KvPagePool::Create(cpu.get(), layout, 2);
  ASSERT_TRUE(other.ok());
  const AttentionShape shape{4, 2, 16, 16, 0.25f, KvStorage::kF32};  // 2 query heads per KV head
  const int32_t table[] = {0};
  const AttentionSeq seq{0, 3, 1, table};
  // Query i, head h, channel c: (i + 1) * (h + 1) + c / 16.
  std::vector<float> q(3 * 4 * 16), out(q.size());
  for (int i = 0; i < 3; ++i) {
    for (int h = 0; h < 4; ++h) {
      for (int c = 0; c < 16; ++c) q[(i * 4 + h) * 16 + c] = float((i + 1) * (h + 1)) + c / 16.f;
    }
  }
  energy.Measure(pool->get());
  energy.PagedAttention(q.data(), 64, &seq, 1, shape, (*pool)->k_pages(1), (*pool)->v_pages(1),
                        out.data());
  energy.PagedAttention(q.data(), 64, &seq, 1, shape, (*other)->k_pages(0), (*other)->v_pages(0),
                        out.data());  // another pool's: not counted
  energy.Measure(nullptr);
  energy.PagedAttention(q.data(), 64, &seq, 1, shape, (*pool)->k_pages(1), (*pool)->v_pages(1),
                        out.data());  // not measuring
  const std::vector<double> e = energy.MeanEnergy();
  ASSERT_EQ(e.size(), 2u * 2 * 16);
  for (int kv = 0; kv < 2; ++kv) {
    for (int c = 0; c < 16; ++c) {
      double want = 0;
      for (int i = 0; i < 3; ++i) {
        for (int h = 2 * kv; h < 2 * kv + 2; ++h) {
          const double x = double(float((i + 1) * (h + 1)) + c / 16.f);
          want += x * x;
        }
      }
      EXPECT_NEAR(e[size_t(2 * 16 + kv * 16 + c)], want / 3, 1e-9 * want) << kv << " " << c;
      EXPECT_EQ(e[size_t(kv * 16 + c)], 0.0);  // layer 0: no queries
    }
  }
  // Keys written into the measured pool's layer 0: rows of stride 40, key
  // value i * 100 + channel index (v ignored), two tokens.
  energy.Measure(pool->get());
  std::vector<float> k(2 * 40), v(2 * 40, 0.f);
  for (int t = 0; t < 2; ++t) {
    for (int i = 0; i < 32; ++i) k[t * 40 + i] = float(t * 100 + i);
  }
  const int32_t slots[] = {0, 1};
  energy.WriteKv(k.data(), v.data(), 2, 40, slots, 2, 16, KvStorage::kF32, (*pool)->k_pages(0),
                 (*pool)->v_pages(0));
  const std::vector<double> keys = energy.MeanKeyEnergy();
  ASSERT_EQ(keys.size(), 2u * 2 * 16);
  for (int i = 0; i < 32; ++i) {
    EXPECT_DOUBLE_EQ(keys[size_t(i)], (double(i) * i + double(100 + i) * (100 + i)) / 2) << i;
    EXPECT_EQ(keys[size_t(32 + i)], 0.0);
  }
}

}  // namespace
}  // namespace kvcast::kvquality
