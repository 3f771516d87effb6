#include "services/scheduler/tenant_limits.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvcast::scheduler {
namespace {

using ::testing::HasSubstr;

TEST(TenantLimitsTest, InFlightLimitIsPerTenant) {
  TenantLimits limits({/*max_in_flight=*/2, /*prompt_tokens_per_minute=*/0});
  absl::Duration retry;
  EXPECT_TRUE(limits.Admit("flood", 10, &retry).ok());
  EXPECT_TRUE(limits.Admit("flood", 10, &retry).ok());
  absl::Status s = limits.Admit("flood", 10, &retry);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(s.message()), HasSubstr("tenant \"flood\" has 2 requests in flight"));
  EXPECT_EQ(retry, absl::Seconds(1));
  // Another tenant, and the default one, are not held back by the flood.
  EXPECT_TRUE(limits.Admit("calm", 10, &retry).ok());
  EXPECT_TRUE(limits.Admit("", 10, &retry).ok());
  limits.Release("flood");
  EXPECT_TRUE(limits.Admit("flood", 10, &retry).ok());
}

TEST(TenantLimitsTest, PromptTokensPerMinuteRefillContinuously) {
  absl::Time now = absl::FromUnixSeconds(1000);
  TenantLimits limits({0, /*prompt_tokens_per_minute=*/600}, [&] { return now; });
  absl::Duration retry;
  EXPECT_TRUE(limits.Admit("a", 400, &retry).ok());
  EXPECT_TRUE(limits.Admit("a", 200, &retry).ok());
  absl::Status s = limits.Admit("a", 100, &retry);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(s.message()), HasSubstr("600 prompt tokens per minute"));
  EXPECT_EQ(retry, absl::Seconds(10));  // 100 tokens at 10 per second
  EXPECT_TRUE(limits.Admit("b", 600, &retry).ok());  // b has its own budget
  now += absl::Seconds(10);
  EXPECT_TRUE(limits.Admit("a", 100, &retry).ok());
  // A prompt above a minute's budget passes once the bucket is full again.
  now += absl::Minutes(5);
  EXPECT_TRUE(limits.Admit("a", 5000, &retry).ok());
  EXPECT_FALSE(limits.Admit("a", 1, &retry).ok());
}

TEST(TenantLimitsTest, OffByDefault) {
  TenantLimits limits({});
  absl::Duration retry;
  EXPECT_FALSE(limits.enabled());
  for (int i = 0; i < 1000; ++i) EXPECT_TRUE(limits.Admit("t", 1 << 20, &retry).ok());
}

}  // namespace
}  // namespace kvcast::scheduler
