// The tiled prefill attention kernel against the row kernel, side by side:
// SmolLM2-135M's attention (9 query heads over 3 KV heads, head_dim 64, fp16
// pages of 16 tokens), one layer's prefill chunk of 256 query rows at the
// end of a prompt of each length, and a batch-1 decode row at that context.
// Rounds alternate the kernels, which one goes first alternating too (after
// a warm-up call of each), then the median and range of the speedup.
//   bazel build -c opt //kernels/cpu:attention_benchmark && \
//     bazel-bin/kernels/cpu/attention_benchmark [--rounds 5] [--contexts 512,2048,4096,8192]
//     [--avx2]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/dtype.h"
#include "kernels/cpu/attention.h"

ABSL_FLAG(int, rounds, 5, "alternating rounds per case");
ABSL_FLAG(std::string, contexts, "512,2048,4096,8192", "prompt lengths");
ABSL_FLAG(bool, avx2, false, "the tiled kernel's AVX2 code even on an AVX-512 CPU");
ABSL_FLAG(int, chunk, 256, "query rows of the prefill chunk (the engine's max_batch_tokens)");

namespace kvcast {
namespace {

constexpr int kHeads = 9, kKvHeads = 3, kHd = 64, kPage = 16;

double TimeMs(const std::vector<float>& q, const AttentionSeq& seq, const AttentionShape& s,
              const std::vector<uint16_t>& k, const std::vector<uint16_t>& v,
              std::vector<float>* out, CpuAttentionKernel kernel, int reps) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r) {
    CpuPagedAttention(q.data(), kHeads * kHd, &seq, 1, s, k.data(), v.data(), out->data(), true,
                      kernel);
  }
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
             .count() / reps;
}

void Case(int ctx, int nq, int rounds) {
  const int pages = (ctx + kPage - 1) / kPage;
  const size_t row = size_t(kKvHeads) * kHd;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0, 1);
  std::vector<uint16_t> k(size_t(pages) * kPage * row), v(k.size());
  for (auto& x : k) x = FloatToHalf(nd(rng));
  for (auto& x : v) x = FloatToHalf(nd(rng));
  std::vector<float> q(size_t(nq) * kHeads * kHd);
  for (float& x : q) x = nd(rng);
  std::vector<int32_t> table(pages);
  for (int i = 0; i < pages; ++i) table[i] = (i * 7) % pages;  // scattered
  AttentionSeq seq{0, nq, ctx, table.data()};
  AttentionShape s{kHeads, kKvHeads, kHd, kPage, 0.125f, KvStorage::kF16};
  std::vector<float> out(q.size());
  // Multiply-adds of QK^T and PV over the causal triangle's visible keys.
  const double flops = 4.0 * kHeads * kHd * (double(nq) * ctx - double(nq) * (nq - 1) / 2);
  const int reps = std::max(1, int(2e9 / flops));
  TimeMs(q, seq, s, k, v, &out, CpuAttentionKernel::kRows, 1);
  TimeMs(q, seq, s, k, v, &out, CpuAttentionKernel::kTiled, 1);
  std::vector<double> rows_ms, tiled_ms, speedup;
  for (int r = 0; r < rounds; ++r) {  // which kernel goes first alternates
    for (int i = 0; i < 2; ++i) {
      if ((i + r) % 2 == 0) {
        rows_ms.push_back(TimeMs(q, seq, s, k, v, &out, CpuAttentionKernel::kRows, reps));
      } else {
        tiled_ms.push_back(TimeMs(q, seq, s, k, v, &out, CpuAttentionKernel::kTiled, reps));
      }
    }
    speedup.push_back(rows_ms.back() / tiled_ms.back());
  }
  auto median = [](std::vector<double> x) {
    std::sort(x.begin(), x.end());
    return x[x.size() / 2];
  };
  const double rm = median(rows_ms), tm = median(tiled_ms);
  std::printf("| %d | %d | %.3f (%.1f GFLOP/s) | %.3f (%.1f GFLOP/s) | %.2fx (%.2f-%.2f) |\n", ctx,
              nq, rm, flops / rm / 1e6, tm, flops / tm / 1e6, median(speedup),
              *std::min_element(speedup.begin(), speedup.end()),
              *std::max_element(speedup.begin(), speedup.end()));
  std::fflush(stdout);
}

}  // namespace
}  // namespace kvcast

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  kvcast::CpuAttentionAvx2OnlyForTesting(absl::GetFlag(FLAGS_avx2));
  std::printf("| context | query rows | rows kernel ms | tiled kernel ms | speedup median (range) |\n");
  std::printf("|---|---|---|---|---|\n");
  for (auto piece : absl::StrSplit(absl::GetFlag(FLAGS_contexts), ',')) {
    int ctx = 0;
    if (!absl::SimpleAtoi(piece, &ctx) || ctx < 1) {
      std::fprintf(stderr, "bad --contexts entry '%s'\n", std::string(piece).c_str());
      return 2;
    }
    kvcast::Case(ctx, std::min(ctx, absl::GetFlag(FLAGS_chunk)), absl::GetFlag(FLAGS_rounds));
  }
  return 0;
}
