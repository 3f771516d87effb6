#include "tools/cli/latency_plot.h"

#include <regex>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace kvcast::cli {
namespace {

int Count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

LatencyPlot Example() {
  LatencyPlot p;
  p.title = "kvcast bench: 4 requests <closed loop>";
  p.machine = "Machine (client): AMD EPYC, 2 cores";
  p.panels = {{"time to first token", {{"client", {40, 10, 30, 20}}, {"server", {8, 18, 28, 38}}}},
              {"time between tokens", {{"client", {5, 6}}, {"empty", {}}}}};
  return p;
}

TEST(LatencyPlotTest, TickStepsAreRoundAndFew) {
  EXPECT_DOUBLE_EQ(TickStep(1000), 200);
  EXPECT_DOUBLE_EQ(TickStep(100), 20);
  EXPECT_DOUBLE_EQ(TickStep(7), 1);
  EXPECT_DOUBLE_EQ(TickStep(3.5), 0.5);
  for (double max : {0.3, 4.0, 55.0, 999.0, 12345.0}) {
    const double ticks = max / TickStep(max);
    EXPECT_GE(ticks, 3) << max;
    EXPECT_LE(ticks, 8) << max;
  }
}

TEST(LatencyPlotTest, SaysWhatItShows) {
  const std::string svg = LatencyPlotSvg(Example());
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("kvcast bench: 4 requests &lt;closed loop&gt;"), std::string::npos);
  EXPECT_NE(svg.find(">time to first token (ms)</text>"), std::string::npos);
  EXPECT_NE(svg.find(">time between tokens (ms)</text>"), std::string::npos);
  EXPECT_EQ(Count(svg, "class=\"ylabel\""), 2);
  EXPECT_NE(svg.find("Machine (client): AMD EPYC, 2 cores"), std::string::npos);
  // One curve and one legend entry per non-empty series, with its percentiles.
  EXPECT_EQ(Count(svg, "class=\"series\""), 3);
  EXPECT_EQ(Count(svg, "class=\"legend\""), 3);
  EXPECT_NE(svg.find("client: p50 20, p99 40 ms (4)"), std::string::npos);
  EXPECT_NE(svg.find("server: p50 18, p99 38 ms (4)"), std::string::npos);
  EXPECT_EQ(svg.find("empty:"), std::string::npos);
}

TEST(LatencyPlotTest, CurvesAreCumulative) {
  const std::string svg = LatencyPlotSvg(Example());
  const std::regex points("class=\"series\"[^>]*points=\"([^\"]*)\"");
  int curves = 0;
  for (std::sregex_iterator it(svg.begin(), svg.end(), points), end; it != end; ++it) {
    ++curves;
    double last_x = -1, last_y = 1e9, first_y = 0;
    int n = 0;
    for (absl::string_view xy : absl::StrSplit((*it)[1].str(), ' ')) {
      std::vector<std::string> v = absl::StrSplit(xy, ',');
      ASSERT_EQ(v.size(), 2u);
      double x, y;
      ASSERT_TRUE(absl::SimpleAtod(v[0], &x) && absl::SimpleAtod(v[1], &y));
      EXPECT_GE(x, last_x);  // latencies ascending
      EXPECT_LE(y, last_y);  // the share only rises (SVG's y grows downwards)
      if (n++ == 0) first_y = y;
      last_x = x;
      last_y = y;
    }
    EXPECT_EQ(first_y - last_y, 310);  // from 0% to 100% of the panel's height
  }
  EXPECT_EQ(curves, 3);
}

}  // namespace
}  // namespace kvcast::cli
