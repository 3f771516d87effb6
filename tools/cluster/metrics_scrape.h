// Test and tooling helpers for the services' HTTP /metrics endpoints.
//
//   ASSIGN_OR_RETURN(std::string text, HttpGet("127.0.0.1:9090", "/metrics"));
//   ASSIGN_OR_RETURN(double n, ScrapeMetric(text, "kvcast_workers", {{"role", "decode"}}));
//
// Thread safety: stateless; every function may be called concurrently.
#ifndef KVCAST_TOOLS_CLUSTER_METRICS_SCRAPE_H_
#define KVCAST_TOOLS_CLUSTER_METRICS_SCRAPE_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace kvcast::cluster {

using Labels = std::vector<std::pair<std::string, std::string>>;

// One HTTP/1.1 GET of `path` from `host_port` ("HOST:PORT" or "[V6]:PORT"),
// with `Connection: close`. Returns the body of a 200 response (honouring
// Content-Length when present). Errors: INVALID_ARGUMENT for a malformed
// address; UNAVAILABLE when the host does not resolve or the connection
// fails; DEADLINE_EXCEEDED past `timeout`; UNKNOWN for a non-200 status or a
// malformed response (the message has the status line).
absl::StatusOr<std::string> HttpGet(const std::string& host_port, const std::string& path,
                                    absl::Duration timeout = absl::Seconds(5));

// Reads the Prometheus text format (0.0.4) in `text` and returns the sum of
// the values of every sample named exactly `name` whose labels include all
// of `labels` (other labels are allowed; empty `labels` matches every series
// of `name`). Label values are unescaped (\\, \", \n) before comparing.
// Errors: NOT_FOUND when no sample matches; INVALID_ARGUMENT when a sample
// line of `name` is malformed (the line is in the message).
absl::StatusOr<double> ScrapeMetric(absl::string_view text, absl::string_view name,
                                    const Labels& labels = {});

}  // namespace kvcast::cluster

#endif  // KVCAST_TOOLS_CLUSTER_METRICS_SCRAPE_H_
