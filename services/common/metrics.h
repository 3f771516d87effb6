// Prometheus metrics for the kvcast services, rendered in the text
// exposition format 0.0.4 (what `GET /metrics` returns, see metrics_server.h).
//
//   MetricsRegistry registry;
//   Counter* requests = registry.AddCounter(
//       "kvcast_requests_total", "Requests received.", {{"role", "prefill"}});
//   Histogram* ttft = registry.AddHistogram(
//       "kvcast_ttft_seconds", "Time to first token.", DefaultLatencyBuckets());
//   registry.AddCallbackGauge("kvcast_kv_free_pages", "Free KV pages.",
//                             [&pool] { return pool.free_pages(); });
//   requests->Increment();  ttft->Observe(0.042);
//   std::string text = registry.Render();
//
// A metric is a name, a help text and a type; it has one or more series,
// each with a fixed set of labels given at registration. Registering another
// series under an existing name adds it to that metric (HELP/TYPE printed
// once; the first help text wins).
//
// Registration errors are programming errors and abort the process with a
// message on stderr: a name not matching [a-zA-Z_:][a-zA-Z0-9_:]*, a label
// name not matching [a-zA-Z_][a-zA-Z0-9_]* or starting with "__", a repeated
// label name, "le" on a histogram, the same name with another type, the same
// name + labels twice, or histogram bounds that are not finite and strictly
// increasing. Label values may be any bytes; they are escaped when rendered.
//
// Ownership: the registry owns every Counter/Gauge/Histogram; the pointers
// it returns stay valid for the registry's lifetime. Series are never removed.
//
// Thread safety: all methods of all classes here may be called concurrently.
// Counter and Gauge updates are lock-free atomics; Histogram::Observe takes a
// per-histogram mutex. Render() calls the callback gauges on the rendering
// thread without holding the registry's lock, so a callback may use the
// registry, but it must be safe to call from that thread.
#ifndef KVCAST_SERVICES_COMMON_METRICS_H_
#define KVCAST_SERVICES_COMMON_METRICS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace kvcast::services {

// {{"key", "value"}, ...}, rendered in the given order.
using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// Upper bounds in seconds for request/step latencies: 1 ms .. 60 s in a
// 1-2-5 progression (16 buckets, plus the implicit +Inf).
std::vector<double> DefaultLatencyBuckets();

// A monotonically increasing value (rendered with TYPE counter).
class Counter {
 public:
  // Adds `delta`; negative or NaN deltas are ignored (a counter never falls).
  void Increment(double delta = 1.0);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// A value that goes up and down (rendered with TYPE gauge).
class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double delta);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// Counts observations into buckets by upper bound (rendered cumulatively as
// NAME_bucket{le="..."} including le="+Inf", NAME_sum and NAME_count).
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);

  // NaN observations are ignored.
  void Observe(double v);

  struct Snapshot {
    std::vector<double> upper_bounds;
    std::vector<uint64_t> cumulative_counts;  // One per bound, then +Inf.
    double sum = 0;
    uint64_t count = 0;
  };
  // A consistent view (count == the +Inf bucket).
  Snapshot Read() const;

 private:
  const std::vector<double> upper_bounds_;
  mutable absl::Mutex mu_;
  std::vector<uint64_t> counts_ ABSL_GUARDED_BY(mu_);  // Per bucket, not cumulative.
  double sum_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t count_ ABSL_GUARDED_BY(mu_) = 0;
};

class MetricsRegistry {
 public:
  MetricsRegistry();
  ~MetricsRegistry();
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  Counter* AddCounter(const std::string& name, const std::string& help,
                      MetricLabels labels = {});
  Gauge* AddGauge(const std::string& name, const std::string& help,
                  MetricLabels labels = {});
  Histogram* AddHistogram(const std::string& name, const std::string& help,
                          std::vector<double> bucket_upper_bounds,
                          MetricLabels labels = {});
  // A gauge whose value is `read()` at each Render() (e.g. free KV pages).
  void AddCallbackGauge(const std::string& name, const std::string& help,
                        std::function<double()> read, MetricLabels labels = {});
  // A counter whose value is `read()` at each Render(): a total kept
  // elsewhere (an engine's tokens computed); `read` must never decrease.
  void AddCallbackCounter(const std::string& name, const std::string& help,
                          std::function<double()> read, MetricLabels labels = {});

  // The whole registry in text format 0.0.4, metrics in registration order.
  std::string Render() const;

 private:
  struct Family;
  struct Series;
  static std::unique_ptr<Series> NewSeries(MetricLabels labels);
  // Validates and publishes `series` (aborting on a registration error).
  void AddSeries(const std::string& name, const std::string& help, int type,
                 std::unique_ptr<Series> series);

  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<Family>> families_ ABSL_GUARDED_BY(mu_);
};

// Whether `name` is a valid metric name. Exposed for flag validation.
bool IsValidMetricName(const std::string& name);

// Formats a sample value the way Prometheus parses it: shortest round-trip
// decimal, "NaN", "+Inf", "-Inf".
std::string FormatMetricValue(double v);

}  // namespace kvcast::services

#endif  // KVCAST_SERVICES_COMMON_METRICS_H_
