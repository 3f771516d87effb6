#include "services/common/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace kvcast::services {
namespace {

enum Type { kCounter, kGauge, kHistogram };
const char* TypeName(int type) {
  return type == kCounter ? "counter" : type == kGauge ? "gauge" : "histogram";
}

[[noreturn]] void Fail(const std::string& msg) {
  std::fprintf(stderr, "kvcast MetricsRegistry: %s\n", msg.c_str());
  std::fflush(stderr);
  std::abort();
}

bool IsLabelName(const std::string& s) {
  if (s.empty() || s.rfind("__", 0) == 0) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
              (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

void AddAtomic(std::atomic<double>& a, double delta) {
  double cur = a.load(std::memory_order_relaxed);
  while (!a.compare_exchange_weak(cur, cur + delta, std::memory_order_relaxed)) {
  }
}

std::string EscapeLabelValue(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string EscapeHelp(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

// `{a="x",b="y"}` with `extra` (the histogram's le) appended; "" when empty.
std::string RenderLabels(const MetricLabels& labels, const std::string& extra = "") {
  if (labels.empty() && extra.empty()) return "";
  std::string out = "{";
  for (const auto& [k, v] : labels) {
    if (out.size() > 1) out += ",";
    absl::StrAppend(&out, k, "=\"", EscapeLabelValue(v), "\"");
  }
  if (!extra.empty()) {
    if (out.size() > 1) out += ",";
    out += extra;
  }
  return out + "}";
}

}  // namespace

std::vector<double> DefaultLatencyBuckets() {
  return {0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2,
          0.5,   1,     2,     5,    10,   20,   30,  60};
}

bool IsValidMetricName(const std::string& name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
              c == ':' || (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

std::string FormatMetricValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, res.ptr);
}

void Counter::Increment(double delta) {
  if (!(delta > 0)) return;  // Also drops NaN.
  AddAtomic(value_, delta);
}

void Gauge::Add(double delta) { AddAtomic(value_, delta); }

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)), counts_(upper_bounds_.size() + 1, 0) {}

void Histogram::Observe(double v) {
  if (std::isnan(v)) return;
  // First bucket whose bound is >= v (buckets are "le", inclusive).
  size_t i = std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), v) -
             upper_bounds_.begin();
  absl::MutexLock lock(&mu_);
  ++counts_[i];
  sum_ += v;
  ++count_;
}

Histogram::Snapshot Histogram::Read() const {
  Snapshot s;
  s.upper_bounds = upper_bounds_;
  absl::MutexLock lock(&mu_);
  uint64_t running = 0;
  for (uint64_t c : counts_) s.cumulative_counts.push_back(running += c);
  s.sum = sum_;
  s.count = count_;
  return s;
}

struct MetricsRegistry::Series {
  MetricLabels labels;
  std::unique_ptr<Counter> counter;
  std::unique_ptr<Gauge> gauge;
  std::unique_ptr<Histogram> histogram;
  std::function<double()> read;  // Callback gauges.
};

struct MetricsRegistry::Family {
  std::string name, help;
  int type;
  std::vector<std::unique_ptr<Series>> series;
};

MetricsRegistry::MetricsRegistry() = default;
MetricsRegistry::~MetricsRegistry() = default;

void MetricsRegistry::AddSeries(const std::string& name, const std::string& help, int type,
                                std::unique_ptr<Series> series) {
  if (!IsValidMetricName(name)) Fail(absl::StrCat("invalid metric name \"", name, "\""));
  MetricLabels sorted = series->labels;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    const std::string& key = sorted[i].first;
    if (!IsLabelName(key)) {
      Fail(absl::StrCat("metric ", name, ": invalid label name \"", key, "\""));
    }
    if (i > 0 && sorted[i - 1].first == key) {
      Fail(absl::StrCat("metric ", name, ": label \"", key, "\" given twice"));
    }
    if (type == kHistogram && key == "le") {
      Fail(absl::StrCat("histogram ", name, ": label \"le\" is reserved"));
    }
  }
  absl::MutexLock lock(&mu_);
  Family* family = nullptr;
  for (auto& f : families_) {
    if (f->name == name) family = f.get();
  }
  if (family == nullptr) {
    families_.push_back(std::make_unique<Family>());
    family = families_.back().get();
    family->name = name;
    family->help = help;
    family->type = type;
  } else if (family->type != type) {
    Fail(absl::StrCat("metric ", name, " registered as ", TypeName(family->type),
                      " and as ", TypeName(type)));
  }
  for (const auto& s : family->series) {
    MetricLabels other = s->labels;
    std::sort(other.begin(), other.end());
    if (other == sorted) {
      Fail(absl::StrCat("metric ", name, RenderLabels(series->labels), " registered twice"));
    }
  }
  // Complete before it is published: Render() may run right after the unlock.
  family->series.push_back(std::move(series));
}

