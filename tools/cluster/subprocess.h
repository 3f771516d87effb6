// Process helpers for LocalCluster: free ports, spawning a child into its
// own process group with output to a log file, and log tails.
//
// Thread safety: every function may be called concurrently.
#ifndef KVCAST_TOOLS_CLUSTER_SUBPROCESS_H_
#define KVCAST_TOOLS_CLUSTER_SUBPROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kvcast::cluster {

// A port that was free on 127.0.0.1 a moment ago: binds a socket of `type`
// (SOCK_STREAM or SOCK_DGRAM) to port 0, reads the port, closes it. Another
// process may take it before it is used.
absl::StatusOr<int> PickFreePort(int type);

// fork + execv(argv[0], argv) with: a new process group (pgid = pid), the
// signal mask cleared and SIGINT/SIGTERM/SIGHUP/SIGPIPE at their defaults,
// stdin from /dev/null, stdout and stderr appended to `log_path` (created
// mode 0644), and SIGKILL when the calling thread exits
// (PR_SET_PDEATHSIG). Returns the child's pid once exec succeeded.
// Errors: FAILED_PRECONDITION when the log cannot be opened or fork fails;
// NOT_FOUND / PERMISSION_DENIED / UNKNOWN when exec fails (errno text).
absl::StatusOr<pid_t> SpawnProcess(const std::vector<std::string>& argv,
                                   const std::string& log_path);

// The last `max_bytes` of the file at `path` (from a line start when
// possible), or "(cannot read PATH)".
std::string FileTail(const std::string& path, size_t max_bytes);

// See LocalCluster::FindBinary.
absl::StatusOr<std::string> FindExecutable(const std::string& name, const std::string& package);

// "exit status 3", "killed by signal 9 (Killed)".
std::string DescribeWaitStatus(int wait_status);

}  // namespace kvcast::cluster

#endif  // KVCAST_TOOLS_CLUSTER_SUBPROCESS_H_
