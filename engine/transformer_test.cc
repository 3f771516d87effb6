// Consistency of the forward pass over the paged KV cache. Tolerances: all
// compute is float32; different batchings reorder float sums (GEMV vs GEMM,
// different row counts), so logits agree to 1e-4 absolute (logits are O(1..10)).
#include "engine/transformer.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "engine/testing/tiny_model_fixture.h"
#include "kernels/profiling_backend.h"
#include "gtest/gtest.h"

namespace kvcast {
namespace {

constexpr float kTol = 1e-4f;

std::vector<int32_t> Tokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = int32_t(rng() % vocab);
  return t;
}

void ExpectNear(const float* a, const float* b, size_t n, const std::string& what) {
  float worst = 0;
  for (size_t i = 0; i < n; ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  EXPECT_LT(worst, kTol) << what;
}

class TransformerTest : public testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    TinyModelOptions o;
    o.arch = GetParam() == "qwen2_tied" ? "qwen2" : "llama";
    o.tie_embeddings = GetParam() == "qwen2_tied";
    o.llama3_rope_scaling = GetParam() == "llama3_rope";
    m_ = LoadTinyModel(o);
    vocab_ = m_.model->config().vocab_size;
  }

  std::unique_ptr<KvPagePool> Pool(int page_tokens, int pages) {
    return *KvPagePool::Create(m_.backend.get(), m_.model->kv_layout(page_tokens), pages);
  }

  // All-token logits of `tokens` computed in one pass on one big page.
  std::vector<float> Contiguous(const std::vector<int32_t>& tokens) {
    auto pool = Pool(1024, 1);
    std::vector<int32_t> table = {0};
    std::vector<float> logits;
    ForwardItem item{tokens, 0, table};
    EXPECT_TRUE(m_.model->Forward({&item, 1}, pool.get(), true, &logits).ok());
    return logits;
  }

  LoadedTinyModel m_;
  int vocab_ = 0;
};

TEST_P(TransformerTest, IncrementalDecodeMatchesFullRecomputation) {
  auto tokens = Tokens(40, vocab_, 1);
  auto full = Contiguous(tokens);
  auto pool = Pool(16, 8);
  KvPages table = *pool->Allocate(3);
  std::vector<float> logits;
  const int prefill = 25;
  ForwardItem first{absl::MakeConstSpan(tokens).subspan(0, prefill), 0, table.ids()};
  ASSERT_TRUE(m_.model->Forward({&first, 1}, pool.get(), false, &logits).ok());
  ExpectNear(logits.data(), &full[(prefill - 1) * vocab_], vocab_, "after prefill");
  for (int pos = prefill; pos < 40; ++pos) {
    ForwardItem step{absl::MakeConstSpan(tokens).subspan(pos, 1), pos, table.ids()};
    ASSERT_TRUE(m_.model->Forward({&step, 1}, pool.get(), false, &logits).ok());
    ExpectNear(logits.data(), &full[pos * vocab_], vocab_, "decode at " + std::to_string(pos));
  }
}

TEST_P(TransformerTest, ScatteredPagesAndChunkedPrefillMatchContiguous) {
  auto tokens = Tokens(70, vocab_, 2);
  auto full = Contiguous(tokens);
  auto pool = Pool(16, 12);
  std::vector<int32_t> table = {9, 2, 11, 0, 5};  // out of order, gaps
  std::vector<float> logits;
  for (int start = 0; start < 70; start += 32) {  // chunks cross page edges
    int n = std::min(32, 70 - start);
    ForwardItem item{absl::MakeConstSpan(tokens).subspan(start, n), start, table};
    ASSERT_TRUE(m_.model->Forward({&item, 1}, pool.get(), true, &logits).ok());
    ExpectNear(logits.data(), &full[start * vocab_], size_t(n) * vocab_,
               "chunk at " + std::to_string(start));
  }
}

