// WorkerRegistry: kvcast.v1.Registry on the scheduler, plus the state the
// router reads. Workers Register (with a snapshot of the chunk hashes they
// hold), Heartbeat (load + KV events) and Deregister; a worker silent for
// longer than the lease is dropped with its chunks. A worker the scheduler
// saw fail (its RPC broke) is suspended from routing until its next
// heartbeat proves it alive (or its lease runs out).
//
// One model per scheduler: the first worker fixes it (model id, chunk size,
// vocabulary); a worker of another model is refused.
//
// Thread safety: every method may be called from any thread.
#ifndef KVCAST_SERVICES_SCHEDULER_WORKER_REGISTRY_H_
#define KVCAST_SERVICES_SCHEDULER_WORKER_REGISTRY_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "kvcast/v1/worker.grpc.pb.h"
#include "services/scheduler/prefix_index.h"
#include "services/scheduler/router.h"

namespace kvcast::scheduler {

// What the scheduler knows of the served model (from its first worker).
struct ModelInfo {
  std::string name;
  std::string model_id;
  Hash128 fingerprint;
  Hash128 prefix_seed;
  int chunk_tokens = 0;
  int vocab_size = 0;
  int max_sequence_len = 0;
  std::vector<int32_t> eos_token_ids;
};

struct WorkerRef {
  WorkerSlot slot = 0;
  std::string worker_id;
  std::string grpc_address;
  std::string moqt_address;
  std::shared_ptr<grpc::Channel> channel;
  // The worker's start-up calibration (WorkerInfo): a prompt chunk's time;
  // 0 when it reported none.
  double chunk_ms = 0;
};

struct Route {
  // Absent: the decode worker computes the prompt (PD fusion, or no
  // prefill worker is registered).
  std::optional<WorkerRef> prefill;
  PrefillPlan prefill_plan;
  PublishedPrefixes::Hit reuse;      // the published track to fetch from (groups may be 0)
  WorkerRef decode;
  DecodePlan decode_plan;
  // Counted on the prefill worker until PrefillAnswered or Release.
  bool prefill_counted = false;
  uint64_t speculative_id = 0;  // its entry among the prefill worker's routed prompts
};

class RouteLease;

class WorkerRegistry final : public v1::Registry::Service {
 public:
  struct Options {
    absl::Duration lease = absl::Seconds(10);
    // A worker not heard from for this long (it heartbeats every second)
    // gets new requests only when no other worker of its role is left: it
    // may be frozen. Its lease still decides when it is dropped.
    absl::Duration quiet = absl::Seconds(3);
    RouterOptions router;
    size_t published_chunks = 1 << 20;
    bool prefix_reuse = true;  // false: route as if nothing were cached (A/B runs)
    // Makes the channel to a worker (TLS and keepalive settings).
    std::function<std::shared_ptr<grpc::Channel>(const std::string& address)> make_channel;
  };
  explicit WorkerRegistry(Options options);
  ~WorkerRegistry() override;

  grpc::Status Register(grpc::ServerContext*, const v1::RegisterRequest* request,
                        v1::RegisterResponse* response) override;
  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest* request,
                         v1::HeartbeatResponse* response) override;
  grpc::Status Deregister(grpc::ServerContext*, const v1::DeregisterRequest* request,
                          v1::DeregisterResponse* response) override;

  std::optional<ModelInfo> model() const;
  // The registered workers' start-up calibration, averaged per role over
  // those that reported it (the planner's capacity until it has measured).
  struct Fleet {
    double prefill_tokens_per_s = 0;  // chunk_tokens / calibrated chunk time
    double decode_step_ms = 0;        // calibrated single-sequence step
    // Waiting, as the workers last reported: prefill workers' queued prompt
    // tokens (beyond what they cache), decode workers' queued sequences.
    double prefill_backlog_tokens = 0;
    double decode_backlog_requests = 0;
  };
  Fleet Summary() const;
  // The work the workers reported done since this registry started
  // (cumulative: each heartbeat adds what changed since the worker's last
  // report; a worker's totals before it registered here are not counted),
  // the same on every scheduler replica the workers heartbeat.
  struct Work {
    double requests = 0;                // sequences started on decode workers
    double prefill_prompt_tokens = 0;   // prompt tokens prefill workers computed
    double generated_tokens = 0;        // tokens generated (prefill's first ones too)
    double prefill_step_seconds = 0;    // prefill workers' forward passes, seconds
    double decode_steps = 0, decode_step_sequences = 0, decode_step_seconds = 0;
  };
  Work WorkDone() const;
  // Picks workers for a prompt (its chunk hash chain), skipping `exclude`.
  // Unavailable when no decode worker is registered (or all are excluded).
  // Counts the prompt's work on the prefill worker until PrefillAnswered,
  // and the request on the decode worker until Release.
  //
  // A worker's load is the larger of what this scheduler dispatched to it
  // and has not seen answered, and its last report moved by what this
  // scheduler dispatched and saw answered since: the report lags a
  // heartbeat behind (taken as it is, a worker that just finished requests
  // looks busy for up to a second, and the router steers work away from
  // it: 25% longer e2e in tools/sim), the dispatch count misses other
  // schedulers' requests, and adding the two would count the same request
  // twice.
  //
  // Speculative prefixes: a prompt routed to a prefill worker counts as held
  // there at once (the worker will hold its chunks once it prefills), until
  // its worker's second heartbeat after the prefill answered, by when the
  // worker's own KV events say what it holds. Without this, the prompts of
  // a prefix that just moved (a spill, a first request) keep missing the
  // new holder for a heartbeat, and each recomputes it elsewhere.
  absl::StatusOr<Route> Choose(absl::Span<const Hash128> chain, int prompt_tokens,
                               int max_tokens, const absl::flat_hash_set<WorkerSlot>& exclude);
  // Choose, as a lease that releases the route when it ends.
  absl::StatusOr<RouteLease> Lease(absl::Span<const Hash128> chain, int prompt_tokens,
                                   int max_tokens, const absl::flat_hash_set<WorkerSlot>& exclude);
  // The prefill worker answered (or failed): its share of the route is done.
  void PrefillAnswered(Route* route);
  // The request is over on its workers (calls PrefillAnswered if needed).
  void Release(Route* route);
  // The worker's RPC failed as if it were gone: route nothing to it until it
  // heartbeats again.
  void MarkFailed(WorkerSlot slot);
  // A prefill published `chain` under `digest` at `publisher`.
  void Published(const std::string& digest, const std::string& publisher,
                 absl::Span<const Hash128> chain);

