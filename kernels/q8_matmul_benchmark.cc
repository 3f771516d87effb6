// Q4 and Q8 weights against float32 weights for the projections of a decode
// step and a prefill chunk, side by side in one run:
//   bazel build -c opt //kernels:q8_matmul_benchmark && bazel-bin/kernels/q8_matmul_benchmark
// (KVCAST_CPU_ISA=avx2 for the AVX2 kernels.) Shapes are SmolLM2-135M's
// (hidden 576, intermediate 1536, vocab 49152).
#include <cblas.h>

#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "kernels/internal/q8_kernels.h"
#include "kernels/q4_matmul.h"
#include "kernels/q8_matmul.h"

namespace kvcast {
namespace {

std::vector<float> Random(size_t n) {
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Args: m (rows of x), k, n.
void BM_Q8Linear(benchmark::State& state) {
  const int m = state.range(0);
  const int64_t k = state.range(1), n = state.range(2);
  const auto x = Random(m * k), w = Random(n * k);
  std::vector<char> q(Q8MatrixBytes(n, k));
  QuantizeQ8Matrix(w.data(), n, k, q.data());
  std::vector<float> y(m * n);
  for (auto _ : state) {
    Q8Linear(x.data(), m, k, q.data(), n, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetLabel(std::string(Q8KernelName()));
  state.counters["weight_GB/s"] = benchmark::Counter(
      double(Q8MatrixBytes(n, k)) * state.iterations(), benchmark::Counter::kIsRate);
  state.counters["GMAC/s"] =
      benchmark::Counter(double(m) * n * k * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

// Q4_1 blocks of random nibbles and scales.
void BM_Q4Linear(benchmark::State& state) {
  const int m = state.range(0);
  const int64_t k = state.range(1), n = state.range(2);
  const auto x = Random(m * k);
  std::mt19937 rng(2);
  std::vector<uint8_t> blocks(size_t(n * k / 32) * 20);
  for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = uint8_t(rng());
  for (size_t b = 0; b < blocks.size(); b += 20) {
    blocks[b + 1] = 0x20;  // d and m: small normal halves
    blocks[b + 3] = 0xA0;
  }
  std::vector<char> q(Q4MatrixBytes(Q4Source::kQ4_1, n, k));
  PackQ4Matrix(Q4Source::kQ4_1, blocks.data(), n, k, q.data());
  std::vector<float> y(m * n);
  for (auto _ : state) {
    Q4Linear(x.data(), m, k, q.data(), n, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetLabel(std::string(Q4KernelName()));
  state.counters["weight_GB/s"] = benchmark::Counter(
      double(Q4MatrixBytes(Q4Source::kQ4_1, n, k)) * state.iterations(), benchmark::Counter::kIsRate);
  state.counters["GMAC/s"] =
      benchmark::Counter(double(m) * n * k * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

void BM_F32Linear(benchmark::State& state) {
  const int m = state.range(0);
  const int64_t k = state.range(1), n = state.range(2);
  const auto x = Random(m * k), w = Random(n * k);
  std::vector<float> y(m * n);
  for (auto _ : state) {
    if (m == 1) {
      cblas_sgemv(CblasRowMajor, CblasNoTrans, n, k, 1.f, w.data(), k, x.data(), 1, 0.f,
                  y.data(), 1);
    } else {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.f, x.data(), k, w.data(), k,
                  0.f, y.data(), n);
    }
    benchmark::DoNotOptimize(y.data());
  }
  state.SetLabel("openblas");
  state.counters["weight_GB/s"] = benchmark::Counter(double(n * k * 4) * state.iterations(),
                                                     benchmark::Counter::kIsRate);
  state.counters["GMAC/s"] =
      benchmark::Counter(double(m) * n * k * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

void Shapes(benchmark::internal::Benchmark* b) {
  for (int m : {1, 8, 32, 512}) {
    b->Args({m, 576, 1536 * 2});  // gate|up
    b->Args({m, 1536, 576});      // down
    b->Args({m, 576, 49152});     // LM head
  }
  b->UseRealTime();
}

BENCHMARK(BM_Q4Linear)->Apply(Shapes);
BENCHMARK(BM_Q8Linear)->Apply(Shapes);
BENCHMARK(BM_F32Linear)->Apply(Shapes);

}  // namespace
}  // namespace kvcast

BENCHMARK_MAIN();
