// Every op of the CUDA backend against the CPU backend, at stated
// tolerances. SKIPPED (not passed) where no usable CUDA device exists.
//
// Tolerances:
//  - exact: gathers, KV writes, the KV codecs (bit-identical wire bytes
//    and decoded floats), greedy token picks;
//  - GEMMs: inputs are made exactly representable in the weight's 16-bit
//    type, so only float32 accumulation order differs: 1e-5 x sum|x*w|;
//  - norms, RoPE, SwiGLU, attention: float32 with other summation orders,
//    libm vs CUDA math: 2e-5 relative (attention 1e-4 absolute on O(1)
//    values).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"

namespace kvcast {
namespace {

std::vector<float> Random(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Rounds to the 16-bit type so both backends see the same values.
std::vector<float> Representable(std::vector<float> v, WeightType t) {
  for (float& x : v) {
    x = t == WeightType::kBF16 ? BFloat16ToFloat(FloatToBFloat16(x)) : HalfToFloat(FloatToHalf(x));
  }
  return v;
}

std::vector<uint16_t> ToHalf(const std::vector<float>& v, WeightType t) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    h[i] = t == WeightType::kBF16 ? FloatToBFloat16(v[i]) : FloatToHalf(v[i]);
  }
  return h;
}

class CudaBackendTest : public testing::Test {
 protected:
  void SetUp() override {
    auto gpu = NewBackend("cuda");
    if (!gpu.ok()) GTEST_SKIP() << gpu.status().ToString();
    gpu_ = *std::move(gpu);
    cpu_ = NewCpuBackend();
  }
  void TearDown() override {
    if (gpu_) {
      EXPECT_TRUE(gpu_->Synchronize().ok());
    }
  }

  template <typename T>
  std::unique_ptr<DeviceBuffer> Up(const std::vector<T>& v) {
    auto b = *gpu_->Allocate(std::max<size_t>(v.size(), 1) * sizeof(T));
    gpu_->CopyToDevice(b->data(), v.data(), v.size() * sizeof(T));
    return b;
  }
  template <typename T = float>
  std::vector<T> Down(const DeviceBuffer& b, size_t n) {
    std::vector<T> v(n);
    gpu_->CopyToHost(v.data(), b.data(), n * sizeof(T));
    EXPECT_TRUE(gpu_->Synchronize().ok());
    return v;
  }
  static float* F(const std::unique_ptr<DeviceBuffer>& b) { return b->f32(); }
  static const int32_t* I(const std::unique_ptr<DeviceBuffer>& b) {
    return static_cast<const int32_t*>(b->data());
  }

  static void ExpectClose(const std::vector<float>& got, const std::vector<float>& want,
                          float rel, float abs_tol, const std::string& what) {
    ASSERT_EQ(got.size(), want.size());
    size_t bad = 0, worst = 0;
    float worst_err = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const float err = std::abs(got[i] - want[i]);
      if (!(err <= abs_tol + rel * std::abs(want[i]))) ++bad;
      if (!(err <= worst_err)) worst_err = err, worst = i;
    }
    EXPECT_EQ(bad, 0u) << what << ": worst |err| " << worst_err << " at " << worst << " (got "
                       << got[worst] << ", want " << want[worst] << ")";
  }

  std::unique_ptr<Backend> gpu_, cpu_;
};

TEST_F(CudaBackendTest, EmbeddingAndGatherRowsAreExact) {
  const int vocab = 300, dim = 96;
  const std::vector<int32_t> ids = {5, 299, 0, 5, 17};
  const auto table = Random(size_t(vocab) * dim, 1);
  for (WeightType t : {WeightType::kBF16, WeightType::kF16, WeightType::kF32}) {
    auto host = t == WeightType::kF32 ? table : Representable(table, t);
    auto half = ToHalf(host, t);
    const void* src = t == WeightType::kF32 ? static_cast<const void*>(host.data()) : half.data();
    auto gw = *gpu_->LoadWeight(t, WeightKind::kMatrix, src, vocab, dim);
    auto cw = *cpu_->LoadWeight(t, WeightKind::kMatrix, src, vocab, dim);
    std::vector<float> want(ids.size() * dim);
    cpu_->Embedding(ids.data(), int(ids.size()), cw, dim, want.data());
    auto d_ids = Up(ids);
    auto out = *gpu_->Allocate(want.size() * 4);
    gpu_->Embedding(I(d_ids), int(ids.size()), gw, dim, out->f32());
    if (t == WeightType::kF32) {
      // float32 matrices are kept in bf16 on the GPU.
      EXPECT_EQ(gw.type(), WeightType::kBF16);
      ExpectClose(Down(*out, want.size()), want, 1.f / 128, 0, "embedding f32->bf16");
    } else {
      EXPECT_EQ(Down(*out, want.size()), want) << int(t);
    }
  }
  const auto x = Random(7 * 33, 2);
  const std::vector<int32_t> rows = {6, 0, 3};
  std::vector<float> want(rows.size() * 33);
  cpu_->GatherRows(x.data(), rows.data(), 3, 33, want.data());
  auto d_x = Up(x);
  auto d_rows = Up(rows);
  auto out = *gpu_->Allocate(want.size() * 4);
  gpu_->GatherRows(F(d_x), I(d_rows), 3, 33, out->f32());
  EXPECT_EQ(Down(*out, want.size()), want);
}

