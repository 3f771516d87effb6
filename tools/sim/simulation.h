// The routing simulator's inside (routing_sim.h): a request, a worker, the
// event-driven Simulation, and the trace. Split over routing_sim.cc (events
// and routing), scaling.cc (worker lifecycles and autoscaling) and
// trace.cc; nothing outside tools/sim includes it.
#ifndef KVCAST_TOOLS_SIM_SIMULATION_H_
#define KVCAST_TOOLS_SIM_SIMULATION_H_

#include <algorithm>
#include <deque>
#include <list>
#include <memory>
#include <queue>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "engine/kv/prefix_hash.h"
#include "services/scheduler/planner.h"
#include "services/scheduler/prefix_index.h"
#include "services/scheduler/router.h"
#include "services/scheduler/worker_registry.h"
#include "tools/sim/routing_sim.h"

namespace kvcast::sim::internal {

using scheduler::Candidate;
using scheduler::WorkerRegistry;

constexpr int kVocab = 49152;

inline double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(p * double(v.size())))];
}

struct Request {
  double arrival = 0;
  int prompt_tokens = 0;
  int output_tokens = 0;
  std::vector<Hash128> chain;
  int prefill = -1, decode = -1;
  scheduler::Route route;
  int cached_chunks = 0, fetched_chunks = 0;
  int routed_work = 0;  // uncached prompt tokens when routed (the live baselines)
  int remaining = 0;  // decode tokens still to generate
  double first_token = -1, end = -1;
  bool missed = false;  // an SLO, counted once
};

// A prefill worker's prefix cache: chunks, least recently used first out.
class LruChunks {
 public:
  explicit LruChunks(int capacity) : capacity_(capacity) {}
  // Leading chunks of `chain` held (at most `max`), marked used if `touch`.
  int Longest(const std::vector<Hash128>& chain, int max, bool touch) {
    int n = 0;
    while (n < max && n < int(chain.size())) {
      auto it = where_.find(chain[n]);
      if (it == where_.end()) break;
      if (touch) order_.splice(order_.end(), order_, it->second);
      ++n;
    }
    return n;
  }
  bool Contains(const Hash128& h) const { return where_.contains(h); }
  void Insert(const Hash128& h, std::vector<Hash128>* stored, std::vector<Hash128>* evicted) {
    if (auto it = where_.find(h); it != where_.end()) {
      order_.splice(order_.end(), order_, it->second);
      return;
    }
    if (int(where_.size()) >= capacity_) {
      evicted->push_back(order_.front());
      where_.erase(order_.front());
      order_.pop_front();
    }
    order_.push_back(h);
    where_[h] = std::prev(order_.end());
    stored->push_back(h);
  }

 private:
  const int capacity_;
  std::list<Hash128> order_;
  absl::flat_hash_map<Hash128, std::list<Hash128>::iterator> where_;
};

// A worker's life: started (counted from then), serving once registered,
// draining once scaled down (no new routes), gone when drained.
struct Lifetime {
  double started = 0, gone = -1;
  bool serving = true, draining = false;
  bool active() const { return !draining && gone < 0; }
};

struct PrefillWorker : Lifetime {
  explicit PrefillWorker(int capacity) : cache(capacity) {}
  std::string id;
  std::deque<int> queue;
  int current = -1;
  double busy_s = 0;
  LruChunks cache;
  std::vector<Hash128> stored, evicted;  // since the last heartbeat
  int outstanding = 0;                   // routed, prefill not answered (baselines)
  // Routed and not prefilled (the live baselines): their chunks (speculative
  // index, counted per request) and their uncached tokens.
  absl::flat_hash_map<Hash128, int> pending_chunks;
  int64_t pending_work = 0;
};

struct DecodeWorker : Lifetime {
  std::string id;
  double busy_s = 0;         // stepping
  std::vector<int> running;
  std::deque<int> waiting;
  int used_pages = 0;
  bool stepping = false;
  double batch_seconds = 0;  // integral of the batch size over time
  double last_change = 0;
  int dispatched = 0;        // routed, not ended (baselines)
  int committed_pages = 0;   // pages of the requests routed here and not ended (dynamo)
};

class Simulation {
 public:
  Simulation(Policy policy, const Workload& w, const Cluster& c, const CostModel& m,
             const Scaling& scaling, std::vector<Request> trace)
      : policy_(policy), w_(w), c_(c), m_(m), s_(scaling), reqs_(std::move(trace)) {}