  // Changes whenever a route may have become possible: a worker registered,
  // left, or heartbeat after it was suspended (or was dropped).
  uint64_t version() const;
  // Blocks until version() differs from `seen` or `deadline` passes; true
  // if it changed. Lets a request wait for a worker without polling.
  bool AwaitChange(uint64_t seen, absl::Time deadline) const;

  struct Counts {
    int prefill = 0;
    int decode = 0;
    size_t index_chunks = 0;   // distinct chunks held anywhere
    size_t prefill_chunks = 0;  // chunks held, summed over the prefill workers
    size_t decode_chunks = 0;   // and over the decode workers
    // Summed over every worker's last reported load (WorkerLoad).
    int64_t waiting = 0, running = 0;
    int64_t pages_used = 0, pages_total = 0;
  };
  Counts counts() const;

 private:
  struct Worker {
    WorkerRef ref;
    v1::WorkerInfo info;
    v1::WorkerLoad load;  // the last report (its totals: what WorkDone counted)
    absl::Time last_seen;
    int dispatched = 0;             // requests chosen, not yet answered / released
    double dispatched_work = 0;     // their prefill work (PrefillPlan::work)
    // The two when `load` was reported.
    int dispatched_at_report = 0;
    double dispatched_work_at_report = 0;
    bool suspended = false;
    int64_t heartbeats = 0;
    // Prompts routed here (their reusable chunks), by Route::speculative_id,
    // and the heartbeat count at which each is dropped (never while its
    // prefill is outstanding).
    struct Speculative {
      std::vector<Hash128> chain;
      int64_t drop_at = INT64_MAX;
    };
    absl::flat_hash_map<uint64_t, Speculative> speculative;
  };
  // index_.Match(chain), with each prefill worker's speculative prefixes.
  absl::flat_hash_map<WorkerSlot, int> HeldLocked(absl::Span<const Hash128> chain) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Reap();
  void DropLocked(WorkerSlot slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Candidate CandidateOf(const Worker& w) const;

  const Options options_;
  mutable absl::Mutex mu_;
  std::optional<ModelInfo> model_ ABSL_GUARDED_BY(mu_);
  WorkerSlot next_slot_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  Work work_ ABSL_GUARDED_BY(mu_);
  uint64_t next_speculative_id_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<WorkerSlot, Worker> workers_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, WorkerSlot> by_id_ ABSL_GUARDED_BY(mu_);
  PrefixIndex index_ ABSL_GUARDED_BY(mu_);
  PublishedPrefixes published_ ABSL_GUARDED_BY(mu_);
  absl::Notification stop_;
  std::thread reaper_;
};

// A route held for one attempt: its workers count the request (the
// router's load) until the lease ends, its prefill worker until
// PrefillAnswered. Move-only; releases once.
class RouteLease {
 public:
  RouteLease(RouteLease&& other) noexcept : registry_(other.registry_), route_(std::move(other.route_)) {
    other.registry_ = nullptr;
  }
  RouteLease& operator=(RouteLease&&) = delete;
  RouteLease(const RouteLease&) = delete;
  ~RouteLease() {
    if (registry_ != nullptr) registry_->Release(&route_);
  }
  const Route& operator*() const { return route_; }
  const Route* operator->() const { return &route_; }
  // The prefill worker's share is done (answered, failed, or not called).
  void PrefillAnswered() { registry_->PrefillAnswered(&route_); }

 private:
  friend class WorkerRegistry;
  RouteLease(WorkerRegistry* registry, Route route) : registry_(registry), route_(std::move(route)) {}
  WorkerRegistry* registry_;  // null once moved from
  Route route_;
};

}  // namespace kvcast::scheduler

#endif  // KVCAST_SERVICES_SCHEDULER_WORKER_REGISTRY_H_