TEST_F(CudaBackendTest, RmsNormAndFusedAddRmsNorm) {
  const int rows = 5, dim = 1000;
  const auto x = Random(rows * dim, 3, -2, 2), y = Random(rows * dim, 4), w = Random(dim, 5);
  std::vector<float> want(x.size());
  cpu_->RmsNorm(x.data(), w.data(), rows, dim, 1e-5f, want.data());
  auto d_x = Up(x), d_y = Up(y), d_w = Up(w);
  auto out = *gpu_->Allocate(x.size() * 4);
  gpu_->RmsNorm(F(d_x), F(d_w), rows, dim, 1e-5f, out->f32());
  ExpectClose(Down(*out, x.size()), want, 2e-5f, 1e-6f, "RmsNorm");

  std::vector<float> cx = x, cy = y;
  cpu_->AddRmsNorm(cx.data(), cy.data(), w.data(), rows, dim, 1e-5f, cy.data());
  gpu_->AddRmsNorm(F(d_x), F(d_y), F(d_w), rows, dim, 1e-5f, F(d_y));  // out aliases y
  ExpectClose(Down(*d_x, x.size()), cx, 1e-6f, 0, "AddRmsNorm residual");
  ExpectClose(Down(*d_y, y.size()), cy, 2e-5f, 1e-6f, "AddRmsNorm norm");
}

// Every GEMM path: cast + cuBLAS (KVCAST_CUDA_GEMM=cublas), the skinny
// kernel for up to 8 rows with k a multiple of 8 (=skinny), and the default
// (skinny for one row); k = 2056 takes the skinny kernel's unrolled loop and
// its tail, k = 388 falls back to cuBLAS.
TEST_F(CudaBackendTest, LinearInBf16AndFp16WithFloatAccumulation) {
  const int n = 200;
  for (const char* gemm : {"cublas", "skinny", ""}) {
    setenv("KVCAST_CUDA_GEMM", gemm, 1);
    gpu_ = *NewBackend("cuda");
    unsetenv("KVCAST_CUDA_GEMM");
    for (WeightType t : {WeightType::kBF16, WeightType::kF16}) {
      for (int k : {384, 2056, 388}) {
        for (int m : {1, 2, 3, 5, 7, 8, 64}) {
          SCOPED_TRACE(testing::Message()
                       << gemm << " type " << int(t) << " k " << k << " m " << m);
          const auto x = Representable(Random(size_t(m) * k, 6), t);
          const auto w = Representable(Random(size_t(n) * k, 7), t);
          const auto bias = Random(n, 8);
          const auto wh = ToHalf(w, t);
          auto gw = *gpu_->LoadWeight(t, WeightKind::kMatrix, wh.data(), n, k);
          auto cw = *cpu_->LoadWeight(t, WeightKind::kMatrix, wh.data(), n, k);
          EXPECT_EQ(gw.type(), t);
          std::vector<float> want(size_t(m) * n);
          cpu_->Linear(x.data(), m, k, cw, n, bias.data(), want.data());
          auto d_x = Up(x), d_b = Up(bias);
          auto out = *gpu_->Allocate(want.size() * 4);
          gpu_->Linear(F(d_x), m, k, gw, n, F(d_b), out->f32());
          const auto got = Down(*out, want.size());
          for (int r = 0; r < m; ++r) {
            for (int j = 0; j < n; ++j) {
              double mag = std::abs(bias[j]);
              for (int i = 0; i < k; ++i) mag += std::abs(double(x[r * k + i]) * w[j * k + i]);
              ASSERT_NEAR(got[r * n + j], want[r * n + j], 1e-5 * mag) << r << "," << j;
            }
          }
        }
      }
    }
  }
}

