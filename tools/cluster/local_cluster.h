// LocalCluster: a whole kvcast cluster as child processes on 127.0.0.1, for
// integration tests, benchmarks and `kvcast cluster up`.
//
//   ClusterOptions o;
//   o.model_dir = "/tmp/tiny";
//   o.work_dir = "/tmp/cluster";           // logs/, certs/
//   ASSIGN_OR_RETURN(auto cluster, LocalCluster::Start(o));
//   auto stub = v1::Generation::NewStub(grpc::CreateChannel(
//       cluster->scheduler_address(), grpc::InsecureChannelCredentials()));
//   ...
//   cluster->Kill(Role::kDecode, 0);        // SIGKILL one worker
//   RETURN_IF_ERROR(cluster->Stop());
//
// Start() writes development certificates (tools/devcert) into
// work_dir/certs, picks free ports (bind-to-0 probes: TCP for gRPC and
// /metrics, UDP for MoQT/QUIC), then spawns an optional kvcast-relay, one
// kvcast-scheduler and N kvcast-prefill + M kvcast-decode workers (the
// relay with --subscribe_wait_ms=2000; relay_flags may override). Each child
// runs in its own process group with stdin from /dev/null and stdout+stderr
// appended to work_dir/logs/NAME.log (NAME: relay, scheduler, scheduler-I
// for replicas I > 0, prefill-I, decode-I), and gets SIGKILL if the thread
// that started it exits (so a crashed test leaves no servers behind).
// Start() returns once every scheduler's /metrics reports the expected
// kvcast_workers{role=...} counts.
//
// Thread safety: none; use one LocalCluster from one thread. Children are
// spawned with fork+exec of prepared argv, so Start() is safe in a
// multithreaded process.
#ifndef KVCAST_TOOLS_CLUSTER_LOCAL_CLUSTER_H_
#define KVCAST_TOOLS_CLUSTER_LOCAL_CLUSTER_H_

#include <signal.h>
#include <sys/types.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tools/devcert/devcert.h"

namespace kvcast::cluster {

enum class Role { kRelay, kScheduler, kPrefill, kDecode };
const char* RoleName(Role role);  // "relay", "scheduler", "prefill", "decode"

struct ClusterOptions {
  std::string model_dir;  // required: the workers' --model (and the scheduler's tokenizer)
  int num_prefill = 1;    // >= 1
  int num_decode = 1;     // >= 1
  // Scheduler replicas (>= 1); every worker registers with each of them.
  // Replica 0 takes scheduler_port and http_port; the others free ports.
  int num_schedulers = 1;
  bool relay = true;      // false: workers move KV peer to peer
  // Created if missing. Empty: a new directory under $TEST_TMPDIR or /tmp.
  std::string work_dir;
  int scheduler_port = 0;  // gRPC port of the scheduler; 0: a free one
  int http_port = 0;       // the scheduler's OpenAI-compatible HTTP API; 0: a free one; -1: off
  bool http_tls = false;   // HTTPS with the cluster's development certificate (certs/server.pem)
  int kv_cache_mb = 256;
  std::string backend = "cpu";
  // Binaries; empty: FindBinary(the default name).
  std::string scheduler_bin, prefill_bin, decode_bin, relay_bin;
  // Extra flags per role, appended after the ones LocalCluster sets (a flag
  // given twice: the last one wins).
  std::vector<std::string> scheduler_flags, prefill_flags, decode_flags, relay_flags;
  absl::Duration start_timeout = absl::Seconds(60);
  // Stop(): how long children get to exit after SIGTERM before SIGKILL.
  absl::Duration stop_timeout = absl::Seconds(20);
};

// A spawned process. Addresses are "127.0.0.1:PORT" ("" where none).
struct Process {
  Role role;
  int index = 0;          // among processes of its role
  std::string name;       // "prefill-0"
  pid_t pid = -1;         // also its process group id
  std::string log_path;
  std::string grpc_address;     // scheduler and workers
  std::string metrics_address;  // scheduler and workers
  std::string http_address;     // the scheduler's OpenAI-compatible API ("" when off)
  std::string moqt_address;     // relay and workers (UDP)
  bool exited = false;          // reaped
  int wait_status = 0;          // waitpid status once exited
  std::vector<std::string> argv;  // binary and flags, as spawned (Restart reuses them)
  int restarts = 0;               // Restart() calls so far
  bool draining = false;          // DrainWorker sent it SIGTERM; its exit 0 is expected
};

class LocalCluster {
 public:
  // Errors: INVALID_ARGUMENT for bad options; NOT_FOUND for a binary that
  // does not exist; the devcert error for certificates; FAILED_PRECONDITION
  // when a child exits during start-up, DEADLINE_EXCEEDED past
  // start_timeout (both with the tail of the relevant log). On error every
  // child already spawned is stopped.
  static absl::StatusOr<std::unique_ptr<LocalCluster>> Start(const ClusterOptions& options);

