// Speed of the ac codec per core: one 128-token group of synthetic KV
// (testing/synthetic_kv.h) in Llama-3-8B's shape (32 layers, 8 KV heads x
// 128) and SmolLM2-135M's (30 x 3 x 64), encoded into objects and decoded
// back (BM_AcEncodeHalf, BM_AcDecodeHalf: from and into fp16 values, as a
// worker's pages hold them);
// beside it the int8 track's row codec on the same values. Bytes/s
// count fp16-equivalent KV (2 bytes per value), the unit of the issue's
// goal (>= 1 GB/s each way).
//
//   bazel run -c opt //transport/kvcache/ac:ac_codec_benchmark -- [--kernels=avx2]
//
// --kernels caps the ac kernel set (scalar, avx2, avx512: the default, the
// best this CPU runs), as on a CPU without the better sets; the label of
// every ac row names the set that ran.
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "benchmark/benchmark.h"
#include "common/dtype.h"
#include "kernels/kv_codec.h"
#include "transport/kvcache/ac/ac_codec.h"
#include "transport/kvcache/ac/internal/unit_kernels.h"
#include "transport/kvcache/ac/testing/synthetic_kv.h"

namespace kvcast::kvcache::ac {
namespace {

constexpr int kTokens = 128;

AcShape ShapeOf(int64_t which) { return which == 0 ? AcShape{32, 8, 128} : AcShape{30, 3, 64}; }

const std::vector<float>& Kv(int64_t which) {
  static std::vector<float> kv[2];
  if (kv[which].empty()) kv[which] = SyntheticKv(ShapeOf(which), kTokens, 2, false);
  return kv[which];
}

const AcPolicy& PolicyOf(int64_t p) { return p == 0 ? AcHigh() : AcLow(); }

void SetLabel(benchmark::State& state, size_t encoded_bytes) {
  const AcShape s = ShapeOf(state.range(0));
  const double fp16 = double(kTokens) * s.token_floats() * 2;
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(fp16));
  state.counters["vs_fp16"] = encoded_bytes / fp16;
  state.SetLabel(internal::KernelSetName(internal::ActiveKernelSet()));
}

void BM_AcEncode(benchmark::State& state) {
  const AcShape s = ShapeOf(state.range(0));
  AcGroupEncoder enc(s, PolicyOf(state.range(1)));
  std::vector<std::vector<uint8_t>> objects;
  for (auto _ : state) {
    enc.Encode(Kv(state.range(0)).data(), kTokens, &objects);
    benchmark::DoNotOptimize(objects.data());
  }
  size_t bytes = 0;
  for (const auto& o : objects) bytes += o.size();
  SetLabel(state, bytes);
}

// The same from fp16 values, as a worker's KV pages hold them (its
// publisher encodes the fp16 token payloads it gathers from the pages).
void BM_AcEncodeHalf(benchmark::State& state) {
  const AcShape s = ShapeOf(state.range(0));
  static std::vector<uint16_t> half[2];
  std::vector<uint16_t>& kv = half[state.range(0)];
  if (kv.empty()) {
    for (float v : Kv(state.range(0))) kv.push_back(FloatToHalf(v));
  }
  AcGroupEncoder enc(s, PolicyOf(state.range(1)));
  std::vector<std::vector<uint8_t>> objects;
  for (auto _ : state) {
    enc.EncodeHalf(kv.data(), kTokens, &objects);
    benchmark::DoNotOptimize(objects.data());
  }
  size_t bytes = 0;
  for (const auto& o : objects) bytes += o.size();
  SetLabel(state, bytes);
}

// Decoding into floats (Out = float) or, as a worker lands them in its
// pages, fp16 values (Out = uint16_t).
template <typename Out>
void DecodeBench(benchmark::State& state) {
  const AcShape s = ShapeOf(state.range(0));
  AcGroupEncoder enc(s, PolicyOf(state.range(1)));
  std::vector<std::vector<uint8_t>> objects;
  enc.Encode(Kv(state.range(0)).data(), kTokens, &objects);
  AcGroupDecoder dec(s);
  std::vector<absl::Span<const uint8_t>> spans(objects.begin(), objects.end());
  std::vector<Out> out(size_t(kTokens) * s.token_floats());
  for (auto _ : state) {
    absl::Status st;
    if constexpr (std::is_same_v<Out, float>) {
      st = dec.DecodeGroup(spans, out.data());
    } else {
      st = dec.DecodeGroupHalf(spans, out.data());
    }
    if (!st.ok()) state.SkipWithError("decode failed");
    benchmark::DoNotOptimize(out.data());
  }
  size_t bytes = 0;
  for (const auto& o : objects) bytes += o.size();
  SetLabel(state, bytes);
}

void BM_AcDecode(benchmark::State& state) { DecodeBench<float>(state); }
void BM_AcDecodeHalf(benchmark::State& state) { DecodeBench<uint16_t>(state); }

// The int8 track: every row (one layer's K or V of a token) on its own.
void BM_Int8Rows(benchmark::State& state) {
  const AcShape s = ShapeOf(state.range(0));
  const int row = s.num_kv_heads * s.head_dim, rows = kTokens * s.num_layers * 2;
  const size_t row_bytes = KvRowBytes(KvFormat::kInt8, s.num_kv_heads, s.head_dim, s.head_dim);
  std::vector<uint8_t> enc(row_bytes * rows);
  std::vector<float> out(Kv(state.range(0)).size());
  const bool decode = state.range(1) == 1;
  for (int r = 0; r < rows; ++r) {
    EncodeKvRow(KvFormat::kInt8, Kv(state.range(0)).data() + size_t(r) * row, s.num_kv_heads,
                s.head_dim, s.head_dim, enc.data() + r * row_bytes);
  }
  for (auto _ : state) {
    for (int r = 0; r < rows; ++r) {
      if (decode) {
        DecodeKvRow(KvFormat::kInt8, enc.data() + r * row_bytes, s.num_kv_heads, s.head_dim,
                    s.head_dim, out.data() + size_t(r) * row);
      } else {
        EncodeKvRow(KvFormat::kInt8, Kv(state.range(0)).data() + size_t(r) * row, s.num_kv_heads,
                    s.head_dim, s.head_dim, enc.data() + r * row_bytes);
      }
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::DoNotOptimize(enc.data());
  }
  SetLabel(state, enc.size());
}

// Args: shape (0 Llama-3-8B, 1 SmolLM2), policy (0 ac, 1 ac-lo) or, for
// int8, direction (0 encode, 1 decode).
BENCHMARK(BM_AcEncode)->ArgsProduct({{0, 1}, {0, 1}})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AcEncodeHalf)->ArgsProduct({{0, 1}, {0, 1}})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AcDecode)->ArgsProduct({{0, 1}, {0, 1}})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AcDecodeHalf)->ArgsProduct({{0, 1}, {0, 1}})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Int8Rows)->ArgsProduct({{0, 1}, {0, 1}})->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kvcast::kvcache::ac

int main(int argc, char** argv) {
  using kvcast::kvcache::ac::internal::KernelSet;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--kernels=", 10) != 0) {
      argv[kept++] = argv[i];
      continue;
    }
    const std::string name = argv[i] + 10;
    bool known = false;
    for (KernelSet set : {KernelSet::kScalar, KernelSet::kAvx2, KernelSet::kAvx512}) {
      if (name != kvcast::kvcache::ac::internal::KernelSetName(set)) continue;
      if (!kvcast::kvcache::ac::internal::KernelSetAvailable(set)) {
        std::fprintf(stderr, "ac_codec_benchmark: this CPU does not run the %s kernels\n",
                     name.c_str());
        return 2;
      }
      kvcast::kvcache::ac::internal::CapKernelSet(set);
      known = true;
    }
    if (!known) {
      std::fprintf(stderr, "ac_codec_benchmark: --kernels takes scalar, avx2 or avx512, not %s\n",
                   name.c_str());
      return 2;
    }
  }
  argc = kept;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
