// Serves a fixed registry for metrics_oracle_test.py: starts a MetricsServer
// on 127.0.0.1:0, prints its port on stdout, serves until stdin closes.
// The registry's contents are mirrored in metrics_oracle_test.py.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>

#include "services/common/metrics.h"
#include "services/common/metrics_server.h"

int main() {
  using namespace kvcast::services;
  MetricsRegistry r;
  r.AddCounter("kvcast_requests_total", "Requests received.",
               {{"role", "prefill"}, {"note", "a\"b\\c\nd"}})
      ->Increment(3);
  r.AddCounter("kvcast_requests_total", "", {{"role", "decode"}})->Increment(1.5);
  r.AddGauge("kvcast_inflight_requests", "In flight; help with \\ and\nnewline.")->Set(-2.5);
  r.AddGauge("kvcast_unbounded", "An infinite gauge.")->Set(INFINITY);
  r.AddCallbackGauge("kvcast_kv_free_pages", "Free KV pages.", [] { return 1234.0; },
                     {{"pool", "gpu0"}});
  Histogram* h = r.AddHistogram("kvcast_ttft_seconds", "Time to first token.",
                                DefaultLatencyBuckets(), {{"model", "tiny"}});
  for (double v : {0.0005, 0.003, 0.003, 0.7, 100.0}) h->Observe(v);
  r.AddHistogram("kvcast_empty_seconds", "No observations.", {0.5, 1.5});

  auto server = MetricsServer::Start("127.0.0.1:0", &r);
  if (!server.ok()) {
    std::cerr << server.status() << "\n";
    return 1;
  }
  std::cout << (*server)->port() << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
  }
  return 0;
}
