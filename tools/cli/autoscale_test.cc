#include "tools/cli/autoscale.h"

#include "gtest/gtest.h"

namespace kvcast::cli {
namespace {

TEST(AutoscaleTest, OneWorkerAStepTowardsThePlanWithinTheBounds) {
  AutoscaleOptions o;
  o.min_workers = 1;
  o.max_workers = 4;
  EXPECT_EQ(AutoscaleStep(3, 1, o), 1);
  EXPECT_EQ(AutoscaleStep(2.2, 2, o), 1);  // 2.2 replicas need 3
  EXPECT_EQ(AutoscaleStep(1, 3, o), -1);
  EXPECT_EQ(AutoscaleStep(2, 2, o), 0);
  EXPECT_EQ(AutoscaleStep(9, 4, o), 0);   // at the maximum
  EXPECT_EQ(AutoscaleStep(9, 5, o), -1);  // over it
  EXPECT_EQ(AutoscaleStep(0, 2, o), 0);   // no plan yet: nothing changes
  o.min_workers = 2;
  EXPECT_EQ(AutoscaleStep(1, 2, o), 0);   // at the minimum
}

}  // namespace
}  // namespace kvcast::cli
