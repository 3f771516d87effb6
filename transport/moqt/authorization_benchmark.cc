// What MoQT authorization costs per request: minting a token (the scheduler,
// once per KV source) and checking one (the relay and the workers, once per
// SUBSCRIBE / FETCH / PUBLISH_NAMESPACE), for the KV namespace shape
// (root, 32-hex-digit model id, 32-hex-digit digest).
#include <benchmark/benchmark.h>

#include "transport/moqt/authorization.h"

namespace kvcast::moqt {
namespace {

const TrackNamespace kNs = {"moq://kvcache.moq.arpa/v1/", std::string(32, 'a'),
                            std::string(32, 'b')};

std::shared_ptr<HmacTokenAuthority> Authority(int keys) {
  std::vector<std::string> k;
  for (int i = 0; i < keys; ++i) k.push_back(std::string(32, char('k' + i)));
  return *HmacTokenAuthority::Create(k);
}

void BM_Mint(benchmark::State& state) {
  auto auth = Authority(1);
  for (auto _ : state) {
    benchmark::DoNotOptimize(auth->Mint(kNs, kAuthRead, absl::Now() + absl::Minutes(10)));
  }
}
BENCHMARK(BM_Mint);

// Arg: keys configured (the last one signed: rotation's worst case).
void BM_Authorize(benchmark::State& state) {
  auto auth = Authority(int(state.range(0)));
  auto signer = *HmacTokenAuthority::Create({std::string(32, char('k' + state.range(0) - 1))});
  const AuthToken token = signer->Mint(kNs, kAuthRead, absl::Now() + absl::Minutes(10));
  for (auto _ : state) {
    benchmark::DoNotOptimize(auth->Authorize(kAuthSubscribe, kNs, {token}));
  }
}
BENCHMARK(BM_Authorize)->Arg(1)->Arg(2);

}  // namespace
}  // namespace kvcast::moqt

BENCHMARK_MAIN();
