// `kvcast bench --plot FILE`: the latency distributions as an SVG file, each
// panel the cumulative distribution (share of requests or gaps at or below
// a latency) of one measure, with its series side by side (what the client
// saw beside what the servers measured), the p50/p99 of each in the legend,
// axis labels with units, a title and the machine it ran on. Plain SVG 1.1,
// no dependencies: it opens in any browser.
#ifndef KVCAST_TOOLS_CLI_LATENCY_PLOT_H_
#define KVCAST_TOOLS_CLI_LATENCY_PLOT_H_

#include <string>
#include <vector>

namespace kvcast::cli {

struct LatencySeries {
  std::string name;
  std::vector<double> values_ms;  // any order; empty series are left out
};

struct LatencyPanel {
  std::string measure;  // "time to first token": the x label is "<measure> (ms)"
  std::vector<LatencySeries> series;
};

struct LatencyPlot {
  std::string title;
  std::string machine;  // "Machine: ..." under the panels
  std::vector<LatencyPanel> panels;
};

// The SVG document. Values are drawn up to the largest; x ticks at round
// numbers from 0.
std::string LatencyPlotSvg(const LatencyPlot& plot);

// Tick spacing: 1, 2 or 5 times a power of ten, the smallest giving at most
// 8 ticks up to `max` (so at least 3).
double TickStep(double max);

}  // namespace kvcast::cli

#endif  // KVCAST_TOOLS_CLI_LATENCY_PLOT_H_
