// `kvcast cluster up --autoscale`: the local cluster follows the scheduler's
// planner (services/scheduler/planner.h), as an autoscaler on
// kvcast_planner_desired_replicas would in Kubernetes: every interval it
// reads each role's desired replicas from the scheduler's /metrics and
// starts or drains one worker of a role at a time (a drained worker
// deregisters, finishes its streams and exits).
#ifndef KVCAST_TOOLS_CLI_AUTOSCALE_H_
#define KVCAST_TOOLS_CLI_AUTOSCALE_H_

#include <string>

#include "absl/time/time.h"
#include "tools/cluster/local_cluster.h"

namespace kvcast::cli {

struct AutoscaleOptions {
  absl::Duration interval = absl::Seconds(5);
  int min_workers = 1;  // per role
  int max_workers = 4;  // per role
};

// The change to make to a role now: +1 (start one), -1 (drain one) or 0.
// `desired` is the planner's answer (<= 0: none yet, so no change); one
// worker a step, so that each change registers before the next.
int AutoscaleStep(double desired, int serving, const AutoscaleOptions& options);

// One pass: reads the desired replicas from the first scheduler's /metrics
// and applies AutoscaleStep to prefill and decode; returns a line per
// change ("prefill 1 -> 2: the planner asks for 2"), or why it could not
// read the plan.
std::string Autoscale(cluster::LocalCluster& cluster, const AutoscaleOptions& options);

}  // namespace kvcast::cli

#endif  // KVCAST_TOOLS_CLI_AUTOSCALE_H_