TEST_F(CudaBackendTest, VectorWeightsAreFloat32) {
  const std::vector<float> v = {1.5f, -2.f, 0.25f};
  const auto bf = ToHalf(v, WeightType::kBF16);
  auto w = *gpu_->LoadWeight(WeightType::kBF16, WeightKind::kVector, bf.data(), 1, bf.size());
  EXPECT_EQ(w.type(), WeightType::kF32);
  std::vector<float> got(3);
  gpu_->CopyToHost(got.data(), w.data(), 12);
  EXPECT_EQ(got, v);
}

TEST_F(CudaBackendTest, RopeSwiGluAndWriteKv) {
  const int T = 6, heads = 3, hd = 64, stride = heads * hd + 10;
  auto x = Random(size_t(T) * stride, 9, -3, 3);
  const std::vector<int32_t> pos = {0, 1, 17, 4095, 8191, 131071};
  std::vector<float> inv(hd / 2);
  for (int i = 0; i < hd / 2; ++i) inv[i] = float(1.0 / std::pow(500000.0, 2.0 * i / hd));
  auto d_x = Up(x), d_pos = Up(pos), d_inv = Up(inv);
  cpu_->Rope(x.data(), T, stride, heads, hd, pos.data(), inv.data());
  gpu_->Rope(F(d_x), T, stride, heads, hd, I(d_pos), F(d_inv));
  ExpectClose(Down(*d_x, x.size()), x, 2e-5f, 2e-5f, "Rope");

  const int rows = 9, dim = 300;
  const auto gu = Random(size_t(rows) * 2 * dim, 10, -6, 6);
  std::vector<float> want(size_t(rows) * dim);
  cpu_->SwiGlu(gu.data(), rows, dim, want.data());
  auto d_gu = Up(gu);
  auto out = *gpu_->Allocate(want.size() * 4);
  gpu_->SwiGlu(F(d_gu), rows, dim, out->f32());
  ExpectClose(Down(*out, want.size()), want, 2e-6f, 1e-7f, "SwiGlu");

  const int nkv = 2, slots_n = 40;
  const std::vector<int32_t> slots = {39, 3, 20, 0};
  const auto kv = Random(slots.size() * 2 * stride, 11);
  for (KvStorage storage : {KvStorage::kF32, KvStorage::kF32Fp16Values}) {
    std::vector<float> kc(size_t(slots_n) * nkv * hd, -7.f), vc = kc;
    cpu_->WriteKv(kv.data(), kv.data() + nkv * hd, 4, stride, slots.data(), nkv, hd, storage,
                  kc.data(), vc.data());
    auto d_kv = Up(kv), d_slots = Up(slots);
    auto d_kc = Up(std::vector<float>(kc.size(), -7.f));
    auto d_vc = Up(std::vector<float>(kc.size(), -7.f));
    gpu_->WriteKv(F(d_kv), F(d_kv) + nkv * hd, 4, stride, I(d_slots), nkv, hd, storage,
                  F(d_kc), F(d_vc));
    EXPECT_EQ(Down(*d_kc, kc.size()), kc) << "storage " << int(storage);
    EXPECT_EQ(Down(*d_vc, vc.size()), vc) << "storage " << int(storage);
  }
}

// A mixed batch like the engine's: a fresh prefill, a long decode (split
// along the KV length), and a chunk of prefill over a cached prefix, with
// GQA and scattered pages.
class CudaAttentionTest : public CudaBackendTest,
                          public testing::WithParamInterface<std::tuple<int, int, int>> {};