  // Where a binary named `name` (e.g. "kvcast-scheduler", in Bazel package
  // `package`, e.g. "services/scheduler") is: next to the running
  // executable, else PKG/NAME under an ancestor of the executable's
  // directory (a bazel-bin tree), else bazel-bin/PKG/NAME relative to the
  // working directory. NOT_FOUND lists the places tried.
  static absl::StatusOr<std::string> FindBinary(const std::string& name, const std::string& package);

  ~LocalCluster();  // Stop()
  LocalCluster(const LocalCluster&) = delete;
  LocalCluster& operator=(const LocalCluster&) = delete;

  const std::string& scheduler_address() const { return scheduler().grpc_address; }
  const std::string& scheduler_metrics_address() const { return scheduler().metrics_address; }
  const std::string& scheduler_http_address() const { return scheduler().http_address; }
  const std::string& relay_address() const;  // "" without a relay
  const std::string& work_dir() const { return work_dir_; }
  std::string ca_cert() const;  // PEM of the dev CA (verifies QUIC peers)

  const Process& scheduler() const { return *Find(Role::kScheduler, 0); }
  const Process& scheduler(int replica) const;  // aborts if out of range
  const Process& worker(Role role, int index) const;  // kPrefill or kDecode; aborts if out of range
  const Process* relay() const;  // nullptr without a relay
  int num_workers(Role role) const;
  std::vector<const Process*> processes() const;  // every process, in start order

  // Sends `signo` to `worker`'s process group; for SIGKILL also reaps it.
  // Errors: INVALID_ARGUMENT for an unknown role/index; FAILED_PRECONDITION
  // if it has already exited.
  absl::Status Kill(Role role, int index, int signo = SIGKILL);
  // Reaps without blocking; true while the process has not exited.
  bool Running(Role role, int index);
  // Spawns an exited process again with the same flags and ports (its log
  // is appended to). FAILED_PRECONDITION while it is still running;
  // INVALID_ARGUMENT for an unknown role/index; the spawn error.
  absl::Status Restart(Role role, int index);
  // Starts one more worker of `role` (kPrefill or kDecode) with ports of
  // its own, under the next index; it registers with every scheduler
  // replica by itself (WaitForWorkers waits for that). Returns its index.
  absl::StatusOr<int> AddWorker(Role role);
  // Sends SIGTERM to the running worker of `role` with the highest index:
  // it drains (health NOT_SERVING, deregisters, its streams get its
  // --drain_s) and exits, which CheckChildren then expects. Returns its
  // index; FAILED_PRECONDITION when none of the role is serving.
  absl::StatusOr<int> DrainWorker(Role role);
  // Workers of `role` running and not draining.
  int serving_workers(Role role);
  // Waits until every running scheduler's /metrics shows exactly these
  // worker counts (e.g. after Kill, once the lease expires). Errors as for
  // Start().
  absl::Status WaitForWorkers(int num_prefill, int num_decode, absl::Duration timeout);
  // The last `max_bytes` of a process's log.
  static std::string LogTail(const Process& p, size_t max_bytes = 2000);

  // SIGTERM to every process group (workers, then the scheduler, then the
  // relay), waits up to stop_timeout, then SIGKILLs what is left and reaps
  // it. Idempotent. Errors (after everything is stopped): INTERNAL naming
  // the processes that needed SIGKILL or exited with a non-zero status.
  absl::Status Stop();

 private:
  explicit LocalCluster(ClusterOptions options) : options_(std::move(options)) {}
  absl::Status Launch();
  absl::StatusOr<Process*> Spawn(Role role, int index, const std::string& binary,
                                 std::vector<std::string> args);
  Process* Find(Role role, int index) const;
  absl::StatusOr<std::string> PickAddress(int type);  // "127.0.0.1:PORT", not used before
  absl::StatusOr<Process*> SpawnWorker(Role role, int index);
  bool Reap(Process* p, bool block);
  absl::Status CheckChildren();  // FAILED_PRECONDITION for one that exited

  ClusterOptions options_;
  std::string work_dir_;
  std::vector<std::unique_ptr<Process>> processes_;
  // Set by Launch for SpawnWorker.
  devcert::DevCertPaths certs_;
  std::string prefill_bin_, decode_bin_, relay_address_, scheduler_internal_;
  std::set<int> used_ports_;
  bool stopped_ = false;
};

}  // namespace kvcast::cluster

#endif  // KVCAST_TOOLS_CLUSTER_LOCAL_CLUSTER_H_
