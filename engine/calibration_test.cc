#include "engine/calibration.h"

#include "engine/testing/tiny_model_fixture.h"
#include "gtest/gtest.h"

namespace kvcast {
namespace {

TEST(Calibration, MeasuresAChunkAndAStepAndReturnsItsPages) {
  LoadedTinyModel m = LoadTinyModel();
  auto pool = *KvPagePool::Create(m.backend.get(), m.model->kv_layout(16), 32);
  const uint64_t layers_before = m.model->layers_run();
  auto c = Calibrate(*m.model, pool.get(), 128);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->chunk_tokens, 128);
  EXPECT_GT(c->chunk_ms, 0);
  EXPECT_GT(c->step_ms, 0);
  // A 128-token pass does more work than a one-token one.
  EXPECT_GT(c->chunk_ms, c->step_ms);
  EXPECT_EQ(pool->free_pages(), 32);
  // Warm-up plus 3 repeats of a chunk and a step, every layer counted.
  EXPECT_EQ(m.model->layers_run() - layers_before,
            uint64_t(8 * m.model->config().num_hidden_layers));
}

TEST(Calibration, APoolSmallerThanAChunkRunsWhatItHolds) {
  LoadedTinyModel m = LoadTinyModel();
  auto pool = *KvPagePool::Create(m.backend.get(), m.model->kv_layout(16), 8);
  auto c = Calibrate(*m.model, pool.get(), 128);  // 127 tokens + the step
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->chunk_tokens, 128);
  EXPECT_GT(c->chunk_ms, 0);
  EXPECT_EQ(pool->free_pages(), 8);
  auto all = *pool->Allocate(8);
  EXPECT_EQ(Calibrate(*m.model, pool.get(), 128).status().code(),
            absl::StatusCode::kFailedPrecondition);
  all.Reset();
  EXPECT_EQ(Calibrate(*m.model, pool.get(), 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvcast
