// Checks each CPU op against a direct transcription of its formula.
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <tuple>
#include <set>
#include <vector>

#include "common/dtype.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/kv_codec.h"

namespace kvcast {
namespace {

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

TEST(CpuBackend, LinearMatchesNaiveForGemvAndGemm) {
  auto be = NewCpuBackend();
  const int k = 37, n = 23;
  for (int m : {1, 5}) {
    auto x = Random(m * k, 1), w = Random(n * k, 2), b = Random(n, 3);
    std::vector<float> y(m * n);
    auto weight = be->LoadWeight(WeightType::kF32, WeightKind::kMatrix, w.data(), n, k);
    ASSERT_TRUE(weight.ok());
    be->Linear(x.data(), m, k, *weight, n, b.data(), y.data());
    for (int r = 0; r < m; ++r) {
      for (int j = 0; j < n; ++j) {
        double ref = b[j];
        for (int i = 0; i < k; ++i) ref += double(x[r * k + i]) * w[j * k + i];
        EXPECT_NEAR(y[r * n + j], ref, 1e-5) << "m=" << m;
      }
    }
  }
}

// Q8 weights: matrices whose rows are whole 32-blocks become Q8 (the LM
// head, embeddings and projections of real models), others stay float32;
// Linear and Embedding stay within the Q8 tolerance of the float32 values.
TEST(CpuBackend, Q8WeightsLinearAndEmbedding) {
  auto be = NewCpuBackend(CpuWeights::kQ8);
  const int k = 96, n = 40, m = 3;
  auto x = Random(m * k, 11), w = Random(n * k, 12), b = Random(n, 13);
  auto weight = be->LoadWeight(WeightType::kF32, WeightKind::kMatrix, w.data(), n, k);
  ASSERT_TRUE(weight.ok());
  EXPECT_EQ(weight->type(), WeightType::kQ8);
  EXPECT_EQ(weight->rows(), size_t(n));
  std::vector<float> y(m * n);
  be->Linear(x.data(), m, k, *weight, n, b.data(), y.data());
  double err = 0, norm = 0;
  for (int r = 0; r < m; ++r) {
    for (int j = 0; j < n; ++j) {
      double ref = 0;
      for (int i = 0; i < k; ++i) ref += double(x[r * k + i]) * w[j * k + i];
      err += (y[r * n + j] - b[j] - ref) * (y[r * n + j] - b[j] - ref);
      norm += ref * ref;
    }
  }
  EXPECT_LT(std::sqrt(err / norm), 0.02);
  const int32_t ids[] = {39, 0, 7};
  std::vector<float> emb(3 * k);
  be->Embedding(ids, 3, *weight, k, emb.data());
  for (int t = 0; t < 3; ++t) {
    for (int i = 0; i < k; ++i) {
      ASSERT_NEAR(emb[t * k + i], w[ids[t] * k + i], 1.0 / 254 + 1e-6) << t << " " << i;
    }
  }
  auto odd = be->LoadWeight(WeightType::kF32, WeightKind::kMatrix, w.data(), 2 * n, k / 2);
  ASSERT_TRUE(odd.ok());
  EXPECT_EQ(odd->type(), WeightType::kF32);  // Rows of 48: not whole blocks.
  auto vec = be->LoadWeight(WeightType::kF32, WeightKind::kVector, w.data(), 1, 64);
  EXPECT_EQ(vec->type(), WeightType::kF32);
  EXPECT_EQ(NewBackend("cpu-f32").value()->name(), "cpu-f32");
  EXPECT_EQ(NewBackend("cpu").value()->name(), "cpu");
}

// BF16 weights: bf16 values are kept exactly; Linear equals float32 math up
// to summation order; embeddings are exact.
TEST(CpuBackend, Bf16WeightsLinearAndEmbedding) {
  auto be = NewCpuBackend(CpuWeights::kBF16);
  EXPECT_EQ(be->name(), "cpu-bf16");
  const int k = 48, n = 20, m = 2;
  std::vector<uint16_t> w(n * k);
  std::vector<float> wf(n * k);
  auto r = Random(n * k, 21), x = Random(m * k, 22);
  for (int i = 0; i < n * k; ++i) wf[i] = BFloat16ToFloat(w[i] = FloatToBFloat16(r[i]));
  auto weight = be->LoadWeight(WeightType::kBF16, WeightKind::kMatrix, w.data(), n, k);
  ASSERT_TRUE(weight.ok());
  EXPECT_EQ(weight->type(), WeightType::kBF16);
  std::vector<float> y(m * n);
  be->Linear(x.data(), m, k, *weight, n, nullptr, y.data());
  for (int row = 0; row < m; ++row) {
    for (int j = 0; j < n; ++j) {
      double ref = 0;
      for (int i = 0; i < k; ++i) ref += double(x[row * k + i]) * wf[j * k + i];
      EXPECT_NEAR(y[row * n + j], ref, 1e-5);
    }
  }
  const int32_t ids[] = {19, 3};
  std::vector<float> emb(2 * k);
  be->Embedding(ids, 2, *weight, k, emb.data());
  EXPECT_EQ(0, std::memcmp(emb.data(), &wf[19 * k], k * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(emb.data() + k, &wf[3 * k], k * sizeof(float)));
}

TEST(CpuBackend, RmsNormAndSwiGlu) {
  auto be = NewCpuBackend();
  auto x = Random(2 * 8, 4), w = Random(8, 5);
  std::vector<float> y(16);
  be->RmsNorm(x.data(), w.data(), 2, 8, 1e-5f, y.data());
  for (int r = 0; r < 2; ++r) {
    double ss = 0;
    for (int i = 0; i < 8; ++i) ss += x[r * 8 + i] * x[r * 8 + i];
    double inv = 1 / std::sqrt(ss / 8 + 1e-5);
    for (int i = 0; i < 8; ++i) EXPECT_NEAR(y[r * 8 + i], x[r * 8 + i] * inv * w[i], 1e-5);
  }
  auto gu = Random(2 * 2 * 4, 6);
  std::vector<float> o(8);
  be->SwiGlu(gu.data(), 2, 4, o.data());
  for (int r = 0; r < 2; ++r) {
    for (int i = 0; i < 4; ++i) {
      float g = gu[r * 8 + i], u = gu[r * 8 + 4 + i];
      EXPECT_NEAR(o[r * 4 + i], g / (1 + std::exp(-g)) * u, 1e-6);
    }
  }
}

TEST(CpuBackend, RopeRotatesPairsHalfApart) {
  auto be = NewCpuBackend();
  const int hd = 8, heads = 2, stride = 20;
  auto x = Random(2 * stride, 7);
  auto orig = x;
  std::vector<float> inv_freq = {1.f, 0.5f, 0.25f, 0.125f};
  std::vector<int32_t> pos = {3, 11};
  be->Rope(x.data(), 2, stride, heads, hd, pos.data(), inv_freq.data());
  for (int t = 0; t < 2; ++t) {
    for (int h = 0; h < heads; ++h) {
      for (int i = 0; i < hd / 2; ++i) {
        double a = orig[t * stride + h * hd + i], b = orig[t * stride + h * hd + i + hd / 2];
        double th = pos[t] * inv_freq[i];
        EXPECT_NEAR(x[t * stride + h * hd + i], a * std::cos(th) - b * std::sin(th), 1e-5);
        EXPECT_NEAR(x[t * stride + h * hd + i + hd / 2], b * std::cos(th) + a * std::sin(th), 1e-5);
      }
    }
    // Elements past the heads (stride padding) are untouched.
    for (int i = heads * hd; i < stride; ++i) EXPECT_EQ(x[t * stride + i], orig[t * stride + i]);
  }
}

// Paged attention with scattered pages must equal dense causal attention.
// head_dim 8 and 64 take the AVX2 path (where the CPU has it), 12 the
// portable one; a 300-token context runs on the OpenMP team and exercises the
// vectorized exp and its scalar tail.
TEST(CpuBackend, PagedAttentionMatchesDenseCausalAttention) {
  auto be = NewCpuBackend();
  for (auto [hd, ctx, nq] : {std::tuple{8, 11, 3}, {12, 11, 3}, {64, 300, 5}}) {
    SCOPED_TRACE(hd);
    AttentionShape s{/*num_heads=*/4, /*num_kv_heads=*/2, /*head_dim=*/hd,
                     /*page_tokens=*/4, /*scale=*/1.f / std::sqrt(float(hd))};
    const int row = s.num_kv_heads * hd;
    const int used = (ctx + 3) / 4, num_pages = used + 5;
    auto k = Random(ctx * row, 8), v = Random(ctx * row, 9);
    auto q = Random(nq * s.num_heads * hd, 10);
    for (float& x : q) x *= 3;  // peaked softmax
    std::vector<int32_t> pages(used);
    for (int i = 0; i < used; ++i) pages[i] = (i * 7 + 3) % num_pages;  // scattered
    std::vector<float> kc(num_pages * s.page_tokens * row, NAN), vc(kc.size(), NAN);
    std::vector<int32_t> slots(ctx);
    for (int t = 0; t < ctx; ++t) slots[t] = pages[t / 4] * 4 + t % 4;
    be->WriteKv(k.data(), v.data(), ctx, row, slots.data(), s.num_kv_heads, hd,
                KvStorage::kF32, kc.data(), vc.data());
    AttentionSeq seq{0, nq, ctx, pages.data()};
    std::vector<float> out(nq * s.num_heads * hd);
    be->PagedAttention(q.data(), s.num_heads * hd, &seq, 1, s, kc.data(), vc.data(), out.data());
    for (int j = 0; j < nq; ++j) {
      int visible = ctx - nq + j + 1;
      for (int h = 0; h < s.num_heads; ++h) {
        int kvh = h / 2;
        std::vector<double> p(visible);
        double mx = -1e30, den = 0;
        for (int t = 0; t < visible; ++t) {
          double dot = 0;
          for (int d = 0; d < hd; ++d) dot += q[(j * 4 + h) * hd + d] * k[t * row + kvh * hd + d];
          p[t] = dot * s.scale;
          mx = std::max(mx, p[t]);
        }
        for (double& x : p) den += (x = std::exp(x - mx));
        for (int d = 0; d < hd; ++d) {
          double ref = 0;
          for (int t = 0; t < visible; ++t) ref += p[t] / den * v[t * row + kvh * hd + d];
          ASSERT_NEAR(out[(j * 4 + h) * hd + d], ref, 2e-5) << "q" << j << " h" << h;
        }
      }
    }
  }
}

TEST(CpuBackend, WriteKvKeepsFp16ValuesWhenAsked) {
  auto be = NewCpuBackend();
  ASSERT_TRUE(be->SupportsHalfKvPages());
  const int nkv = 2, hd = 8, row = nkv * hd, stride = 3 * row;
  std::vector<float> kv(2 * stride);
  for (size_t i = 0; i < kv.size(); ++i) kv[i] = 0.1f * float(i) + 1e-3f;
  kv[1] = 70000.f;   // beyond fp16: infinity
  kv[2] = 1e-8f;     // below fp16's smallest subnormal: zero
  const int32_t slots[] = {2, 0};
  for (KvStorage storage : {KvStorage::kF32, KvStorage::kF32Fp16Values, KvStorage::kF16}) {
    SCOPED_TRACE(int(storage));
    std::vector<float> kc(3 * row, -7.f), vc(3 * row, -7.f);
    std::vector<uint16_t> kh(3 * row, 0xffff), vh(3 * row, 0xffff);
    const bool half = storage == KvStorage::kF16;
    be->WriteKv(kv.data(), kv.data() + row, 2, stride, slots, nkv, hd, storage,
                half ? static_cast<void*>(kh.data()) : kc.data(),
                half ? static_cast<void*>(vh.data()) : vc.data());
    auto at = [&](const std::vector<float>& f, const std::vector<uint16_t>& h, int i) {
      return half ? HalfToFloat(h[i]) : f[i];
    };
    for (int t = 0; t < 2; ++t) {
      for (int i = 0; i < row; ++i) {
        const float k = kv[t * stride + i], v = kv[t * stride + row + i];
        const bool exact = storage == KvStorage::kF32;
        EXPECT_EQ(at(kc, kh, slots[t] * row + i), exact ? k : HalfToFloat(FloatToHalf(k)));
        EXPECT_EQ(at(vc, vh, slots[t] * row + i), exact ? v : HalfToFloat(FloatToHalf(v)));
      }
    }
    EXPECT_TRUE(half ? kh[row] == 0xffff : kc[row] == -7.f);  // slot 1 untouched
    if (storage != KvStorage::kF32) {
      EXPECT_TRUE(std::isinf(at(kc, kh, 2 * row + 1)));
      EXPECT_EQ(at(kc, kh, 2 * row + 2), 0.f);
      EXPECT_NE(at(kc, kh, 2 * row + 3), kv[3]);  // 0.301 is not an fp16 value
    }
  }
}

// fp16 pages give the attention of float32 pages holding the same values,
// and cross the transfer ops as the same bytes.
TEST(CpuBackend, HalfPagesAttendAndTransferLikeFloatPages) {
  auto be = NewCpuBackend();
  const int hd = 64, nkv = 2, nh = 4, ctx = 37, row = nkv * hd, pages = 4, page_tokens = 16;
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> kv(2 * ctx * row), q(nh * hd);
  for (float& x : kv) x = d(rng);
  for (float& x : q) x = 3 * d(rng);
  std::vector<int32_t> slots(ctx), table = {3, 0, 2};
  for (int t = 0; t < ctx; ++t) slots[t] = table[t / page_tokens] * page_tokens + t % page_tokens;
  const size_t values = size_t(pages) * page_tokens * row;
  std::vector<float> kf(values), vf(values);
  std::vector<uint16_t> kh(values), vh(values);
  be->WriteKv(kv.data(), kv.data() + row, ctx, 2 * row, slots.data(), nkv, hd,
              KvStorage::kF32Fp16Values, kf.data(), vf.data());
  be->WriteKv(kv.data(), kv.data() + row, ctx, 2 * row, slots.data(), nkv, hd, KvStorage::kF16,
              kh.data(), vh.data());
  AttentionSeq seq{0, 1, ctx, table.data()};
  AttentionShape s{nh, nkv, hd, page_tokens, 0.125f, KvStorage::kF32Fp16Values};
  std::vector<float> want(nh * hd), got(nh * hd);
  be->PagedAttention(q.data(), nh * hd, &seq, 1, s, kf.data(), vf.data(), want.data());
  s.storage = KvStorage::kF16;
  be->PagedAttention(q.data(), nh * hd, &seq, 1, s, kh.data(), vh.data(), got.data());
  EXPECT_EQ(got, want);
  // Every format from fp16 pages equals the same format from float pages,
  // and decoding into fp16 pages gives the fp16 of the float decode.
  for (KvFormat f : {KvFormat::kFp16, KvFormat::kInt8, KvFormat::kInt4}) {
    SCOPED_TRACE(int(f));
    const size_t row_bytes = KvRowBytes(f, nkv, hd, hd);
    std::vector<uint8_t> from_f(ctx * row_bytes), from_h(ctx * row_bytes);
    be->EncodeKv(f, hd, KvArrays{kf.data(), 1, values, nkv, hd, KvStorage::kF32Fp16Values},
                 slots.data(), ctx, from_f.data(), row_bytes);
    be->EncodeKv(f, hd, KvArrays{kh.data(), 1, values, nkv, hd, KvStorage::kF16}, slots.data(),
                 ctx, from_h.data(), row_bytes);
    EXPECT_EQ(from_h, from_f);
    std::vector<float> back_f(values);
    std::vector<uint16_t> back_h(values);
    be->DecodeKv(f, hd, from_f.data(), row_bytes, slots.data(), ctx,
                 KvArrays{back_f.data(), 1, values, nkv, hd, KvStorage::kF32});
    be->DecodeKv(f, hd, from_f.data(), row_bytes, slots.data(), ctx,
                 KvArrays{back_h.data(), 1, values, nkv, hd, KvStorage::kF16});
    for (int t = 0; t < ctx; ++t) {
      for (int i = 0; i < row; ++i) {
        const size_t at = size_t(slots[t]) * row + i;
        ASSERT_EQ(back_h[at], FloatToHalf(back_f[at])) << "token " << t << " value " << i;
      }
    }
  }
}

TEST(CpuBackend, LoadWeightConvertsHalfTypes) {
  auto be = NewCpuBackend();
  const uint16_t bf16[] = {0x3f80, 0xc000};  // 1, -2
  const uint16_t f16[] = {0x3c00, 0x3800};   // 1, 0.5
  auto a = be->LoadWeight(WeightType::kBF16, WeightKind::kMatrix, bf16, 1, 2);
  auto b = be->LoadWeight(WeightType::kF16, WeightKind::kVector, f16, 1, 2);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->type(), WeightType::kF32);
  EXPECT_EQ(a->f32()[1], -2.f);
  EXPECT_EQ(b->f32()[1], 0.5f);
}

TEST(CpuBackend, AddRmsNormIsTheResidualAddThenTheNorm) {
  auto be = NewCpuBackend();
  auto x = Random(3 * 8, 7), y = Random(3 * 8, 8), w = Random(8, 9);
  std::vector<float> sum(x.size()), want(x.size());
  for (size_t i = 0; i < x.size(); ++i) sum[i] = x[i] + y[i];
  be->RmsNorm(sum.data(), w.data(), 3, 8, 1e-5f, want.data());
  be->AddRmsNorm(x.data(), y.data(), w.data(), 3, 8, 1e-5f, y.data());  // out aliases y
  EXPECT_EQ(x, sum);
  EXPECT_EQ(y, want);
}

TEST(CpuBackend, GatherRowsAndEmbedding) {
  auto be = NewCpuBackend();
  auto table = Random(5 * 3, 10);
  const int32_t rows[] = {4, 0, 4};
  std::vector<float> got(9), emb(9);
  be->GatherRows(table.data(), rows, 3, 3, got.data());
  auto weight = be->LoadWeight(WeightType::kF32, WeightKind::kMatrix, table.data(), 5, 3);
  ASSERT_TRUE(weight.ok());
  be->Embedding(rows, 3, *weight, 3, emb.data());
  for (int r = 0; r < 3; ++r) {
    for (int i = 0; i < 3; ++i) EXPECT_EQ(got[r * 3 + i], table[rows[r] * 3 + i]);
  }
  EXPECT_EQ(got, emb);
}

TEST(CpuBackend, SampleTokensPicksFromEachRequestsRow) {
  auto be = NewCpuBackend();
  const int vocab = 50;
  std::vector<float> logits(3 * vocab, 0.f);
  logits[0 * vocab + 4] = 9.f;
  logits[1 * vocab + 17] = 9.f;
  logits[2 * vocab + 33] = 9.f;
  // Greedy requests out of row order, a repeated row, and a stochastic one
  // at a tiny temperature, which must land on its row's peak.
  const std::vector<TokenSampling> params = {
      {2, 0.f, 0, 1.f, 0.0}, {0, 0.f, 0, 1.f, 0.0}, {2, 0.f, 0, 1.f, 0.0},
      {1, 0.01f, 5, 0.9f, 0.99}};
  std::vector<int32_t> tokens(params.size(), -7);
  ASSERT_TRUE(be->SampleTokens(logits.data(), vocab, params.data(), int(params.size()),
                               tokens.data())
                  .ok());
  EXPECT_EQ(tokens, (std::vector<int32_t>{33, 4, 33, 17}));
  // A draw near 1 over two equal logits takes the second candidate.
  std::vector<float> two = {1.f, 1.f};
  TokenSampling last{0, 1.f, 0, 1.f, 0.75};
  int32_t token = -1;
  ASSERT_TRUE(be->SampleTokens(two.data(), 2, &last, 1, &token).ok());
  EXPECT_EQ(token, 1);
}

// Constrained rows: only the tokens of a row's mask may be picked, greedy
// or sampled, whatever the logits prefer; rows without a mask are free.
TEST(CpuBackend, SampleTokensKeepToEachRowsMask) {
  auto be = NewCpuBackend();
  ASSERT_TRUE(be->SamplesWithTokenMasks());
  const int vocab = 70;
  std::vector<float> logits(vocab, 0.f);
  logits[4] = 9.f;   // the model's favourite, refused
  logits[40] = 2.f;  // the best allowed
  logits[65] = 1.f;  // allowed, in the mask's third word
  logits[41] = std::nanf("");  // allowed, but NaN counts as -inf
  std::vector<uint32_t> mask(3, 0u);
  for (int t : {40, 41, 65, 7}) mask[size_t(t) >> 5] |= 1u << (t & 31);
  TokenSampling greedy{0, 0.f, 0, 1.f, 0.0};
  greedy.allowed = mask.data();
  std::vector<TokenSampling> params = {greedy, {0, 0.f, 0, 1.f, 0.0}};
  for (int i = 0; i < 40; ++i) {
    TokenSampling draw{0, 1.5f, 0, 1.f, (i + 0.5) / 40};
    draw.allowed = mask.data();
    params.push_back(draw);
  }
  std::vector<int32_t> tokens(params.size(), -1);
  ASSERT_TRUE(be->SampleTokens(logits.data(), vocab, params.data(), int(params.size()), tokens.data()).ok());
  EXPECT_EQ(tokens[0], 40);
  EXPECT_EQ(tokens[1], 4);
  std::set<int32_t> sampled(tokens.begin() + 2, tokens.end());
  EXPECT_EQ(sampled, (std::set<int32_t>{7, 40, 65}));
}

TEST(CpuBackend, AttentionTakesAnyGroupedShape) {
  auto be = NewCpuBackend();
  EXPECT_TRUE(be->SupportsAttention(4, 2, 16).ok());
  EXPECT_TRUE(be->SupportsAttention(14, 2, 72).ok());
  EXPECT_EQ(be->SupportsAttention(6, 4, 64).code(), absl::StatusCode::kInvalidArgument);
}

TEST(CpuBackend, NewBackendByName) {
  auto cpu = NewBackend("cpu");
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ((*cpu)->name(), "cpu");
  auto none = NewBackend("tpu");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("cpu"), std::string_view::npos)
      << none.status().message();
}

}  // namespace
}  // namespace kvcast
