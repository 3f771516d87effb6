#include "services/common/metrics.h"

#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace kvcast::services {
namespace {

TEST(MetricsTest, RendersCountersAndGaugesWithSharedHeader) {
  MetricsRegistry r;
  Counter* pre = r.AddCounter("kvcast_requests_total", "Requests received.",
                              {{"role", "prefill"}, {"model", "tiny"}});
  Counter* dec = r.AddCounter("kvcast_requests_total", "ignored help", {{"role", "decode"}});
  Gauge* g = r.AddGauge("kvcast_inflight", "In-flight\nrequests \\ now.");
  pre->Increment();
  pre->Increment(2.5);
  pre->Increment(-7);  // Ignored.
  dec->Increment();
  g->Set(10);
  g->Add(-3);
  EXPECT_EQ(pre->value(), 3.5);
  EXPECT_EQ(g->value(), 7);
  EXPECT_EQ(r.Render(),
            "# HELP kvcast_requests_total Requests received.\n"
            "# TYPE kvcast_requests_total counter\n"
            "kvcast_requests_total{role=\"prefill\",model=\"tiny\"} 3.5\n"
            "kvcast_requests_total{role=\"decode\"} 1\n"
            "# HELP kvcast_inflight In-flight\\nrequests \\\\ now.\n"
            "# TYPE kvcast_inflight gauge\n"
            "kvcast_inflight 7\n");
}

TEST(MetricsTest, EscapesLabelValues) {
  MetricsRegistry r;
  r.AddGauge("g", "h", {{"path", "a\\b\"c\nd"}})->Set(1);
  EXPECT_NE(r.Render().find("g{path=\"a\\\\b\\\"c\\nd\"} 1\n"), std::string::npos)
      << r.Render();
}

TEST(MetricsTest, HistogramIsCumulativeWithInclusiveBounds) {
  MetricsRegistry r;
  Histogram* h = r.AddHistogram("lat_seconds", "Latency.", {0.1, 1, 10}, {{"op", "x"}});
  for (double v : {0.05, 0.1, 0.5, 1.0, 5.0, 100.0, std::nan("")}) h->Observe(v);
  EXPECT_EQ(r.Render(),
            "# HELP lat_seconds Latency.\n"
            "# TYPE lat_seconds histogram\n"
            "lat_seconds_bucket{op=\"x\",le=\"0.1\"} 2\n"
            "lat_seconds_bucket{op=\"x\",le=\"1\"} 4\n"
            "lat_seconds_bucket{op=\"x\",le=\"10\"} 5\n"
            "lat_seconds_bucket{op=\"x\",le=\"+Inf\"} 6\n"
            "lat_seconds_sum{op=\"x\"} 106.65\n"
            "lat_seconds_count{op=\"x\"} 6\n");
}

TEST(MetricsTest, CallbackGaugeIsReadAtRenderTime) {
  MetricsRegistry r;
  double pages = 5;
  r.AddCallbackGauge("kv_free_pages", "Free pages.", [&] { return pages; });
  EXPECT_NE(r.Render().find("kv_free_pages 5\n"), std::string::npos);
  pages = 42;
  EXPECT_NE(r.Render().find("kv_free_pages 42\n"), std::string::npos);
  // A callback may use the registry (no lock is held while it runs).
  bool inner = false;
  r.AddCallbackGauge("reentrant", "h", [&] {
    if (inner) return 0.0;
    inner = true;
    double v = r.Render().empty() ? 0.0 : 1.0;
    inner = false;
    return v;
  });
  EXPECT_NE(r.Render().find("reentrant 1\n"), std::string::npos);
}

TEST(MetricsTest, CallbackCounterIsACounterReadAtRenderTime) {
  MetricsRegistry r;
  double computed = 300;
  r.AddCallbackCounter("prompt_tokens_computed_total", "Tokens computed.", [&] { return computed; });
  std::string text = r.Render();
  EXPECT_NE(text.find("# TYPE prompt_tokens_computed_total counter\n"), std::string::npos) << text;
  EXPECT_NE(text.find("prompt_tokens_computed_total 300\n"), std::string::npos) << text;
  computed = 432;
  EXPECT_NE(r.Render().find("prompt_tokens_computed_total 432\n"), std::string::npos);
}

TEST(MetricsTest, FormatsValuesForPrometheus) {
  EXPECT_EQ(FormatMetricValue(0.1), "0.1");
  EXPECT_EQ(FormatMetricValue(3), "3");
  EXPECT_EQ(FormatMetricValue(-2.5), "-2.5");
  EXPECT_EQ(FormatMetricValue(1e21), "1e+21");
  EXPECT_EQ(FormatMetricValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatMetricValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatMetricValue(std::nan("")), "NaN");
}

TEST(MetricsTest, DefaultLatencyBucketsSpanMillisecondToMinute) {
  std::vector<double> b = DefaultLatencyBuckets();
  ASSERT_GE(b.size(), 10u);
  EXPECT_EQ(b.front(), 0.001);
  EXPECT_EQ(b.back(), 60);
  for (size_t i = 1; i < b.size(); ++i) {
    EXPECT_GT(b[i], b[i - 1]);
    EXPECT_LE(b[i] / b[i - 1], 2.5);
  }
}

TEST(MetricsTest, ValidatesNames) {
  EXPECT_TRUE(IsValidMetricName("a"));
  EXPECT_TRUE(IsValidMetricName("_a:b_1"));
  EXPECT_TRUE(IsValidMetricName(":x"));
  EXPECT_FALSE(IsValidMetricName(""));
  EXPECT_FALSE(IsValidMetricName("1a"));
  EXPECT_FALSE(IsValidMetricName("a-b"));
  EXPECT_FALSE(IsValidMetricName("a b"));
}

TEST(MetricsDeathTest, RegistrationErrorsAbort) {
  MetricsRegistry r;
  r.AddCounter("c_total", "h", {{"a", "1"}, {"b", "2"}});
  EXPECT_DEATH(r.AddCounter("bad-name", "h"), "invalid metric name");
  EXPECT_DEATH(r.AddCounter("c2", "h", {{"0x", "1"}}), "invalid label name");
  EXPECT_DEATH(r.AddCounter("c2", "h", {{"__x", "1"}}), "invalid label name");
  EXPECT_DEATH(r.AddCounter("c2", "h", {{"a", "1"}, {"a", "2"}}), "given twice");
  EXPECT_DEATH(r.AddGauge("c_total", "h"), "registered as counter and as gauge");
  EXPECT_DEATH(r.AddCounter("c_total", "h", {{"b", "2"}, {"a", "1"}}), "registered twice");
  EXPECT_DEATH(r.AddHistogram("h", "h", {1, 1}), "strictly increasing");
  EXPECT_DEATH(r.AddHistogram("h", "h", {1, INFINITY}), "finite");
  EXPECT_DEATH(r.AddHistogram("h", "h", {1}, {{"le", "x"}}), "reserved");
}

TEST(MetricsTest, ConcurrentUpdatesAreNotLost) {
  MetricsRegistry r;
  Counter* c = r.AddCounter("c_total", "h");
  Gauge* g = r.AddGauge("g", "h");
  Histogram* h = r.AddHistogram("h", "h", {0.5});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c->Increment();
        g->Add(1);
        h->Observe(i % 2 ? 1.0 : 0.0);
        if (i % 1000 == 0) r.Render();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c->value(), 40000);
  EXPECT_EQ(g->value(), 40000);
  Histogram::Snapshot s = h->Read();
  EXPECT_EQ(s.count, 40000u);
  EXPECT_EQ(s.cumulative_counts[0], 20000u);
  EXPECT_EQ(s.sum, 20000);
}

}  // namespace
}  // namespace kvcast::services