TEST_P(CudaAttentionTest, PagedAttentionMatchesCpu) {
  const auto [heads, kv_heads, hd] = GetParam();
  const int page_tokens = 16, num_pages = 500;  // the batch below takes 442
  struct Seq {
    int queries, context;
  };
  // Prefills of 37 and 150 queries take the tiled kernel (head_dim 64, 128),
  // the rest the per-row one, unless KVCAST_CUDA_ATTENTION sends all to one.
  const std::vector<Seq> batch = {{37, 37}, {1, 1500}, {20, 300}, {1, 1}, {1, 4000}, {150, 1200}};
  std::mt19937 rng(12);
  std::vector<int32_t> pages(num_pages);
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), rng);
  std::vector<int32_t> tables;
  std::vector<AttentionSeq> cpu_seqs, gpu_seqs;
  std::vector<size_t> offsets;
  int rows = 0, next_page = 0;
  for (const Seq& s : batch) {
    const int n = (s.context + page_tokens - 1) / page_tokens;
    offsets.push_back(tables.size());
    for (int i = 0; i < n; ++i) tables.push_back(pages[(next_page + i) % num_pages]);
    next_page += n;
    cpu_seqs.push_back(AttentionSeq{rows, s.queries, s.context, nullptr});
    rows += s.queries;
  }
  ASSERT_LE(next_page, num_pages) << "pages would be shared between sequences";
  const size_t cache_floats = size_t(num_pages) * page_tokens * kv_heads * hd;
  const auto kc = Random(cache_floats, 13, -2, 2), vc = Random(cache_floats, 14);
  const int q_stride = (heads + 2 * kv_heads) * hd;
  const auto q = Random(size_t(rows) * q_stride, 15, -2, 2);
  auto d_tables = Up(tables), d_q = Up(q), d_k = Up(kc), d_v = Up(vc);
  gpu_seqs = cpu_seqs;
  for (size_t b = 0; b < batch.size(); ++b) {
    cpu_seqs[b].page_table = tables.data() + offsets[b];
    gpu_seqs[b].page_table = I(d_tables) + offsets[b];
  }
  const AttentionShape shape{heads, kv_heads, hd, page_tokens, 1.f / std::sqrt(float(hd))};
  std::vector<float> want(size_t(rows) * heads * hd);
  cpu_->PagedAttention(q.data(), q_stride, cpu_seqs.data(), int(batch.size()), shape, kc.data(),
                       vc.data(), want.data());
  for (const char* mode : {"", "warp", "tiled"}) {
    SCOPED_TRACE(std::string("KVCAST_CUDA_ATTENTION=") + mode);
    if (*mode != 0) {
      setenv("KVCAST_CUDA_ATTENTION", mode, 1);
    } else {
      unsetenv("KVCAST_CUDA_ATTENTION");
    }
    // Twice: the second call reuses the uploaded descriptors. The output
    // starts as NaN each time, so a row no kernel writes cannot pass.
    for (const char* call : {"PagedAttention", "PagedAttention (cached)"}) {
      auto out = Up(std::vector<float>(want.size(), NAN));
      gpu_->PagedAttention(F(d_q), q_stride, gpu_seqs.data(), int(batch.size()), shape, F(d_k),
                           F(d_v), F(out));
      ExpectClose(Down(*out, want.size()), want, 1e-4f, 1e-4f, call);
    }
  }
  unsetenv("KVCAST_CUDA_ATTENTION");
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttentionTest,
                         testing::Values(std::make_tuple(8, 2, 64), std::make_tuple(4, 4, 128),
                                         std::make_tuple(14, 2, 64), std::make_tuple(2, 1, 256)));

TEST_F(CudaBackendTest, KvTransferIsBitIdenticalToTheCpuCodecs) {
  const int heads = 2, dim = 64, num_slots = 50, arrays = 4;  // 2 layers x K, V
  const size_t array_floats = size_t(num_slots) * heads * dim;
  auto cache = Random(arrays * array_floats, 16, -3, 3);
  cache[7] = NAN;  // a poisoned block must decode to NaN on both
  cache[array_floats + 200] = INFINITY;
  auto d_cache = Up(cache);
  const std::vector<int32_t> slots = {0, 49, 13, 7, 21};
  for (KvFormat f : kAllKvFormats) {
    SCOPED_TRACE(int(f));
    const int block = KvFormatBits(f) == 4 ? 32 : dim;
    const size_t row_bytes = KvRowBytes(f, heads, dim, block);
    const size_t stride = arrays * row_bytes + 3;  // unaligned token rows
    std::vector<uint8_t> want(slots.size() * stride, 0), got(want.size(), 0);
    ASSERT_TRUE(cpu_->EncodeKv(f, block, KvArrays{cache.data(), arrays, array_floats, heads, dim},
                               slots.data(), int(slots.size()), want.data(), stride)
                    .ok());
    auto staging = *gpu_->AllocateStaging(got.size());
    std::memset(staging->data(), 0, got.size());
    absl::Status encoded =
        gpu_->EncodeKv(f, block, KvArrays{F(d_cache), arrays, array_floats, heads, dim},
                       slots.data(), int(slots.size()), static_cast<uint8_t*>(staging->data()),
                       stride);
    ASSERT_TRUE(encoded.ok()) << encoded;
    std::memcpy(got.data(), staging->data(), got.size());
    EXPECT_EQ(got, want);

    // Decode from pageable memory into a fresh cache; compare with the CPU.
    std::vector<float> cpu_dst(cache.size(), -1.f);
    ASSERT_TRUE(cpu_->DecodeKv(f, block, want.data(), stride, slots.data(), int(slots.size()),
                               KvArrays{cpu_dst.data(), arrays, array_floats, heads, dim})
                    .ok());
    auto d_dst = Up(std::vector<float>(cache.size(), -1.f));
    absl::Status decoded =
        gpu_->DecodeKv(f, block, want.data(), stride, slots.data(), int(slots.size()),
                       KvArrays{F(d_dst), arrays, array_floats, heads, dim});
    ASSERT_TRUE(decoded.ok()) << decoded;
    const auto gpu_dst = Down(*d_dst, cache.size());
    ASSERT_EQ(std::memcmp(gpu_dst.data(), cpu_dst.data(), cache.size() * 4), 0);
  }
}