  absl::StatusOr<Result> Run();

 private:
  enum Kind { kArrival, kPrefillDone, kDecodeJoin, kStepDone, kHeartbeat, kWorkerUp, kScale };
  // Heartbeat and start events name a worker by role and index.
  static int Key(bool decode, int i) { return 2 * i + (decode ? 1 : 0); }
  struct Event {
    double t;
    uint64_t seq;
    Kind kind;
    int id;
    bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
  };
  void At(double t, Kind k, int id) { events_.push(Event{t, next_seq_++, k, id}); }

  absl::Status Start();
  // Adds a worker of the role (serving at once, or after the start latency).
  void AddWorker(bool decode, bool serving);
  absl::Status Register(bool decode, int i);
  void WorkerUp(int key);
  // The scaling interval that just ended: observe, decide, resize.
  void Scale();
  int HpaReplicas(double busy_s, int serving, int active,
                  std::deque<std::pair<double, int>>* recommendations) const;
  void Resize(bool decode, int target);
  // A draining worker with nothing routed to it leaves.
  void MaybeGone(bool decode, int i);
  Lifetime& LifeOf(bool decode, int i) {
    return decode ? static_cast<Lifetime&>(decode_[i]) : prefill_[i];
  }
  int ActiveCount(bool decode) const;
  void Miss(Request& q, bool missed) {
    if (missed && !q.missed) q.missed = true, misses_ += 1;
  }
  absl::Status Route(int r);
  void StartPrefill(int p);
  void PrefillDone(int p);
  void DecodeJoin(int r);
  void TryAdmit(int d);
  void StepDone(int d);
  void Heartbeat(int worker);
  // Adds the batch size since its last change to the worker's integral.
  void Integrate(DecodeWorker& dw);
  // Leading chunks of q's prompt that prefill worker p holds or will hold
  // (a routed prompt's), as the live baselines see it.
  int HeldLive(int p, const Request& q) const;
  int ChooseLlmdPrefill(const Request& q);
  int ChooseLlmdDecode();
  int ChooseDynamoPrefill(const Request& q) const;
  int ChooseDynamoDecode() const;
  // Index of the highest of `scores`, ties broken by tie_rng_.
  int PickMax(const std::vector<double>& scores);
  int PagesFor(const Request& r) const {
    return (r.prompt_tokens + r.output_tokens + c_.page_tokens - 1) / c_.page_tokens;
  }
  Result Summarize() const;

  const Policy policy_;
  const Workload w_;
  const Cluster c_;
  const CostModel m_;
  const Scaling s_;
  std::vector<Request> reqs_;
  // Deques: a worker added later leaves the others in place (a cache's list
  // iterators must not move).
  std::deque<PrefillWorker> prefill_;
  std::deque<DecodeWorker> decode_;
  std::unique_ptr<WorkerRegistry> registry_;  // kKvcast
  absl::flat_hash_map<std::string, int> index_of_;
  // What the baselines know: KV events and loads as of each heartbeat.
  scheduler::PrefixIndex index_;
  std::vector<scheduler::Candidate> decode_view_;
  absl::flat_hash_set<Hash128> relay_;  // chunks the relay holds
  int rr_prefill_ = 0, rr_decode_ = 0;
  std::mt19937_64 tie_rng_{7};
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  uint64_t next_seq_ = 0;
  double now_ = 0;
  int ended_ = 0;
  int misses_ = 0;
  // Scaling: the planner, the interval's counts, the HPA's recent
  // recommendations, the decisions and the timeline.
  std::unique_ptr<scheduler::Planner> planner_;
  int interval_arrivals_ = 0;
  double interval_computed_ = 0, interval_output_ = 0;
  double busy_mark_[2] = {0, 0};  // prefill, decode busy seconds at the last Scale
  std::deque<std::pair<double, int>> hpa_recs_[2];
  int changes_[2] = {0, 0};
  std::vector<Result::Interval> timeline_;
};

// The trace of a workload at `rate` (trace.cc): same seed, same trace.
std::vector<Request> MakeTrace(const Workload& w, const Cluster& c, double rate);

}  // namespace kvcast::sim::internal

#endif  // KVCAST_TOOLS_SIM_SIMULATION_H_
