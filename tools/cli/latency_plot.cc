#include "tools/cli/latency_plot.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/cli/bench.h"

namespace kvcast::cli {
namespace {

constexpr double kWidth = 900, kPanelHeight = 330, kTop = 40, kBottom = 70;
constexpr double kLeft = 60, kRight = 20, kGap = 60;
constexpr const char* kColors[] = {"#1f5fbf", "#d0701c", "#6a9a3a", "#8a3ab9"};

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string Text(double x, double y, const std::string& s, const char* anchor = "middle",
                 int size = 12, const char* extra = "") {
  return absl::StrFormat("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" font-size=\"%d\"%s>%s"
                         "</text>\n",
                         x, y, anchor, size, extra, Escape(s));
}

std::string Line(double x1, double y1, double x2, double y2, const char* style) {
  return absl::StrFormat("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" %s/>\n", x1, y1,
                         x2, y2, style);
}

// One panel at (x0, y0) of size w x h.
std::string Panel(const LatencyPanel& p, double x0, double y0, double w, double h) {
  double max = 0;
  for (const LatencySeries& s : p.series) {
    for (double v : s.values_ms) max = std::max(max, v);
  }
  const double step = TickStep(max > 0 ? max : 1);
  const double xmax = std::ceil((max > 0 ? max : 1) / step) * step;
  auto X = [&](double v) { return x0 + w * v / xmax; };
  auto Y = [&](double q) { return y0 + h * (1 - q); };
  std::string svg = absl::StrFormat(
      "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
      "stroke=\"#333\"/>\n", x0, y0, w, h);
  for (double v = 0; v <= xmax + step / 2; v += step) {
    svg += Line(X(v), y0, X(v), y0 + h, "stroke=\"#ddd\"");
    svg += Text(X(v), y0 + h + 16, absl::StrFormat("%g", v), "middle", 11);
  }
  for (int q = 0; q <= 100; q += 25) {
    svg += Line(x0, Y(q / 100.0), x0 + w, Y(q / 100.0), "stroke=\"#ddd\"");
    svg += Text(x0 - 6, Y(q / 100.0) + 4, absl::StrCat(q, "%"), "end", 11);
  }
  svg += Text(x0 + w / 2, y0 + h + 36, absl::StrCat(p.measure, " (ms)"), "middle", 12,
              " class=\"xlabel\"");
  svg += absl::StrFormat(
      "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"12\" class=\"ylabel\" "
      "transform=\"rotate(-90 %.1f %.1f)\">at or below (%% of samples)</text>\n",
      x0 - 42, y0 + h / 2, x0 - 42, y0 + h / 2);
  int color = 0, legend_row = 0;
  for (const LatencySeries& s : p.series) {
    if (s.values_ms.empty()) continue;
    std::vector<double> v = s.values_ms;
    std::sort(v.begin(), v.end());
    const char* c = kColors[color++ % 4];
    std::string points = absl::StrFormat("%.1f,%.1f", X(0), Y(0));
    for (size_t i = 0; i < v.size(); ++i) {  // a step up at each value
      absl::StrAppend(&points, absl::StrFormat(" %.1f,%.1f %.1f,%.1f", X(v[i]),
                                               Y(double(i) / v.size()), X(v[i]),
                                               Y(double(i + 1) / v.size())));
    }
    svg += absl::StrFormat("<polyline class=\"series\" fill=\"none\" stroke=\"%s\" "
                           "stroke-width=\"1.8\" points=\"%s\"/>\n", c, points);
    // Bottom right, inside the panel (the curves rise on the left).
    const double lx = x0 + std::max(8.0, w - 285), ly = y0 + h - 12 - 15 * legend_row++;
    svg += Line(lx, ly - 4, lx + 18, ly - 4,
                absl::StrCat("stroke=\"", c, "\" stroke-width=\"2\"").c_str());
    svg += Text(lx + 22, ly, absl::StrFormat("%s: p50 %.3g, p99 %.3g ms (%zu)", s.name,
                                             Percentile(v, 0.5), Percentile(v, 0.99), v.size()),
                "start", 10, " class=\"legend\"");
  }
  return svg;
}

}  // namespace

double TickStep(double max) {
  const double raw = max / 8;  // at most 8 ticks, at least 3.2
  const double base = std::pow(10, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0}) {
    if (raw <= m * base) return m * base;
  }
  return 10 * base;
}

std::string LatencyPlotSvg(const LatencyPlot& plot) {
  const int n = std::max<int>(1, int(plot.panels.size()));
  const double w = (kWidth - kLeft - kRight - (n - 1) * (kGap + kLeft)) / n;
  const double height = kTop + kPanelHeight + kBottom;
  std::string svg = absl::StrFormat(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
      "font-family=\"DejaVu Sans, Arial, sans-serif\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
      kWidth, height);
  svg += Text(kWidth / 2, 24, plot.title, "middle", 15, " font-weight=\"bold\" class=\"title\"");
  for (int i = 0; i < int(plot.panels.size()); ++i) {
    svg += Panel(plot.panels[i], kLeft + i * (w + kGap + kLeft), kTop, w, kPanelHeight - 20);
  }
  svg += Text(8, height - 10, plot.machine, "start", 10, " fill=\"#555\" class=\"machine\"");
  return svg + "</svg>\n";
}

}  // namespace kvcast::cli
