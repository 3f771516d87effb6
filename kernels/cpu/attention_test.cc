// The CPU attention kernels against a dense double-precision reference:
// the tiled prefill kernel (both ISAs) and the row kernel, fp16 and float32
// pages, GQA groups of 1, 3 and 4, head_dim 8, 64 and 128, prompts that
// start after a cached prefix, tiles that cross the causal diagonal and
// several key blocks, batches mixing prefill and decode sequences, and
// decode rows split over keys.
#include "kernels/cpu/attention.h"

#include <cmath>
#include <random>
#include <vector>

#include "common/dtype.h"
#include "gtest/gtest.h"

namespace kvcast {
namespace {

struct Case {
  int heads, kv_heads, hd;
  std::vector<std::pair<int, int>> seqs;  // (num_queries, context_len)
};

class CpuAttentionTest : public testing::TestWithParam<std::tuple<KvStorage, bool>> {
 protected:
  void TearDown() override { CpuAttentionAvx2OnlyForTesting(false); }
};

// Runs `c` through the kernel `kernel` and checks every output against the
// reference; returns the outputs.
std::vector<float> RunAndCheck(const Case& c, KvStorage storage, CpuAttentionKernel kernel,
                               double tol) {
  const int page_tokens = 16, hd = c.hd, group = c.heads / c.kv_heads;
  const int row = c.kv_heads * hd;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0, 1);
  int total_q = 0, total_pages = 0;
  for (auto [nq, ctx] : c.seqs) {
    total_q += nq;
    total_pages += (ctx + page_tokens - 1) / page_tokens;
  }
  const int num_pages = total_pages + 7;
  std::vector<float> kf(size_t(num_pages) * page_tokens * row), vf(kf.size());
  for (float& x : kf) x = nd(rng);
  for (float& x : vf) x = nd(rng);
  std::vector<uint16_t> kh(kf.size()), vh(vf.size());
  for (size_t i = 0; i < kf.size(); ++i) {
    kh[i] = FloatToHalf(kf[i]);
    vh[i] = FloatToHalf(vf[i]);
    if (storage == KvStorage::kF16) {  // the reference sees what the pages hold
      kf[i] = HalfToFloat(kh[i]);
      vf[i] = HalfToFloat(vh[i]);
    }
  }
  std::vector<float> q(size_t(total_q) * c.heads * hd);
  for (float& x : q) x = 2 * nd(rng);  // peaked softmax
  std::vector<std::vector<int32_t>> tables;
  std::vector<AttentionSeq> seqs;
  int offset = 0, next_page = 0;
  for (auto [nq, ctx] : c.seqs) {
    std::vector<int32_t> t((ctx + page_tokens - 1) / page_tokens);
    for (int32_t& p : t) p = (next_page++ * 5 + 3) % num_pages;  // scattered
    tables.push_back(std::move(t));
    seqs.push_back({offset, nq, ctx, nullptr});
    offset += nq;
  }
  for (size_t b = 0; b < seqs.size(); ++b) seqs[b].page_table = tables[b].data();
  AttentionShape s{c.heads, c.kv_heads, hd, page_tokens, 1.f / std::sqrt(float(hd)), storage};
  std::vector<float> out(q.size(), NAN);
  const void* kc = storage == KvStorage::kF16 ? static_cast<const void*>(kh.data()) : kf.data();
  const void* vc = storage == KvStorage::kF16 ? static_cast<const void*>(vh.data()) : vf.data();
  CpuPagedAttention(q.data(), c.heads * hd, seqs.data(), int(seqs.size()), s, kc, vc, out.data(),
                    true, kernel);
  double worst = 0;
  for (size_t b = 0; b < seqs.size(); ++b) {
    const AttentionSeq& seq = seqs[b];
    auto key = [&](int t, int g) {
      const int slot = tables[b][t / page_tokens] * page_tokens + t % page_tokens;
      return size_t(slot) * row + size_t(g) * hd;
    };
    for (int j = 0; j < seq.num_queries; ++j) {
      const int visible = seq.context_len - seq.num_queries + j + 1;
      for (int h = 0; h < c.heads; ++h) {
        const float* qh = q.data() + (size_t(seq.query_offset + j) * c.heads + h) * hd;
        std::vector<double> p(visible);
        double mx = -1e300, den = 0;
        for (int t = 0; t < visible; ++t) {
          double dot = 0;
          for (int d = 0; d < hd; ++d) dot += double(qh[d]) * kf[key(t, h / group) + d];
          p[t] = dot * s.scale;
          mx = std::max(mx, p[t]);
        }
        for (double& x : p) den += (x = std::exp(x - mx));
        for (int d = 0; d < hd; ++d) {
          double ref = 0;
          for (int t = 0; t < visible; ++t) ref += p[t] / den * vf[key(t, h / group) + d];
          const float got = out[(size_t(seq.query_offset + j) * c.heads + h) * hd + d];
          worst = std::max(worst, std::abs(got - ref));
          if (!(std::abs(got - ref) <= tol)) {
            ADD_FAILURE() << "seq " << b << " row " << j << " head " << h << " dim " << d
                          << ": " << got << " vs " << ref;
            return out;
          }
        }
      }
    }
  }
  return out;
}

TEST_P(CpuAttentionTest, TiledAndRowKernelsMatchDenseCausalAttention) {
  const auto [storage, avx2_only] = GetParam();
  if (!CpuAttentionVectorized()) GTEST_SKIP() << "no AVX2 on this CPU";
  CpuAttentionAvx2OnlyForTesting(avx2_only);
  const std::vector<Case> cases = {
      // SmolLM2's shape: 9 heads over 3 KV heads, a 300-token prompt whose
      // 100 last rows are computed now (a chunk after a cached prefix), and
      // a decode sequence in the same batch.
      {9, 3, 64, {{100, 300}, {1, 77}}},
      // A whole 150-token prompt, MHA (group 1), head_dim 128.
      {4, 4, 128, {{150, 150}}},
      // Llama's group of 4, head_dim 8 (one AVX2 vector), 2 prompts.
      {8, 2, 8, {{37, 37}, {16, 200}}},
      // Decode rows at long contexts, alone in the batch: split over keys
      // and merged (one KV head: split whatever the thread count).
      {2, 1, 64, {{1, 3000}}},
      {9, 3, 64, {{1, 2100}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << c.heads << " heads / " << c.kv_heads << ", hd " << c.hd);
    auto tiled = RunAndCheck(c, storage, CpuAttentionKernel::kTiled, 2e-5);
    auto rows = RunAndCheck(c, storage, CpuAttentionKernel::kRows, 2e-5);
    double diff = 0;
    for (size_t i = 0; i < tiled.size(); ++i) diff = std::max(diff, double(std::abs(tiled[i] - rows[i])));
    EXPECT_LT(diff, 2e-5);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Storage, CpuAttentionTest,
    testing::Combine(testing::Values(KvStorage::kF16, KvStorage::kF32), testing::Bool()),
    [](const auto& info) {
      return std::string(std::get<0>(info.param) == KvStorage::kF16 ? "fp16" : "f32") +
             (std::get<1>(info.param) ? "_avx2" : "_native");
    });

}  // namespace
}  // namespace kvcast
