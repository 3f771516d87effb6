// Speed of the xl codec per core: one 128-token group in a model's basis,
// encoded into objects and decoded back (float values, K before RoPE).
// The KV is drawn from the basis itself (each block's mean plus every
// component times N(0, its variance)), so the coded coefficients and their
// symbols are distributed as the calibration's. Bytes/s count
// fp16-equivalent KV (2 bytes per value), the unit of the codec goal
// (>= 1 GB/s each way).
//
//   OPENBLAS_NUM_THREADS=1 bazel run -c opt //transport/kvcache/xl:xl_codec_benchmark -- \
//       --basis=$PWD/build/kvbasis/smollm2_g10.kvb
//
// (One core: OpenBLAS, which runs the transform's matrix products, takes
// every core unless told otherwise.)
// Rows: the points xl@0.4/0.15 and xl@1.0/0.3 (SmolLM2-135M's, docs/benchmarks.md).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "transport/kvcache/xl/kv_basis.h"
#include "transport/kvcache/xl/xl_codec.h"

namespace kvcast::kvcache::xl {
namespace {

constexpr int kTokens = 128;
constexpr XlPoint kPoints[] = {{"xl@0.4/0.15", 0.4f, 0.15f}, {"xl@1.0/0.3", 1.0f, 0.3f}};

std::shared_ptr<const KvBasis>& Basis() {
  static std::shared_ptr<const KvBasis> basis;
  return basis;
}

const std::vector<float>& Kv() {
  static std::vector<float> kv;
  if (!kv.empty()) return kv;
  const KvBasis& b = *Basis();
  const AcShape& s = b.shape();
  const int row = s.num_kv_heads * s.head_dim;
  kv.assign(size_t(kTokens) * s.token_floats(), 0.f);
  std::mt19937 rng(1);
  std::normal_distribution<float> n01;
  for (int g = 0; g < b.num_groups(); ++g) {
    for (int kind = 0; kind < 2; ++kind) {
      const KvBasis::Block& blk = b.block(g, kind);
      std::vector<float> x(blk.dim);
      for (int t = 0; t < kTokens; ++t) {
        x = blk.mean;
        for (int i = 0; i < blk.dim; ++i) {
          const float z = n01(rng) * std::sqrt(blk.variance[i]);
          const float* u = blk.axes.data() + size_t(i) * blk.dim;
          for (int c = 0; c < blk.dim; ++c) x[c] += z * u[c];
        }
        for (int l = 0; l < blk.layers; ++l) {
          std::memcpy(kv.data() + size_t(t) * s.token_floats() +
                          size_t(blk.first_layer + l) * 2 * row + kind * row,
                      x.data() + l * row, row * sizeof(float));
        }
      }
    }
  }
  return kv;
}

void SetCounters(benchmark::State& state, size_t encoded_bytes) {
  const double fp16 = double(kTokens) * Basis()->shape().token_floats() * 2;
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(fp16));
  state.counters["vs_fp16"] = encoded_bytes / fp16;
  state.counters["coded"] =
      PlanOf(*Basis(), kPoints[state.range(0)].k_step, kPoints[state.range(0)].v_step).total_kept;
  state.SetLabel(std::string(kPoints[state.range(0)].track));
}

size_t Bytes(const std::vector<std::vector<uint8_t>>& objects) {
  size_t n = 0;
  for (const auto& o : objects) n += o.size();
  return n;
}

void BM_XlEncode(benchmark::State& state) {
  XlGroupEncoder enc(Basis(), kPoints[state.range(0)]);
  std::vector<std::vector<uint8_t>> objects;
  for (auto _ : state) {
    enc.Encode(Kv().data(), kTokens, &objects, /*starts_sequence=*/true);
    benchmark::DoNotOptimize(objects.data());
  }
  SetCounters(state, Bytes(objects));
}

void BM_XlDecode(benchmark::State& state) {
  XlGroupEncoder enc(Basis(), kPoints[state.range(0)]);
  std::vector<std::vector<uint8_t>> objects;
  enc.Encode(Kv().data(), kTokens, &objects, /*starts_sequence=*/true);
  const std::vector<absl::Span<const uint8_t>> spans(objects.begin(), objects.end());
  XlGroupDecoder dec(Basis());
  std::vector<float> out(Kv().size());
  for (auto _ : state) {
    if (!dec.DecodeGroup(spans, out.data()).ok()) {
      state.SkipWithError("decode failed");
      break;
    }
    benchmark::DoNotOptimize(out.data());
  }
  SetCounters(state, Bytes(objects));
}

BENCHMARK(BM_XlEncode)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_XlDecode)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kvcast::kvcache::xl

int main(int argc, char** argv) {
  std::string path;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--basis=", 8) == 0) {
      path = argv[i] + 8;
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  if (path.empty()) {
    std::fprintf(stderr, "xl_codec_benchmark: --basis=FILE (kv_quality --fit_kv_basis) is required\n");
    return 1;
  }
  auto basis = kvcast::kvcache::xl::KvBasis::Load(path);
  if (!basis.ok()) {
    std::fprintf(stderr, "xl_codec_benchmark: %s\n", basis.status().ToString().c_str());
    return 1;
  }
  kvcast::kvcache::xl::Basis() =
      std::make_shared<const kvcast::kvcache::xl::KvBasis>(*std::move(basis));
  kvcast::kvcache::xl::Kv();  // drawn once, before any timing
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  return 0;
}