std::unique_ptr<MetricsRegistry::Series> MetricsRegistry::NewSeries(MetricLabels labels) {
  auto series = std::make_unique<Series>();
  series->labels = std::move(labels);
  return series;
}

Counter* MetricsRegistry::AddCounter(const std::string& name, const std::string& help,
                                     MetricLabels labels) {
  auto series = NewSeries(std::move(labels));
  series->counter = std::make_unique<Counter>();
  Counter* raw = series->counter.get();
  AddSeries(name, help, kCounter, std::move(series));
  return raw;
}

Gauge* MetricsRegistry::AddGauge(const std::string& name, const std::string& help,
                                 MetricLabels labels) {
  auto series = NewSeries(std::move(labels));
  series->gauge = std::make_unique<Gauge>();
  Gauge* raw = series->gauge.get();
  AddSeries(name, help, kGauge, std::move(series));
  return raw;
}

void MetricsRegistry::AddCallbackGauge(const std::string& name, const std::string& help,
                                       std::function<double()> read, MetricLabels labels) {
  if (!read) Fail(absl::StrCat("callback gauge ", name, " has no callback"));
  auto series = NewSeries(std::move(labels));
  series->read = std::move(read);
  AddSeries(name, help, kGauge, std::move(series));
}

void MetricsRegistry::AddCallbackCounter(const std::string& name, const std::string& help,
                                         std::function<double()> read, MetricLabels labels) {
  if (!read) Fail(absl::StrCat("callback counter ", name, " has no callback"));
  auto series = NewSeries(std::move(labels));
  series->read = std::move(read);
  AddSeries(name, help, kCounter, std::move(series));
}

Histogram* MetricsRegistry::AddHistogram(const std::string& name, const std::string& help,
                                         std::vector<double> bounds, MetricLabels labels) {
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (!std::isfinite(bounds[i]) || (i > 0 && !(bounds[i] > bounds[i - 1]))) {
      Fail(absl::StrCat("histogram ", name,
                        ": bucket bounds must be finite and strictly increasing"));
    }
  }
  auto series = NewSeries(std::move(labels));
  series->histogram = std::make_unique<Histogram>(std::move(bounds));
  Histogram* raw = series->histogram.get();
  AddSeries(name, help, kHistogram, std::move(series));
  return raw;
}

std::string MetricsRegistry::Render() const {
  // Snapshot the structure under the lock (Family/Series are immutable once
  // added, except for the series lists), then read values without it.
  std::vector<std::pair<const Family*, std::vector<const Series*>>> view;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& f : families_) {
      std::vector<const Series*> series;
      for (const auto& s : f->series) series.push_back(s.get());
      view.emplace_back(f.get(), std::move(series));
    }
  }
  std::string out;
  for (const auto& [f, series] : view) {
    absl::StrAppend(&out, "# HELP ", f->name, " ", EscapeHelp(f->help), "\n");
    absl::StrAppend(&out, "# TYPE ", f->name, " ", TypeName(f->type), "\n");
    for (const Series* s : series) {
      if (f->type != kHistogram) {
        double v = s->counter ? s->counter->value()
                   : s->gauge ? s->gauge->value()
                              : s->read();
        absl::StrAppend(&out, f->name, RenderLabels(s->labels), " ", FormatMetricValue(v),
                        "\n");
        continue;
      }
      Histogram::Snapshot h = s->histogram->Read();
      for (size_t i = 0; i < h.cumulative_counts.size(); ++i) {
        std::string le = i < h.upper_bounds.size() ? FormatMetricValue(h.upper_bounds[i])
                                                   : "+Inf";
        absl::StrAppend(&out, f->name, "_bucket",
                        RenderLabels(s->labels, absl::StrCat("le=\"", le, "\"")), " ",
                        h.cumulative_counts[i], "\n");
      }
      absl::StrAppend(&out, f->name, "_sum", RenderLabels(s->labels), " ",
                      FormatMetricValue(h.sum), "\n");
      absl::StrAppend(&out, f->name, "_count", RenderLabels(s->labels), " ", h.count, "\n");
    }
  }
  return out;
}

}  // namespace kvcast::services
