// Host run of the tiled prefill attention (tiled_attention.h): every block's
// phases executed thread by thread, as the GPU's barriers order them, against
// the CPU backend's PagedAttention. Runs on any machine; the GPU run of the
// same code is cuda_backend_test's PagedAttentionMatchesCpu.
#include "kernels/cuda/tiled_attention.h"

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"

namespace kvcast {
namespace cuda {
namespace {

template <int D>
struct HostExec {
  std::vector<tiled::ThreadState<D>> states = std::vector<tiled::ThreadState<D>>(tiled::kThreads);
  template <typename F>
  void Phase(F&& f) {
    for (int tid = 0; tid < tiled::kThreads; ++tid) f(tid, states[tid]);
  }
};

template <int D>
void RunTiled(const tiled::Args& a, int total_queries) {
  auto sm = std::make_unique<tiled::Smem<D>>();
  for (int tile = 0; tile < tiled::MaxQueryTiles(total_queries, a.num_seqs); ++tile) {
    for (int head = 0; head < a.num_heads; ++head) {
      // Shared memory is not cleared between blocks on a GPU either.
      std::fill_n(reinterpret_cast<float*>(sm.get()), sizeof(*sm) / sizeof(float), NAN);
      HostExec<D> exec;
      tiled::RunBlock<D>(exec, a, tile, head, *sm);
    }
  }
}

std::vector<float> Random(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

struct Seq {
  int queries, context;
};

class TiledAttentionTest : public testing::TestWithParam<std::tuple<int, int, int>> {};

// A batch like the engine's: fresh prefills (one not a multiple of the tile),
// a chunk over a cached prefix, decodes (left to the per-row kernel when
// min_queries > 1), on scattered pages.
TEST_P(TiledAttentionTest, MatchesCpuBackend) {
  const auto [heads, kv_heads, hd] = GetParam();
  const int page_tokens = 16;
  const std::vector<Seq> batch = {{150, 150}, {1, 700}, {70, 300}, {64, 64}, {1, 1}, {3, 200}};
  int pages_needed = 0, rows = 0;
  for (const Seq& s : batch) pages_needed += (s.context + page_tokens - 1) / page_tokens;
  const int num_pages = pages_needed + 7;
  std::vector<int32_t> pages(num_pages);
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), std::mt19937(3));
  std::vector<int32_t> tables;
  std::vector<AttentionSeq> cpu_seqs;
  std::vector<AttentionSeqDesc> descs;
  for (const Seq& s : batch) {
    const int n = (s.context + page_tokens - 1) / page_tokens;
    descs.push_back({rows, s.queries, s.context, int32_t(tables.size())});
    for (int i = 0; i < n; ++i) tables.push_back(pages[tables.size()]);
    cpu_seqs.push_back({rows, s.queries, s.context, nullptr});
    rows += s.queries;
  }
  for (size_t b = 0; b < batch.size(); ++b) {
    cpu_seqs[b].page_table = tables.data() + descs[b].page_table_offset;
  }
  const size_t cache = size_t(num_pages) * page_tokens * kv_heads * hd;
  const auto kc = Random(cache, 13, -2, 2), vc = Random(cache, 14, -1, 1);
  const int q_stride = (heads + 2 * kv_heads) * hd;
  const auto q = Random(size_t(rows) * q_stride, 15, -2, 2);
  const float scale = 1.f / std::sqrt(float(hd));

  std::vector<float> want(size_t(rows) * heads * hd);
  auto cpu = NewCpuBackend();
  cpu->PagedAttention(q.data(), q_stride, cpu_seqs.data(), int(batch.size()),
                      AttentionShape{heads, kv_heads, hd, page_tokens, scale}, kc.data(),
                      vc.data(), want.data());

  for (int min_queries : {1, 32}) {
    SCOPED_TRACE(min_queries);
    std::vector<float> got(want.size(), -7.f);
    tiled::Args a;
    a.q = q.data();
    a.q_stride = q_stride;
    a.k_cache = kc.data();
    a.v_cache = vc.data();
    a.page_tables = tables.data();
    a.seqs = descs.data();
    a.num_seqs = int(descs.size());
    a.num_heads = heads;
    a.num_kv_heads = kv_heads;
    a.page_tokens = page_tokens;
    a.scale = scale;
    a.out = got.data();
    a.min_queries = min_queries;
    hd == 64 ? RunTiled<64>(a, rows) : RunTiled<128>(a, rows);
    double worst = 0;
    for (size_t b = 0; b < batch.size(); ++b) {
      const bool tiled = batch[b].queries >= min_queries;
      for (int r = descs[b].query_offset; r < descs[b].query_offset + batch[b].queries; ++r) {
        for (size_t i = size_t(r) * heads * hd; i < size_t(r + 1) * heads * hd; ++i) {
          if (!tiled) {
            ASSERT_EQ(got[i], -7.f) << "row " << r << " belongs to the per-row kernel";
            continue;
          }
          ASSERT_TRUE(std::isfinite(got[i])) << "row " << r;
          worst = std::max(worst, double(std::abs(got[i] - want[i])));
        }
      }
    }
    EXPECT_LT(worst, 2e-6) << "worst |tiled - cpu| over the tiled rows";
    std::printf("min_queries %d: worst |tiled - cpu| %.3g\n", min_queries, worst);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, TiledAttentionTest,
                         testing::Values(std::make_tuple(8, 2, 64), std::make_tuple(14, 2, 64),
                                         std::make_tuple(4, 4, 128), std::make_tuple(2, 1, 128)));

TEST(TiledAttention, SupportsAndTileCount) {
  EXPECT_TRUE(tiled::Supports(64));
  EXPECT_TRUE(tiled::Supports(128));
  EXPECT_FALSE(tiled::Supports(96));
  EXPECT_FALSE(tiled::Supports(256));
  // 150 + 1 + 70 queries: 3 + 1 + 2 tiles <= the bound.
  EXPECT_GE(tiled::MaxQueryTiles(221, 3), 6);
}

}  // namespace
}  // namespace cuda
}  // namespace kvcast
