// For the worker's KV landing tests (kv_landing_test, land_kv_test): one
// side's memory (a CPU backend and a page pool), a KvPublisher that
// publishes to the session it connects over, random KV, and a check that
// landed pages hold a prompt's KV as the fp16 track carries it.
#ifndef KVCAST_SERVICES_WORKER_TESTING_KV_TEST_UTIL_H_
#define KVCAST_SERVICES_WORKER_TESTING_KV_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <random>

#include "common/dtype.h"
#include "engine/kv/kv_page_pool.h"
#include "kernels/backend.h"
#include "transport/kvcache/publisher.h"

namespace kvcast::worker::testing {

struct TestMemory {
  TestMemory(const KvLayout& layout, int pages)
      : backend(NewCpuBackend()), pool(*KvPagePool::Create(backend.get(), layout, pages)) {}
  std::unique_ptr<Backend> backend;
  std::unique_ptr<KvPagePool> pool;
};

// A publisher whose upstream is the session it is connected over (a relay).
class UpstreamPublisher : public kvcache::KvPublisher {
 public:
  using KvPublisher::KvPublisher;
  void OnSessionReady(moqt::MoqtSession* session) override { SetUpstream(session); }
};

// Every K and V value of the pool, uniform in [-2, 2).
inline void FillRandom(KvPagePool* pool, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  for (int l = 0; l < pool->layout().num_layers; ++l) {
    for (float* v : {pool->k_cache(l), pool->v_cache(l)}) {
      for (size_t i = 0; i < pool->layer_values(); ++i) v[i] = u(rng);
    }
  }
}

// Whether tokens [0, n) of `to` (in `to_pool`) hold tokens [first, first +
// n) of `from` (in `from_pool`), K and V, through fp16 as the track carries
// them.
inline ::testing::AssertionResult HoldsFp16Copy(const KvPagePool& from_pool, const KvPages& from,
                                                int first, const KvPagePool& to_pool,
                                                const KvPages& to, int n) {
  const KvLayout& layout = from_pool.layout();
  const int row = layout.token_floats();
  for (int t = 0; t < n; ++t) {
    const int32_t a = SlotsOf(from.ids(), layout.page_tokens, first + t, 1)[0];
    const int32_t b = SlotsOf(to.ids(), layout.page_tokens, t, 1)[0];
    for (int l = 0; l < layout.num_layers; ++l) {
      for (int i = 0; i < row; ++i) {
        const size_t x = size_t(a) * row + i, y = size_t(b) * row + i;
        const float k = HalfToFloat(FloatToHalf(from_pool.k_cache(l)[x]));
        const float v = HalfToFloat(FloatToHalf(from_pool.v_cache(l)[x]));
        if (k != to_pool.k_cache(l)[y] || v != to_pool.v_cache(l)[y]) {
          return ::testing::AssertionFailure()
                 << "token " << first + t << " layer " << l << " value " << i << ": K "
                 << to_pool.k_cache(l)[y] << " (want " << k << "), V " << to_pool.v_cache(l)[y]
                 << " (want " << v << ")";
        }
      }
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace kvcast::worker::testing

#endif  // KVCAST_SERVICES_WORKER_TESTING_KV_TEST_UTIL_H_
