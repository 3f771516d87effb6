#include "services/scheduler/admission.h"

#include <optional>
#include <utility>

#include "gtest/gtest.h"

namespace kvcast::scheduler {
namespace {

TEST(AdmissionTest, ATicketHoldsItsQueueSlotUntilDestroyed) {
  Admission a(/*max_queue=*/2, {});
  Admission::Refusal why;
  {
    auto t1 = a.Admit("", 10, &why);
    auto t2 = a.Admit("", 10, &why);
    ASSERT_TRUE(t1.ok() && t2.ok());
    EXPECT_EQ(a.in_flight(), 2);
    auto t3 = a.Admit("", 10, &why);
    EXPECT_EQ(t3.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_NE(t3.status().message().find("--max_queue"), std::string::npos);
    EXPECT_FALSE(why.by_tenant);
    EXPECT_EQ(why.retry_after, absl::Seconds(1));
    EXPECT_EQ(a.in_flight(), 2);
  }
  EXPECT_EQ(a.in_flight(), 0);
}

TEST(AdmissionTest, AMovedTicketReleasesOnce) {
  Admission a(1, {/*max_in_flight=*/1, 0});
  Admission::Refusal why;
  {
    std::optional<Admission::Ticket> kept;
    {
      auto t = a.Admit("acme", 10, &why);
      ASSERT_TRUE(t.ok());
      kept.emplace(std::move(*t));
    }  // the moved-from ticket is destroyed here: nothing is released
    EXPECT_EQ(a.in_flight(), 1);
    EXPECT_FALSE(a.Admit("acme", 10, &why).ok());
  }
  EXPECT_EQ(a.in_flight(), 0);
  EXPECT_TRUE(a.Admit("acme", 10, &why).ok());
}

TEST(AdmissionTest, ATenantsRefusalHoldsNoQueueSlot) {
  Admission a(/*max_queue=*/2, {/*max_in_flight=*/1, 0});
  Admission::Refusal why;
  auto t1 = a.Admit("acme", 10, &why);
  ASSERT_TRUE(t1.ok());
  for (int i = 0; i < 5; ++i) {
    auto refused = a.Admit("acme", 10, &why);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_TRUE(why.by_tenant);
  }
  EXPECT_EQ(a.in_flight(), 1);
  EXPECT_TRUE(a.Admit("globex", 10, &why).ok());
}

TEST(AdmissionTest, AFullQueueGivesTheTenantsCountBack) {
  Admission a(/*max_queue=*/1, {/*max_in_flight=*/1, 0});
  Admission::Refusal why;
  auto held = a.Admit("acme", 10, &why);
  ASSERT_TRUE(held.ok());
  // globex is refused by the queue, not by its own limit...
  EXPECT_FALSE(a.Admit("globex", 10, &why).ok());
  EXPECT_FALSE(why.by_tenant);
  // ...and that refusal did not count against it: once the queue has room,
  // its first request passes.
  { Admission::Ticket gone = std::move(*held); }
  EXPECT_TRUE(a.Admit("globex", 10, &why).ok());
}

}  // namespace
}  // namespace kvcast::scheduler
