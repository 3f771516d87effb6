// ExportMoqtAuthMetrics: each verdict the authority counts appears as its
// own series (distinct counts, so a swapped pair shows), read at render
// time (not copied at export).
#include "services/common/moqt_auth_metrics.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace kvcast::services {
namespace {

using moqt::AuthToken;
using moqt::HmacTokenAuthority;

TEST(MoqtAuthMetricsTest, EveryVerdictIsItsOwnSeriesReadWhenRendered) {
  auto authority = HmacTokenAuthority::Create({std::string(32, 'k')});
  ASSERT_TRUE(authority.ok()) << authority.status();
  absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  (*authority)->SetClockForTest([&now] { return now; });
  MetricsRegistry metrics;
  ExportMoqtAuthMetrics(*authority, &metrics);

  const moqt::TrackNamespace ns = {"kvcast", "model", "digest"};
  const AuthToken good = (*authority)->Mint(ns, moqt::kAuthRead, now + absl::Minutes(1));
  AuthToken junk = good;
  junk.value = "kvt1";
  // Counted after the export: the gauges read the authority when rendered.
  for (int i = 0; i < 3; ++i) EXPECT_TRUE((*authority)->Authorize(moqt::kAuthSubscribe, ns, {good}).ok());
  EXPECT_FALSE((*authority)->Authorize(moqt::kAuthPublish, ns, {good}).ok());   // wrong op
  EXPECT_FALSE((*authority)->Authorize(moqt::kAuthSubscribe, ns, {}).ok());     // no token
  EXPECT_FALSE((*authority)->Authorize(moqt::kAuthSubscribe, ns, {junk}).ok());
  now += absl::Minutes(2);
  EXPECT_FALSE((*authority)->Authorize(moqt::kAuthFetch, ns, {good}).ok());
  EXPECT_FALSE((*authority)->Authorize(moqt::kAuthSubscribe, ns, {good}).ok());

  const std::string text = metrics.Render();
  for (const auto& [result, count] : {std::pair<const char*, int>{"allowed", 3},
                                      {"unauthorized", 2},
                                      {"malformed", 1},
                                      {"expired", 2}}) {
    const std::string line = absl::StrCat("kvcast_moqt_auth_requests{result=\"", result, "\"} ", count, "\n");
    EXPECT_NE(text.find(line), std::string::npos) << line << "in\n" << text;
  }
}

}  // namespace
}  // namespace kvcast::services
