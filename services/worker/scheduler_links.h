// SchedulerLinks: a worker's registration with every scheduler replica, so
// that each replica holds the full prefix index and any of them can route.
//
// --scheduler names one or more HOST:PORT, comma-separated. Each HOST is
// resolved now and every `resolve_every`; each of its addresses is one
// replica (a Kubernetes headless Service answers with one per scheduler
// pod; IPv4 first, IPv6 only when a name has no IPv4 address, so that one
// host is not registered with twice). A HOST that does not resolve keeps
// the replicas it had. Per replica a thread registers (with a snapshot of
// the chunks held), heartbeats every `heartbeat` (at most lease / 3) with
// the load and the KV events since its previous heartbeat, registers again
// after any failure (the snapshot replaces the events a failed heartbeat
// lost), and deregisters when the replica leaves the answer or on Stop.
// Over TLS a replica reached by address must present a certificate naming
// HOST.
//
// Thread safety: Record and registered() from any thread; Start and Stop
// from one thread.
#ifndef KVCAST_SERVICES_WORKER_SCHEDULER_LINKS_H_
#define KVCAST_SERVICES_WORKER_SCHEDULER_LINKS_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
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
#include "engine/kv/prefix_hash.h"
#include "grpcpp/security/credentials.h"
#include "kvcast/v1/worker.grpc.pb.h"

namespace kvcast::worker {

// A --scheduler target split: host and port ("[::1]:5" gives "::1", 5).
struct SchedulerTarget {
  std::string host;
  uint16_t port = 0;
};
absl::StatusOr<std::vector<SchedulerTarget>> ParseSchedulerTargets(const std::string& flag);

// The replicas behind `target` now: "IP:PORT" ("[IP]:PORT" for IPv6).
absl::StatusOr<std::vector<std::string>> ResolveReplicas(const SchedulerTarget& target);

class SchedulerLinks {
 public:
  struct Options {
    std::string scheduler;  // HOST:PORT[,HOST:PORT...]
    std::shared_ptr<grpc::ChannelCredentials> creds;
    absl::Duration heartbeat = absl::Seconds(1);
    absl::Duration resolve_every = absl::Seconds(5);
    std::string worker_id;
    std::function<v1::WorkerInfo()> info;
    std::function<v1::WorkerLoad()> load;
  };

  SchedulerLinks() = default;
  ~SchedulerLinks() { Stop(); }
  SchedulerLinks(const SchedulerLinks&) = delete;
  SchedulerLinks& operator=(const SchedulerLinks&) = delete;

  // The worker now holds a chunk at `tier` (`stored`; a chunk moving between
  // tiers is stored again) or no longer holds it anywhere. Before Start it
  // only builds the snapshot.
  void Record(bool stored, const Hash128& hash, v1::KvTier tier);
  // A prompt this worker published (its chain, in order): sent to every
  // registered replica with the next heartbeat (a hint: not in snapshots).
  void Published(const std::string& prompt_digest, absl::Span<const Hash128> chain);
  // Resolves the targets once (an unparsable flag is an error; a name that
  // does not resolve yet is retried) and starts the links.
  absl::Status Start(Options options);
  // Deregisters from every replica and joins the threads. Idempotent.
  void Stop();
  // Replicas this worker is registered with now.
  int registered() const { return registered_.load(); }

 private:
  struct Link {
    std::string address;   // IP:PORT
    std::string tls_name;  // the HOST it came from, unless an address itself
    absl::Notification stop;
    std::thread thread;
  };
  void Resolve();
  void Run(Link* link);

  Options options_;
  std::vector<SchedulerTarget> targets_;
  absl::Mutex mu_;
  absl::flat_hash_map<Hash128, v1::KvTier> held_ ABSL_GUARDED_BY(mu_);
  // Per registered replica: the events since its last heartbeat.
  absl::flat_hash_map<std::string, std::vector<v1::KvEvent>> pending_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<Link>> links_;  // resolver thread (and Stop)
  std::atomic<int> registered_{0};
  absl::Notification stop_;
  std::thread resolver_;
};

}  // namespace kvcast::worker

#endif  // KVCAST_SERVICES_WORKER_SCHEDULER_LINKS_H_
