// Routing cost per request with a large prefix index: PrefixIndex::Match
// over a prompt's chain plus ChoosePrefill / ChooseDecode, the work the
// scheduler does under its lock for each request.
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "services/scheduler/prefix_index.h"
#include "services/scheduler/router.h"

namespace kvcast::scheduler {
namespace {

// `chunks` chunks spread over 16 prefill workers as chains of 16 chunks
// (2K-token prompts), each chain held by 2 workers.
struct Fixture {
  PrefixIndex index;
  PublishedPrefixes published{1 << 20};
  std::vector<std::vector<Hash128>> chains;
  std::vector<Candidate> workers;
  explicit Fixture(int chunks) {
    std::mt19937_64 rng(1);
    for (int c = 0; c < chunks / 16; ++c) {
      std::vector<Hash128> chain;
      for (int i = 0; i < 16; ++i) chain.push_back(Hash128{rng(), rng()});
      index.Stored(WorkerSlot(c % 16), chain);
      index.Stored(WorkerSlot((c + 5) % 16), chain);
      if (c % 64 == 0) published.Add("digest", "p:1", chain);
      chains.push_back(std::move(chain));
    }
    for (int w = 0; w < 16; ++w) {
      Candidate cand;
      cand.slot = WorkerSlot(w);
      cand.free_pages = 1000 + w;
      cand.backlog_tokens = 100 * w;
      workers.push_back(cand);
    }
  }
};

void BM_RouteRequest(benchmark::State& state) {
  static Fixture* f = new Fixture(int(state.range(0)));
  RouterOptions options;
  size_t i = 0;
  for (auto _ : state) {
    const auto& chain = f->chains[(i++ * 7919) % f->chains.size()];
    auto held = f->index.Match(chain);
    auto hit = f->published.Longest(chain);
    auto p = ChoosePrefill(f->workers, 2100, held, hit.groups, options);
    auto d = ChooseDecode(f->workers, 2100, 256, held, RouterOptions());
    benchmark::DoNotOptimize(p);
    benchmark::DoNotOptimize(d);
  }
  state.counters["index_chunks"] = double(f->index.num_chunks());
}
BENCHMARK(BM_RouteRequest)->Arg(1 << 20)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kvcast::scheduler

BENCHMARK_MAIN();
