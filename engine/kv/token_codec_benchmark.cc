// Throughput of the fixed-size KV tracks through TokenCodec on the CPU
// backend, unrotated against rotated (int4 / int4-rot, fp4-e2m1 /
// fp4-e2m1-rot), and fp16 (from fp16 pages a gather of each token's rows
// into its payload, what sending pages by reference would save): 128 tokens of a Llama-3-8B layer shape (8 KV heads x 128
// dims, 4 layers) in scattered slots of fp16 pages, as a CPU worker keeps
// them. Bytes processed are the fp16-equivalent input (2 bytes per value).
//   bazel build //engine/kv:token_codec_benchmark &&
//   bazel-bin/engine/kv/token_codec_benchmark
#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "engine/kv/token_codec.h"

namespace kvcast {
namespace {

constexpr int kTokens = 128, kPages = 64;

struct Setup {
  Setup(KvFormat format, bool rotated) : backend(NewCpuBackend()) {
    KvLayout layout{4, 8, 128, 16, backend->Fp16KvStorage()};
    pool = *KvPagePool::Create(backend.get(), layout, kPages);
    codec.emplace(layout, format, rotated);
    std::mt19937 rng(1);
    std::normal_distribution<float> dist(0.f, 1.f);
    std::vector<float> row(layout.token_floats());
    std::vector<int32_t> all(size_t(kPages) * 16);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    slots.assign(all.begin(), all.begin() + kTokens);
    // Every slot's values, written through the fp16 track's decoder.
    const TokenCodec fp16(layout, KvFormat::kFp16);
    std::vector<uint8_t> bytes(fp16.token_bytes());
    for (int32_t s : all) {
      for (size_t i = 0; i < bytes.size(); i += 2) {
        const uint16_t h = FloatToHalf(dist(rng));
        bytes[i] = uint8_t(h);
        bytes[i + 1] = uint8_t(h >> 8);
      }
      (void)fp16.Decode(backend.get(), bytes.data(), {&s, 1}, pool.get());
    }
    encoded.resize(kTokens * codec->token_bytes());
    fp16_bytes = kTokens * fp16.token_bytes();
  }
  std::unique_ptr<Backend> backend;
  std::unique_ptr<KvPagePool> pool;
  std::optional<TokenCodec> codec;
  std::vector<int32_t> slots;
  std::vector<uint8_t> encoded;
  size_t fp16_bytes = 0;
};

void BM_Encode(benchmark::State& state, KvFormat format, bool rotated) {
  Setup s(format, rotated);
  for (auto _ : state) {
    if (!s.codec->Encode(s.backend.get(), *s.pool, s.slots, s.encoded.data()).ok()) {
      state.SkipWithError("encode failed");
    }
    benchmark::DoNotOptimize(s.encoded.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * s.fp16_bytes);
}

void BM_Decode(benchmark::State& state, KvFormat format, bool rotated) {
  Setup s(format, rotated);
  (void)s.codec->Encode(s.backend.get(), *s.pool, s.slots, s.encoded.data());
  for (auto _ : state) {
    if (!s.codec->Decode(s.backend.get(), s.encoded.data(), s.slots, s.pool.get()).ok()) {
      state.SkipWithError("decode failed");
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * s.fp16_bytes);
}

BENCHMARK_CAPTURE(BM_Encode, fp16, KvFormat::kFp16, false);
BENCHMARK_CAPTURE(BM_Encode, int4, KvFormat::kInt4, false);
BENCHMARK_CAPTURE(BM_Encode, int4_rot, KvFormat::kInt4, true);
BENCHMARK_CAPTURE(BM_Encode, fp4_e2m1, KvFormat::kFp4E2M1, false);
BENCHMARK_CAPTURE(BM_Encode, fp4_e2m1_rot, KvFormat::kFp4E2M1, true);
BENCHMARK_CAPTURE(BM_Decode, int4, KvFormat::kInt4, false);
BENCHMARK_CAPTURE(BM_Decode, int4_rot, KvFormat::kInt4, true);
BENCHMARK_CAPTURE(BM_Decode, fp4_e2m1, KvFormat::kFp4E2M1, false);
BENCHMARK_CAPTURE(BM_Decode, fp4_e2m1_rot, KvFormat::kFp4E2M1, true);

}  // namespace
}  // namespace kvcast

BENCHMARK_MAIN();