TEST_P(TransformerTest, PrefillInChunksEndsWithTheLastTokensLogits) {
  auto tokens = Tokens(70, vocab_, 4);
  auto full = Contiguous(tokens);
  auto pool = Pool(16, 5);
  std::vector<int32_t> table = {4, 0, 3, 1, 2};
  std::vector<float> logits;
  ASSERT_TRUE(PrefillInChunks(*m_.model, tokens, table, 24, pool.get(), &logits).ok());
  ASSERT_EQ(logits.size(), size_t(vocab_));
  ExpectNear(logits.data(), &full[69 * size_t(vocab_)], vocab_, "last token");
  EXPECT_EQ(PrefillInChunks(*m_.model, tokens, table, 0, pool.get(), &logits).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_P(TransformerTest, ReusedPrefixPagesGiveSameLogitsAsComputingThem) {
  auto a = Tokens(48, vocab_, 3);
  auto b = a;
  auto tail = Tokens(20, vocab_, 4);
  b.resize(32);
  b.insert(b.end(), tail.begin(), tail.end());  // shares a's first 32 tokens
  auto full_b = Contiguous(b);
  auto pool = Pool(16, 16);
  KvPages ta = *pool->Allocate(3);
  std::vector<float> logits;
  ForwardItem ia{a, 0, ta.ids()};
  ASSERT_TRUE(m_.model->Forward({&ia, 1}, pool.get(), false, &logits).ok());
  // b reuses a's first two pages and computes only its own suffix.
  std::vector<int32_t> tb = {ta[0], ta[1]};
  auto own = *pool->Allocate(2);
  tb.insert(tb.end(), own.ids().begin(), own.ids().end());
  ForwardItem ib{absl::MakeConstSpan(b).subspan(32), 32, tb};
  ASSERT_TRUE(m_.model->Forward({&ib, 1}, pool.get(), true, &logits).ok());
  ExpectNear(logits.data(), &full_b[32 * vocab_], 20 * size_t(vocab_), "suffix of b");
}

TEST_P(TransformerTest, MixedBatchMatchesEachSequenceAlone) {
  // Three sequences of different lengths: one prefill chunk and two decodes.
  std::vector<std::vector<int32_t>> seqs = {Tokens(9, vocab_, 5), Tokens(33, vocab_, 6),
                                            Tokens(17, vocab_, 7)};
  auto pool = Pool(16, 32);
  std::vector<KvPages> tables;
  for (auto& s : seqs) tables.push_back(*pool->Allocate(3));
  std::vector<float> logits;
  // Sequences 1 and 2 have all but their last token in KV already.
  for (int i : {1, 2}) {
    ForwardItem item{absl::MakeConstSpan(seqs[i]).subspan(0, seqs[i].size() - 1), 0, tables[i].ids()};
    ASSERT_TRUE(m_.model->Forward({&item, 1}, pool.get(), false, &logits).ok());
  }
  std::vector<ForwardItem> batch = {
      {seqs[0], 0, tables[0].ids()},
      {absl::MakeConstSpan(seqs[1]).subspan(32), 32, tables[1].ids()},
      {absl::MakeConstSpan(seqs[2]).subspan(16), 16, tables[2].ids()}};
  ASSERT_TRUE(m_.model->Forward(batch, pool.get(), false, &logits).ok());
  for (int i = 0; i < 3; ++i) {
    auto alone = Contiguous(seqs[i]);
    ExpectNear(&logits[i * vocab_], &alone[(seqs[i].size() - 1) * vocab_], vocab_,
               "sequence " + std::to_string(i));
  }
}

TEST_P(TransformerTest, RejectsBadItemsWithoutTouchingKv) {
  auto pool = Pool(16, 4);
  std::fill(pool->k_cache(0), pool->k_cache(0) + pool->layout().page_floats() * 4, 7.f);
  std::vector<int32_t> table = {0};
  std::vector<float> logits;
  std::vector<int32_t> bad = {1, vocab_};
  ForwardItem oov{bad, 0, table};
  auto s = m_.model->Forward({&oov, 1}, pool.get(), false, &logits);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("outside the vocabulary"), std::string::npos) << s;
  auto toks = Tokens(20, vocab_, 8);
  ForwardItem too_long{toks, 0, table};  // 20 tokens, one 16-token page
  s = m_.model->Forward({&too_long, 1}, pool.get(), false, &logits);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("page table"), std::string::npos) << s;
  EXPECT_EQ(std::count(pool->k_cache(0), pool->k_cache(0) + pool->layout().page_floats() * 4, 7.f),
            long(pool->layout().page_floats() * 4));
}

INSTANTIATE_TEST_SUITE_P(Architectures, TransformerTest,
                         testing::Values("llama", "qwen2_tied", "llama3_rope"));

// A backend whose attention takes only head_dim >= 32 (as the CUDA kernels):
// the CPU backend with that one answer changed, counting weight loads.
class WideHeadsOnlyBackend : public ProfilingBackend {
 public:
  explicit WideHeadsOnlyBackend(Backend* inner) : ProfilingBackend(inner) {}
  absl::Status SupportsAttention(int, int, int head_dim) const override {
    return head_dim >= 32 ? absl::OkStatus() : absl::InvalidArgumentError("head_dim too small");
  }
  absl::StatusOr<Weight> LoadWeight(WeightType type, WeightKind kind, const void* src,
                                    size_t rows, size_t cols) override {
    ++weights_loaded;
    return ProfilingBackend::LoadWeight(type, kind, src, rows, cols);
  }
  int weights_loaded = 0;
};

TEST(TransformerLoad, ShapeTheBackendCannotRunFailsAtLoad) {
  LoadedTinyModel m = LoadTinyModel();
  ASSERT_LT(m.model->config().head_dim, 32);
  WideHeadsOnlyBackend narrow(m.backend.get());
  auto t = Transformer::Load(*m.checkpoint, &narrow);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("head_dim too small"), std::string::npos) << t.status();
  EXPECT_NE(t.status().message().find(m.checkpoint->dir()), std::string::npos) << t.status();
  // Refused before any weight moved.
  EXPECT_EQ(narrow.weights_loaded, 0);
}

TEST(RopeInverseFrequencies, Llama3ScalingKeepsHighAndDividesLowFrequencies) {
  ModelConfig c;
  c.head_dim = 64;
  c.rope_theta = 500000;
  auto plain = RopeInverseFrequencies(c);
  c.rope_scaling = RopeScaling{"llama3", 8.0, 1.0, 4.0, 8192};
  auto scaled = RopeInverseFrequencies(c);
  EXPECT_FLOAT_EQ(scaled[0], plain[0]);           // wavelength 2*pi < 2048
  EXPECT_FLOAT_EQ(scaled[31], plain[31] / 8.f);   // wavelength > 8192
  bool smoothed = false;
  for (int i = 0; i < 32; ++i) {
    smoothed |= scaled[i] < plain[i] && scaled[i] > plain[i] / 8.f;
  }
  EXPECT_TRUE(smoothed);
  c.rope_scaling = RopeScaling{"linear", 4.0};
  auto linear = RopeInverseFrequencies(c);
  for (int i = 0; i < 32; ++i) EXPECT_FLOAT_EQ(linear[i], plain[i] / 4.f) << i;
}

}  // namespace
}  // namespace kvcast
