#include "tools/cli/autoscale.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "tools/cluster/metrics_scrape.h"

namespace kvcast::cli {

int AutoscaleStep(double desired, int serving, const AutoscaleOptions& options) {
  if (!(desired > 0)) return 0;
  const int target =
      std::clamp(int(std::ceil(desired - 1e-9)), options.min_workers, options.max_workers);
  return target > serving ? 1 : target < serving ? -1 : 0;
}

std::string Autoscale(cluster::LocalCluster& cluster, const AutoscaleOptions& options) {
  auto text = cluster::HttpGet(cluster.scheduler_metrics_address(), "/metrics", absl::Seconds(2));
  if (!text.ok()) return absl::StrCat("autoscale: the scheduler's /metrics: ", text.status().ToString());
  std::string out;
  for (cluster::Role role : {cluster::Role::kPrefill, cluster::Role::kDecode}) {
    const char* name = cluster::RoleName(role);
    auto desired = cluster::ScrapeMetric(*text, "kvcast_planner_desired_replicas", {{"role", name}});
    if (!desired.ok()) {
      absl::StrAppend(&out, "autoscale: no plan for ", name, " (", desired.status().ToString(),
                      "; the scheduler's --planner_interval_s 0?)\n");
      continue;
    }
    const int serving = cluster.serving_workers(role);
    const int step = AutoscaleStep(*desired, serving, options);
    if (step == 0) continue;
    const absl::StatusOr<int> changed =
        step > 0 ? cluster.AddWorker(role) : cluster.DrainWorker(role);
    absl::StrAppend(&out, "autoscale: ", name, " ", serving, " -> ", serving + step,
                    ": the planner asks for ", *desired,
                    changed.ok() ? absl::StrCat(step > 0 ? "; started " : "; draining ", name, "-",
                                                *changed)
                                 : absl::StrCat("; failed: ", changed.status().ToString()),
                    "\n");
  }
  return out;
}

}  // namespace kvcast::cli
