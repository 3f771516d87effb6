// `kvcast cluster up`: a local cluster in the foreground until SIGINT or
// SIGTERM (tools/cluster/local_cluster.h).
#ifndef KVCAST_TOOLS_CLI_CLUSTER_CMD_H_
#define KVCAST_TOOLS_CLI_CLUSTER_CMD_H_

#include <optional>

#include "absl/status/status.h"
#include "tools/cli/autoscale.h"
#include "tools/cluster/local_cluster.h"

namespace kvcast::cli {

// INVALID_ARGUMENT for bad options (exit 2).
absl::Status ValidateClusterUp(const cluster::ClusterOptions& options);

// Starts the cluster, prints the scheduler's address and every process's
// log on stdout, reports children that exit (on stderr) and, with
// `restart`, spawns them again with the same flags and ports (at once,
// then after 1 s, doubling for a process that keeps exiting within 30 s of
// its start, up to 30 s); on SIGINT/SIGTERM stops them all. Errors:
// LocalCluster::Start's, or Stop's.
// With `autoscale`, the workers follow the scheduler's planner
// (autoscale.h); a drained worker is not restarted.
absl::Status ClusterUp(const cluster::ClusterOptions& options, bool restart,
                       const std::optional<AutoscaleOptions>& autoscale = std::nullopt);

}  // namespace kvcast::cli

#endif  // KVCAST_TOOLS_CLI_CLUSTER_CMD_H_
