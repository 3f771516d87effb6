// Throughput of the KV wire codecs through the CPU backend's EncodeKv and
// DecodeKv: 128 tokens of a Llama-3-8B K row (8 KV heads x 128 dims) read
// from (or written to) scattered slots of a 1024-slot cache. Bytes processed
// are the fp16-equivalent input (2 bytes per value), so GB/s reads as "GB/s
// of fp16 input" for every format. Blocks: head_dim for fp8/int8, 32 for
// fp4/int4. The *_scalar variants run the same rows on the portable kernels,
// to show what the AVX2 path buys.
//   bazel build //kernels:kv_codec_benchmark && bazel-bin/kernels/kv_codec_benchmark
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "kernels/backend.h"
#include "kernels/internal/kv_codec_kernels.h"
#include "kernels/kv_codec.h"

namespace kvcast {
namespace {

constexpr int kHeads = 8, kDim = 128, kTokens = 128, kSlots = 1024;
constexpr size_t kRow = size_t(kHeads) * kDim;

int BlockFor(KvFormat format) {
  switch (format) {
    case KvFormat::kFp8E4M3:
    case KvFormat::kInt8:
      return kDim;
    case KvFormat::kFp4E2M1:
    case KvFormat::kInt4:
      return 32;
    default:
      return 0;
  }
}

struct Setup {
  explicit Setup(KvFormat format)
      : block(BlockFor(format)),
        row_bytes(KvRowBytes(format, kHeads, kDim, block)),
        cache(kSlots * kRow),
        wire(kTokens * row_bytes) {
    std::mt19937 rng(1);
    std::normal_distribution<float> d(0.f, 2.f);
    for (float& v : cache) v = d(rng);
    std::vector<int32_t> all(kSlots);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    slots.assign(all.begin(), all.begin() + kTokens);
  }
  int block;
  size_t row_bytes;
  std::vector<float> cache;
  std::vector<int32_t> slots;
  std::vector<uint8_t> wire;
  KvArrays arrays() { return KvArrays{cache.data(), 1, 0, kHeads, kDim}; }
};

void Finish(benchmark::State& state) {
  state.SetBytesProcessed(int64_t(state.iterations()) * kTokens * kRow * 2);
}

void BM_Encode(benchmark::State& state, KvFormat format) {
  auto backend = NewCpuBackend();
  Setup s(format);
  for (auto _ : state) {
    backend->EncodeKv(format, s.block, s.arrays(), s.slots.data(), kTokens, s.wire.data(),
                      s.row_bytes);
    benchmark::ClobberMemory();
  }
  Finish(state);
}

void BM_Decode(benchmark::State& state, KvFormat format) {
  auto backend = NewCpuBackend();
  Setup s(format);
  backend->EncodeKv(format, s.block, s.arrays(), s.slots.data(), kTokens, s.wire.data(),
                    s.row_bytes);
  for (auto _ : state) {
    backend->DecodeKv(format, s.block, s.wire.data(), s.row_bytes, s.slots.data(), kTokens,
                      s.arrays());
    benchmark::ClobberMemory();
  }
  Finish(state);
}

void BM_EncodeScalar(benchmark::State& state, KvFormat format) {
  Setup s(format);
  const auto& scalar = kv_internal::ScalarKvKernels();
  for (auto _ : state) {
    for (int t = 0; t < kTokens; ++t) {
      kv_internal::EncodeKvRowWith(scalar, format, s.cache.data() + s.slots[t] * kRow, kHeads, kDim,
                                   s.block, s.wire.data() + t * s.row_bytes);
    }
    benchmark::ClobberMemory();
  }
  Finish(state);
}

void BM_DecodeScalar(benchmark::State& state, KvFormat format) {
  Setup s(format);
  const auto& scalar = kv_internal::ScalarKvKernels();
  for (int t = 0; t < kTokens; ++t) {
    EncodeKvRow(format, s.cache.data() + s.slots[t] * kRow, kHeads, kDim, s.block,
                s.wire.data() + t * s.row_bytes);
  }
  for (auto _ : state) {
    for (int t = 0; t < kTokens; ++t) {
      kv_internal::DecodeKvRowWith(scalar, format, s.wire.data() + t * s.row_bytes, kHeads, kDim,
                                   s.block, s.cache.data() + s.slots[t] * kRow);
    }
    benchmark::ClobberMemory();
  }
  Finish(state);
}

#define KV_FORMAT_BENCHMARKS(fn)                       \
  BENCHMARK_CAPTURE(fn, fp16, KvFormat::kFp16);        \
  BENCHMARK_CAPTURE(fn, bf16, KvFormat::kBf16);        \
  BENCHMARK_CAPTURE(fn, fp8_e4m3, KvFormat::kFp8E4M3); \
  BENCHMARK_CAPTURE(fn, int8, KvFormat::kInt8);        \
  BENCHMARK_CAPTURE(fn, fp4_e2m1, KvFormat::kFp4E2M1); \
  BENCHMARK_CAPTURE(fn, int4, KvFormat::kInt4)

KV_FORMAT_BENCHMARKS(BM_Encode);
KV_FORMAT_BENCHMARKS(BM_Decode);
BENCHMARK_CAPTURE(BM_EncodeScalar, fp16, KvFormat::kFp16);
BENCHMARK_CAPTURE(BM_EncodeScalar, int8, KvFormat::kInt8);
BENCHMARK_CAPTURE(BM_DecodeScalar, fp16, KvFormat::kFp16);
BENCHMARK_CAPTURE(BM_DecodeScalar, int8, KvFormat::kInt8);

}  // namespace
}  // namespace kvcast

BENCHMARK_MAIN();