// Requests address rows out of order; greedy picks are exact and a tiny
// temperature lands on the row's peak, as on the CPU backend.
TEST_F(CudaBackendTest, SampleTokensPicksWhatTheCpuBackendPicks) {
  const int rows = 4, vocab = 128256;
  auto logits = Random(size_t(rows) * vocab, 41, -4.f, 4.f);
  for (int r = 0; r < rows; ++r) logits[size_t(r) * vocab + 1000 * r + 7] = 30.f;
  const std::vector<TokenSampling> params = {
      {3, 0.f, 0, 1.f, 0.0}, {0, 0.f, 0, 1.f, 0.0}, {3, 0.01f, 50, 0.9f, 0.99},
      {1, 0.8f, 40, 1.f, 0.5}, {2, 1.f, 0, 0.95f, 0.25}};
  auto d_logits = Up(logits);
  std::vector<int32_t> gpu(params.size(), -7), cpu(params.size(), -7);
  ASSERT_TRUE(gpu_->SampleTokens(F(d_logits), vocab, params.data(), int(params.size()),
                                 gpu.data())
                  .ok());
  ASSERT_TRUE(cpu_->SampleTokens(logits.data(), vocab, params.data(), int(params.size()),
                                 cpu.data())
                  .ok());
  EXPECT_EQ(gpu, cpu);
  EXPECT_EQ(gpu[0], 3007);
  EXPECT_EQ(gpu[1], 7);

  // Token masks (constrained decoding): the peaks refused, every path picks
  // what the CPU backend picks among the allowed, and a row without a mask
  // beside them keeps its peak.
  ASSERT_TRUE(gpu_->SamplesWithTokenMasks());
  const size_t words = (vocab + 31) / 32;
  std::vector<uint32_t> mask(words);
  for (size_t w = 0; w < words; ++w) mask[w] = uint32_t(0x9e3779b9u * uint32_t(w + 1)) | 0x10001u;
  for (int r = 0; r < rows; ++r) {
    const int peak = 1000 * r + 7;
    mask[size_t(peak) / 32] &= ~(1u << (peak % 32));
  }
  std::vector<TokenSampling> masked = params;
  for (size_t j = 1; j < masked.size(); ++j) masked[j].allowed = mask.data();
  std::fill(gpu.begin(), gpu.end(), -7);
  std::fill(cpu.begin(), cpu.end(), -7);
  ASSERT_TRUE(gpu_->SampleTokens(F(d_logits), vocab, masked.data(), int(masked.size()), gpu.data()).ok());
  ASSERT_TRUE(cpu_->SampleTokens(logits.data(), vocab, masked.data(), int(masked.size()), cpu.data()).ok());
  EXPECT_EQ(gpu, cpu);
  EXPECT_EQ(gpu[0], 3007);  // no mask
  for (size_t j = 1; j < masked.size(); ++j) {
    EXPECT_TRUE((mask[size_t(gpu[j]) / 32] >> (gpu[j] % 32)) & 1) << j << ": " << gpu[j];
  }
}

TEST_F(CudaBackendTest, AttentionShapesItCannotRunAreRefused) {
  EXPECT_TRUE(gpu_->SupportsAttention(32, 8, 64).ok());
  EXPECT_TRUE(gpu_->SupportsAttention(14, 2, 64).ok());
  EXPECT_TRUE(gpu_->SupportsAttention(2, 1, 256).ok());
  for (int head_dim : {16, 48, 288}) {
    const absl::Status s = gpu_->SupportsAttention(4, 2, head_dim);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << head_dim;
    EXPECT_NE(s.message().find("head_dim"), std::string::npos) << s;
  }
}

TEST_F(CudaBackendTest, MemoryQueries) {
  EXPECT_GT(gpu_->AvailableMemory(), size_t(1) << 30);
  auto pinned = gpu_->AllocateStaging(1 << 20);
  ASSERT_TRUE(pinned.ok());
  EXPECT_EQ((*pinned)->size(), size_t(1) << 20);
  // Asking for far more than exists is ResourceExhausted, not a crash, and
  // does not poison later ops.
  auto huge = gpu_->Allocate(size_t(1) << 50);
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(gpu_->Synchronize().ok());
}

}  // namespace
}  // namespace kvcast
