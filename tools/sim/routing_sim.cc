#include "tools/sim/routing_sim.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <deque>
#include <list>
#include <memory>
#include <optional>
#include <queue>
#include <random>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "engine/kv/prefix_hash.h"
#include "services/scheduler/prefix_index.h"
#include "services/scheduler/router.h"
#include "services/scheduler/worker_registry.h"

namespace kvcast::sim {
namespace {

using scheduler::Candidate;
using scheduler::WorkerRegistry;

constexpr int kVocab = 49152;

double Percentile(std::vector<double> v, double p) {
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

// System prompts of random tokens and their Zipf popularity (a CDF).
struct PromptPool {
  std::vector<std::vector<int32_t>> systems;
  std::vector<double> cdf;
  std::vector<int> hot_order;
  PromptPool(const Workload& w, int count, std::mt19937_64& rng) {
    std::uniform_int_distribution<int> sys_len(w.system_tokens_min, w.system_tokens_max);
    std::uniform_int_distribution<int32_t> token(0, kVocab - 1);
    systems.resize(count);
    double total = 0;
    for (int k = 0; k < count; ++k) {
      systems[k].resize(sys_len(rng));
      for (int32_t& t : systems[k]) t = token(rng);
      total += 1.0 / std::pow(k + 1, w.zipf);
      cdf.push_back(total);
    }
    hot_order.resize(count);
    for (int k = 0; k < count; ++k) hot_order[k] = k;
    std::shuffle(hot_order.begin(), hot_order.end(), rng);
  }
  const std::vector<int32_t>& Pick(const Workload& w, double t, std::mt19937_64& rng) const {
    std::uniform_real_distribution<double> unit(0, 1);
    int s = int(std::lower_bound(cdf.begin(), cdf.end(), unit(rng) * cdf.back()) - cdf.begin());
    if (w.hot_share > 0 && unit(rng) < w.hot_share) {
      s = hot_order[size_t(t / w.hot_period_s) % hot_order.size()];
    }
    return systems[std::min(s, int(systems.size()) - 1)];
  }
};

// The arrival rate at time t (the day's shape, or constant).
double RateAt(const Workload& w, double rate, double t) {
  if (w.day_s <= 0) return rate;
  const double s = std::sin(M_PI * t / w.day_s);
  return rate * (1 + (w.peak - 1) * s * s);
}

std::vector<Request> MakeTrace(const Workload& w, const Cluster& c, double rate) {
  std::mt19937_64 rng(w.seed);
  std::uniform_int_distribution<int> user_len(w.user_tokens_min, w.user_tokens_max);
  std::uniform_int_distribution<int> out_len(w.output_tokens_min, w.output_tokens_max);
  std::uniform_int_distribution<int32_t> token(0, kVocab - 1);
  std::uniform_real_distribution<double> unit(0, 1);
  const PromptPool before(w, w.system_prompts, rng);
  std::optional<PromptPool> after;  // drawn only with a shift: the same traces without one
  if (w.shift_at > 0) after.emplace(w, w.shift_system_prompts, rng);
  // Arrivals: Poisson at the peak rate, each kept with probability
  // RateAt / peak (thinning: a Poisson process of rate RateAt).
  const double top = w.day_s > 0 ? rate * std::max(1.0, w.peak) : rate;
  std::exponential_distribution<double> gap(top);
  const Hash128 seed = PrefixSeed(Hash128{1, 2});
  std::vector<Request> trace;
  double t = 0;
  std::vector<int32_t> tokens;
  while (w.day_s > 0 ? t < w.day_s : int(trace.size()) < w.requests) {
    t += gap(rng);
    if (w.day_s > 0 && (t >= w.day_s || unit(rng) * top > RateAt(w, rate, t))) continue;
    const bool shifted = w.shift_at > 0 && t >= w.shift_at * w.day_s;
    Request& r = trace.emplace_back();
    r.arrival = t;
    tokens = (shifted ? *after : before).Pick(w, t, rng);
    const int user = int(user_len(rng) * (shifted ? w.shift_user_tokens : 1.0));
    for (int n = std::max(1, user); n > 0; --n) tokens.push_back(token(rng));
    r.prompt_tokens = int(tokens.size());
    r.output_tokens = out_len(rng);
    r.chain = ChunkHashChain(seed, tokens, c.chunk_tokens);
  }
  return trace;
}

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

void Simulation::AddWorker(bool decode, bool serving) {
  Lifetime* life;
  std::string id;
  if (decode) {
    const int i = int(decode_.size());
    decode_.emplace_back();
    id = decode_.back().id = absl::StrCat("decode-", i);
    index_of_[id] = i;
    Candidate cand;
    cand.slot = scheduler::WorkerSlot(i);
    cand.free_pages = c_.decode_pages;
    cand.page_tokens = c_.page_tokens;
    decode_view_.push_back(cand);
    life = &decode_.back();
  } else {
    const int i = int(prefill_.size());
    prefill_.emplace_back(c_.prefill_cache_chunks);
    id = prefill_.back().id = absl::StrCat("prefill-", i);
    index_of_[id] = i;
    life = &prefill_.back();
  }
  life->started = now_;
  life->serving = serving;
  if (!serving) {
    const int i = decode ? int(decode_.size()) - 1 : int(prefill_.size()) - 1;
    At(now_ + s_.start_latency_s, kWorkerUp, Key(decode, i));
  }
}

absl::Status Simulation::Register(bool decode, int i) {
  if (!registry_) return absl::OkStatus();
  v1::RegisterRequest req;
  v1::WorkerInfo* info = req.mutable_worker();
  info->set_worker_id(decode ? decode_[i].id : prefill_[i].id);
  info->set_role(decode ? v1::WORKER_ROLE_DECODE : v1::WORKER_ROLE_PREFILL);
  info->set_grpc_address(info->worker_id());
  info->set_moqt_address(info->worker_id());
  info->set_model_name("sim");
  info->set_model_id(Hash128{1, 2}.ToHex());
  info->set_chunk_tokens(c_.chunk_tokens);
  info->set_page_tokens(c_.page_tokens);
  info->set_total_pages(c_.decode_pages);
  info->set_vocab_size(kVocab);
  info->set_max_sequence_len(1 << 20);
  req.mutable_load()->set_free_pages(c_.decode_pages);
  v1::RegisterResponse resp;
  grpc::Status st = registry_->Register(nullptr, &req, &resp);
  if (!st.ok()) return absl::InternalError(st.error_message());
  return absl::OkStatus();
}

absl::Status Simulation::Start() {
  for (int i = 0; i < c_.prefill; ++i) AddWorker(false, true);
  for (int i = 0; i < c_.decode; ++i) AddWorker(true, true);
  if (policy_ == Policy::kKvcast) {
    WorkerRegistry::Options o;
    o.lease = absl::InfiniteDuration();  // virtual time: no worker goes quiet
    o.quiet = absl::InfiniteDuration();
    o.make_channel = [](const std::string&) { return nullptr; };
    o.router = c_.router;
    o.router.fuse_tokens = 0;  // not modelled: every request is disaggregated
    registry_ = std::make_unique<WorkerRegistry>(std::move(o));
    for (int i = 0; i < c_.prefill; ++i) {
      if (absl::Status s = Register(false, i); !s.ok()) return s;
    }
    for (int i = 0; i < c_.decode; ++i) {
      if (absl::Status s = Register(true, i); !s.ok()) return s;
    }
  }
  for (int r = 0; r < int(reqs_.size()); ++r) At(reqs_[r].arrival, kArrival, r);
  const int workers = c_.prefill + c_.decode;
  for (int i = 0; i < workers; ++i) {
    At(c_.heartbeat_s * i / workers, kHeartbeat,
       i < c_.prefill ? Key(false, i) : Key(true, i - c_.prefill));
  }
  if (s_.scaler != Scaler::kFixed) {
    scheduler::PlannerOptions o = s_.planner;
    o.interval = absl::Seconds(s_.interval_s);
    o.slo_ttft_ms = s_.slo_ttft_ms;
    o.slo_itl_ms = s_.slo_itl_ms;
    o.min_replicas = s_.min_workers;
    o.max_replicas = s_.max_workers;
    planner_ = std::make_unique<scheduler::Planner>(o);
    At(s_.interval_s, kScale, 0);
  }
  return absl::OkStatus();
}

absl::Status Simulation::Route(int r) {
  Request& q = reqs_[r];
  const int max_tokens = q.output_tokens;
  switch (policy_) {
    case Policy::kKvcast: {
      auto route = registry_->Choose(q.chain, q.prompt_tokens, max_tokens, {});
      if (!route.ok()) return route.status();
      if (!route->prefill) return absl::InternalError("no prefill worker chosen");
      q.route = *route;
      q.prefill = index_of_.at(route->prefill->worker_id);
      q.decode = index_of_.at(route->decode.worker_id);
      break;
    }
    case Policy::kRoundRobin:
      q.prefill = rr_prefill_++ % c_.prefill;
      q.decode = rr_decode_++ % c_.decode;
      break;
    case Policy::kAffinity: {
      const auto held = index_.Match(q.chain);
      int best = 0, best_held = -1;
      for (int p = 0; p < c_.prefill; ++p) {
        auto it = held.find(scheduler::WorkerSlot(p));
        const int h = it == held.end() ? 0 : it->second;
        if (h > best_held || (h == best_held && prefill_[p].outstanding <
                                                      prefill_[best].outstanding)) {
          best = p;
          best_held = h;
        }
      }
      q.prefill = best;
      std::vector<Candidate> view = decode_view_;
      for (Candidate& cand : view) cand.active += decode_[cand.slot].dispatched;
      q.decode = int(
          scheduler::ChooseDecode(view, q.prompt_tokens, max_tokens, {}, c_.router)->slot);
      break;
    }
    case Policy::kLlmd:
      q.prefill = ChooseLlmdPrefill(q);
      q.decode = ChooseLlmdDecode();
      break;
    case Policy::kDynamo:
      q.prefill = ChooseDynamoPrefill(q);
      q.decode = ChooseDynamoDecode();
      break;
  }
  PrefillWorker& pw = prefill_[q.prefill];
  pw.outstanding += 1;
  q.routed_work = q.prompt_tokens - c_.chunk_tokens * HeldLive(q.prefill, q);
  pw.pending_work += q.routed_work;
  for (const Hash128& h : q.chain) pw.pending_chunks[h] += 1;
  decode_[q.decode].dispatched += 1;
  decode_[q.decode].committed_pages += PagesFor(q);
  return absl::OkStatus();
}

int Simulation::HeldLive(int p, const Request& q) const {
  const PrefillWorker& pw = prefill_[p];
  const int max_reuse = (q.prompt_tokens - 1) / c_.chunk_tokens;
  int n = 0;
  while (n < max_reuse && (pw.cache.Contains(q.chain[n]) || pw.pending_chunks.contains(q.chain[n]))) {
    ++n;
  }
  return n;
}

int Simulation::PickMax(const std::vector<double>& scores) {
  const double best = *std::max_element(scores.begin(), scores.end());
  std::vector<int> ties;
  for (int i = 0; i < int(scores.size()); ++i) {
    if (scores[i] == best) ties.push_back(i);
  }
  return ties[std::uniform_int_distribution<size_t>(0, ties.size() - 1)(tie_rng_)];
}

// llm-d's scorers, weights 3 (prefix) : 2 (KV utilization) : 2 (queue).
namespace llmd {
// (max - v) / (max - min) over all; 1 for all when equal.
std::vector<double> QueueScores(const std::vector<double>& waiting) {
  const auto [lo, hi] = std::minmax_element(waiting.begin(), waiting.end());
  std::vector<double> s(waiting.size(), 1.0);
  if (*hi > *lo) {
    for (size_t i = 0; i < s.size(); ++i) s[i] = (*hi - waiting[i]) / (*hi - *lo);
  }
  return s;
}
// Min-max over the workers holding any chunk; 1 for them when equal; 0 for the others.
std::vector<double> PrefixScores(const std::vector<int>& held) {
  int lo = INT_MAX, hi = 0;
  for (int h : held) {
    if (h > 0) lo = std::min(lo, h), hi = std::max(hi, h);
  }
  std::vector<double> s(held.size(), 0.0);
  for (size_t i = 0; i < s.size(); ++i) {
    if (held[i] > 0) s[i] = hi == lo ? 1.0 : double(held[i] - lo) / (hi - lo);
  }
  return s;
}
}  // namespace llmd

int Simulation::ChooseLlmdPrefill(const Request& q) {
  const int n = c_.prefill;
  const double pages = double(c_.prefill_cache_chunks) * c_.chunk_tokens / c_.page_tokens;
  std::vector<int> held(n);
  std::vector<double> waiting(n), score(n);
  for (int p = 0; p < n; ++p) {
    held[p] = HeldLive(p, q);
    waiting[p] = double(prefill_[p].queue.size());
  }
  const std::vector<double> prefix = llmd::PrefixScores(held), queue = llmd::QueueScores(waiting);
  for (int p = 0; p < n; ++p) {
    // Pages of the prompts in work or waiting (a cached chunk is free to evict).
    double used = 0;
    const PrefillWorker& pw = prefill_[p];
    if (pw.current >= 0) used += PagesFor(reqs_[pw.current]);
    for (int r : pw.queue) used += PagesFor(reqs_[r]);
    score[p] = 3 * prefix[p] + 2 * (1 - std::min(1.0, used / pages)) + 2 * queue[p];
  }
  return PickMax(score);
}

int Simulation::ChooseLlmdDecode() {
  const int n = c_.decode;
  std::vector<double> waiting(n), score(n);
  for (int d = 0; d < n; ++d) waiting[d] = double(decode_[d].waiting.size());
  const std::vector<double> queue = llmd::QueueScores(waiting);
  for (int d = 0; d < n; ++d) {
    // No decode worker holds a prefix in this model: prefix scores are all 0.
    score[d] = 2 * (1 - double(decode_[d].used_pages) / c_.decode_pages) + 2 * queue[d];
  }
  return PickMax(score);
}

int Simulation::ChooseDynamoPrefill(const Request& q) const {
  constexpr double kBlock = 16, kOverlapWeight = 1.0;
  int best = 0;
  double best_cost = 0;
  for (int p = 0; p < c_.prefill; ++p) {
    const double new_blocks = (q.prompt_tokens - c_.chunk_tokens * HeldLive(p, q)) / kBlock;
    const double cost = kOverlapWeight * new_blocks + prefill_[p].pending_work / kBlock;
    if (p == 0 || cost < best_cost) best = p, best_cost = cost;
  }
  return best;
}

int Simulation::ChooseDynamoDecode() const {
  int best = 0;
  for (int d = 1; d < c_.decode; ++d) {
    if (decode_[d].committed_pages < decode_[best].committed_pages) best = d;
  }
  return best;
}

void Simulation::StartPrefill(int p) {
  PrefillWorker& pw = prefill_[p];
  if (pw.current >= 0 || pw.queue.empty()) return;
  pw.current = pw.queue.front();
  pw.queue.pop_front();
  Request& q = reqs_[pw.current];
  const int max_reuse = (q.prompt_tokens - 1) / c_.chunk_tokens;
  q.cached_chunks = pw.cache.Longest(q.chain, max_reuse, /*touch=*/true);
  int published = 0;
  if (c_.relay) {
    while (published < max_reuse && relay_.contains(q.chain[published])) ++published;
  }
  q.fetched_chunks = std::max(0, published - q.cached_chunks);
  const int computed = q.prompt_tokens - (q.cached_chunks + q.fetched_chunks) * c_.chunk_tokens;
  interval_computed_ += computed;
  const double s = m_.prefill_overhead_ms / 1e3 + computed / m_.prefill_tokens_per_s +
                   q.fetched_chunks * c_.chunk_tokens * m_.kv_bytes_per_token /
                       m_.fetch_bytes_per_s;
  pw.busy_s += s;
  At(now_ + s, kPrefillDone, p);
}

void Simulation::PrefillDone(int p) {
  PrefillWorker& pw = prefill_[p];
  const int r = pw.current;
  pw.current = -1;
  Request& q = reqs_[r];
  for (const Hash128& h : q.chain) pw.cache.Insert(h, &pw.stored, &pw.evicted);
  if (c_.relay) {
    relay_.insert(q.chain.begin(), q.chain.end());
    if (registry_) registry_->Published(absl::StrCat("req-", r), pw.id, q.chain);
  }
  q.first_token = now_;
  Miss(q, (q.first_token - q.arrival) * 1e3 > s_.slo_ttft_ms);
  pw.outstanding -= 1;
  pw.pending_work -= q.routed_work;
  for (const Hash128& h : q.chain) {
    if (auto it = pw.pending_chunks.find(h); --it->second == 0) pw.pending_chunks.erase(it);
  }
  if (registry_) registry_->PrefillAnswered(&q.route);
  const double chunk_s =
      std::min(q.prompt_tokens, c_.chunk_tokens) * m_.kv_bytes_per_token / m_.transfer_bytes_per_s;
  At(now_ + chunk_s, kDecodeJoin, r);
  StartPrefill(p);
  MaybeGone(false, p);
}

void Simulation::Integrate(DecodeWorker& dw) {
  dw.batch_seconds += double(dw.running.size()) * (now_ - dw.last_change);
  dw.last_change = now_;
}

void Simulation::DecodeJoin(int r) {
  Request& q = reqs_[r];
  q.remaining = q.output_tokens - 1;  // the prefill sampled the first
  DecodeWorker& dw = decode_[q.decode];
  dw.waiting.push_back(r);
  TryAdmit(q.decode);
}

void Simulation::TryAdmit(int d) {
  DecodeWorker& dw = decode_[d];
  while (!dw.waiting.empty() && int(dw.running.size()) < c_.max_batch &&
         dw.used_pages + PagesFor(reqs_[dw.waiting.front()]) <= c_.decode_pages) {
    const int r = dw.waiting.front();
    dw.waiting.pop_front();
    dw.used_pages += PagesFor(reqs_[r]);
    Integrate(dw);
    dw.running.push_back(r);
  }
  if (!dw.stepping && !dw.running.empty()) {
    dw.stepping = true;
    const double step_s = m_.DecodeStepMs(int(dw.running.size())) / 1e3;
    dw.busy_s += step_s;
    At(now_ + step_s, kStepDone, d);
  }
}

void Simulation::StepDone(int d) {
  DecodeWorker& dw = decode_[d];
  dw.stepping = false;
  interval_output_ += double(dw.running.size());  // one token each
  std::vector<int> still;
  for (int r : dw.running) {
    Request& q = reqs_[r];
    if (q.remaining > 0) q.remaining -= 1;
    if (q.remaining > 0) {
      still.push_back(r);
      continue;
    }
    q.end = now_;
    ended_ += 1;
    Miss(q, q.output_tokens > 1 &&
                (q.end - q.first_token) * 1e3 / (q.output_tokens - 1) > s_.slo_itl_ms);
    dw.used_pages -= PagesFor(q);
    dw.dispatched -= 1;
    dw.committed_pages -= PagesFor(q);
    if (registry_) registry_->Release(&q.route);
  }
  Integrate(dw);
  dw.running = std::move(still);
  TryAdmit(d);
  MaybeGone(true, d);
}

void Simulation::Heartbeat(int key) {
  const bool decode = key & 1;
  const int worker = key >> 1;
  if (!LifeOf(decode, worker).active()) return;  // left the registry: no more heartbeats
  v1::HeartbeatRequest req;
  v1::WorkerLoad* load = req.mutable_load();
  if (!decode) {
    PrefillWorker& pw = prefill_[worker];
    req.set_worker_id(pw.id);
    int64_t waiting = 0;  // as the engine counts: tokens its cache does not hold
    for (int r : pw.queue) {
      const Request& q = reqs_[r];
      const int max_reuse = (q.prompt_tokens - 1) / c_.chunk_tokens;
      waiting += q.prompt_tokens - c_.chunk_tokens * pw.cache.Longest(q.chain, max_reuse, false);
    }
    load->set_free_pages(c_.decode_pages);
    load->set_running(pw.current >= 0 ? 1 : 0);
    load->set_queued(int(pw.queue.size()));
    load->set_queued_tokens(waiting);
    auto event = [&](v1::KvEvent::Kind kind, std::vector<Hash128>* hashes) {
      if (hashes->empty()) return;
      v1::KvEvent* e = req.add_events();
      e->set_kind(kind);
      for (const Hash128& h : *hashes) e->add_chunk_hashes(HashToBytes(h));
      kind == v1::KvEvent::KIND_STORED ? index_.Stored(worker, *hashes)
                                       : index_.Evicted(worker, *hashes);
      hashes->clear();
    };
    // A chunk stored and evicted within one period is reported in that order.
    event(v1::KvEvent::KIND_STORED, &pw.stored);
    event(v1::KvEvent::KIND_EVICTED, &pw.evicted);
  } else {
    DecodeWorker& dw = decode_[worker];
    req.set_worker_id(dw.id);
    load->set_free_pages(c_.decode_pages - dw.used_pages);
    load->set_running(int(dw.running.size()));
    load->set_queued(int(dw.waiting.size()));
    Candidate& view = decode_view_[worker];
    view.free_pages = load->free_pages();
    view.active = load->running() + load->queued();
  }
  if (registry_) {
    v1::HeartbeatResponse resp;
    registry_->Heartbeat(nullptr, &req, &resp);
  }
  if (ended_ < int(reqs_.size())) At(now_ + c_.heartbeat_s, kHeartbeat, key);
}

void Simulation::WorkerUp(int key) {
  const bool decode = key & 1;
  const int i = key >> 1;
  Lifetime& life = LifeOf(decode, i);
  if (!life.active()) return;  // scaled down while starting
  life.serving = true;
  (void)Register(decode, i);  // the sim's registry accepts every well-formed worker
  At(now_, kHeartbeat, key);
}

int Simulation::ActiveCount(bool decode) const {
  int n = 0;
  if (decode) {
    for (const DecodeWorker& w : decode_) n += w.active();
  } else {
    for (const PrefillWorker& w : prefill_) n += w.active();
  }
  return n;
}

void Simulation::MaybeGone(bool decode, int i) {
  Lifetime& life = LifeOf(decode, i);
  if (!life.draining || life.gone >= 0) return;
  const bool idle = decode ? decode_[i].dispatched == 0 && !decode_[i].stepping
                           : prefill_[i].outstanding == 0 && prefill_[i].current < 0;
  if (idle) life.gone = now_;
}

void Simulation::Resize(bool decode, int target) {
  int active = ActiveCount(decode);
  if (target != active) changes_[decode] += 1;
  for (; active < target; ++active) AddWorker(decode, /*serving=*/false);
  const int n = decode ? int(decode_.size()) : int(prefill_.size());
  // Fewer: workers still starting go first, then those with the least routed to them.
  auto load = [&](int i) {
    return decode ? decode_[i].dispatched : prefill_[i].outstanding;
  };
  while (active > target) {
    int victim = -1;
    for (int i = 0; i < n; ++i) {
      const Lifetime& l = LifeOf(decode, i);
      if (!l.active()) continue;
      if (victim < 0 || (!l.serving && LifeOf(decode, victim).serving) ||
          (l.serving == LifeOf(decode, victim).serving && load(i) < load(victim))) {
        victim = i;
      }
    }
    Lifetime& life = LifeOf(decode, victim);
    life.draining = true;
    if (registry_ && life.serving) {
      v1::DeregisterRequest req;
      req.set_worker_id(decode ? decode_[victim].id : prefill_[victim].id);
      v1::DeregisterResponse resp;
      registry_->Deregister(nullptr, &req, &resp);
    }
    if (!life.serving) life.gone = now_;
    MaybeGone(decode, victim);
    --active;
  }
}

int Simulation::HpaReplicas(double busy_s, int serving, int active,
                            std::deque<std::pair<double, int>>* recs) const {
  int want = active;
  if (serving > 0) {
    const double ratio = busy_s / (serving * s_.interval_s) / s_.hpa_target;
    if (std::fabs(ratio - 1) > 0.1) want = int(std::ceil(serving * ratio));
  }
  want = std::clamp(want, s_.min_workers, s_.max_workers);
  recs->emplace_back(now_, want);
  while (!recs->empty() && recs->front().first < now_ - s_.hpa_downscale_window_s) {
    recs->pop_front();
  }
  if (want < active) {  // down only to the window's highest recommendation
    for (const auto& [t, r] : *recs) want = std::max(want, r);
    want = std::min(want, active);
  }
  return want;
}

void Simulation::Scale() {
  double busy[2] = {0, 0};
  int serving[2] = {0, 0};
  for (const PrefillWorker& w : prefill_) busy[0] += w.busy_s, serving[0] += w.serving && w.active();
  for (const DecodeWorker& w : decode_) busy[1] += w.busy_s, serving[1] += w.serving && w.active();
  int target[2];
  if (s_.scaler == Scaler::kPlanner) {
    scheduler::WorkerCapacity cap;
    cap.prefill_tokens_per_s = m_.prefill_tokens_per_s;
    cap.decode_step_ms = m_.DecodeStepMs(1);
    cap.decode_step_ms_per_seq = (m_.DecodeStepMs(32) - m_.DecodeStepMs(1)) / 31;
    scheduler::IntervalLoad load{double(interval_arrivals_), interval_computed_, interval_output_};
    for (const PrefillWorker& w : prefill_) {
      for (int r : w.queue) load.prefill_backlog_tokens += reqs_[r].routed_work;
    }
    for (const DecodeWorker& w : decode_) load.decode_backlog_requests += double(w.waiting.size());
    const scheduler::PlanDecision d = planner_->Plan(load, cap);
    target[0] = d.prefill.replicas;
    target[1] = d.decode.replicas;
  } else {
    for (int role = 0; role < 2; ++role) {
      target[role] = HpaReplicas(busy[role] - busy_mark_[role], serving[role],
                                 ActiveCount(role == 1), &hpa_recs_[role]);
    }
  }
  Resize(false, target[0]);
  Resize(true, target[1]);
  Result::Interval iv;
  iv.t = now_ - s_.interval_s;
  iv.prefill = ActiveCount(false);
  iv.decode = ActiveCount(true);
  iv.arrivals_per_s = interval_arrivals_ / s_.interval_s;
  timeline_.push_back(iv);
  busy_mark_[0] = busy[0];
  busy_mark_[1] = busy[1];
  interval_arrivals_ = 0;
  interval_computed_ = interval_output_ = 0;
  if (ended_ < int(reqs_.size())) At(now_ + s_.interval_s, kScale, 0);
}

absl::StatusOr<Result> Simulation::Run() {
  if (absl::Status s = Start(); !s.ok()) return s;
  while (!events_.empty()) {
    const Event e = events_.top();
    events_.pop();
    now_ = e.t;
    switch (e.kind) {
      case kArrival:
        interval_arrivals_ += 1;
        if (absl::Status s = Route(e.id); !s.ok()) return s;
        prefill_[reqs_[e.id].prefill].queue.push_back(e.id);
        StartPrefill(reqs_[e.id].prefill);
        break;
      case kPrefillDone:
        PrefillDone(e.id);
        break;
      case kDecodeJoin:
        DecodeJoin(e.id);
        break;
      case kStepDone:
        StepDone(e.id);
        break;
      case kHeartbeat:
        Heartbeat(e.id);
        break;
      case kWorkerUp:
        WorkerUp(e.id);
        break;
      case kScale:
        Scale();
        break;
    }
    if (s_.max_misses >= 0 && misses_ > s_.max_misses) {
      Result r;
      r.abandoned = true;
      r.requests = int(reqs_.size());
      r.slo_met = 1 - double(misses_) / r.requests;
      r.simulated_s = now_;
      return r;
    }
  }
  if (ended_ != int(reqs_.size())) {
    return absl::InternalError(absl::StrCat(reqs_.size() - ended_, " requests never ended"));
  }
  return Summarize();
}

Result Simulation::Summarize() const {
  Result res;
  const size_t first = size_t(w_.warmup_fraction * double(reqs_.size()));
  std::vector<double> ttft, e2e, itl;
  double prompt = 0, held = 0, reused = 0, out = 0, t0 = reqs_[first].arrival, t1 = 0;
  int met = 0;
  for (size_t i = first; i < reqs_.size(); ++i) {
    const Request& q = reqs_[i];
    ttft.push_back((q.first_token - q.arrival) * 1e3);
    e2e.push_back((q.end - q.arrival) * 1e3);
    // Mean inter-token latency after the first token (the KV's crossing and
    // any wait for a decode slot included).
    itl.push_back(q.output_tokens > 1 ? (q.end - q.first_token) * 1e3 / (q.output_tokens - 1) : 0);
    met += ttft.back() <= s_.slo_ttft_ms && itl.back() <= s_.slo_itl_ms;
    prompt += q.prompt_tokens;
    held += q.cached_chunks * c_.chunk_tokens;
    reused += (q.cached_chunks + q.fetched_chunks) * c_.chunk_tokens;
    out += q.output_tokens;
    t1 = std::max(t1, q.end);
  }
  res.requests = int(ttft.size());
  res.slo_met = double(met) / std::max<size_t>(1, ttft.size());
  res.itl_p99_ms = Percentile(itl, 0.99);
  double end = 0;
  for (const Request& q : reqs_) end = std::max(end, q.end);
  auto hours = [&](const Lifetime& l) { return ((l.gone >= 0 ? l.gone : end) - l.started) / 3600; };
  for (const PrefillWorker& w : prefill_) res.prefill_worker_hours += hours(w);
  for (const DecodeWorker& w : decode_) res.decode_worker_hours += hours(w);
  res.prefill_changes = changes_[0];
  res.decode_changes = changes_[1];
  res.timeline = timeline_;
  for (Result::Interval& iv : res.timeline) {
    std::vector<double> in;
    for (const Request& q : reqs_) {
      if (q.arrival >= iv.t && q.arrival < iv.t + s_.interval_s) {
        in.push_back((q.first_token - q.arrival) * 1e3);
      }
    }
    iv.ttft_p99_ms = Percentile(in, 0.99);
  }
  res.hit_rate = held / prompt;
  res.reuse_rate = reused / prompt;
  res.ttft_p50_ms = Percentile(ttft, 0.5);
  res.ttft_p90_ms = Percentile(ttft, 0.9);
  res.ttft_p99_ms = Percentile(ttft, 0.99);
  res.e2e_p50_ms = Percentile(e2e, 0.5);
  res.output_tokens_per_s = out / std::max(1e-9, t1 - t0);
  res.simulated_s = now_;
  auto balance = [](const std::vector<double>& v) {
    double sum = 0, mx = 0;
    for (double x : v) {
      sum += x;
      mx = std::max(mx, x);
    }
    return sum > 0 ? mx / (sum / double(v.size())) : 1.0;
  };
  std::vector<double> batch, busy;
  for (const DecodeWorker& d : decode_) batch.push_back(d.batch_seconds);
  for (const PrefillWorker& p : prefill_) busy.push_back(p.busy_s);
  res.decode_balance = balance(batch);
  res.prefill_balance = balance(busy);
  return res;
}

}  // namespace

const char* PolicyName(Policy p) {
  switch (p) {
    case Policy::kKvcast:
      return "kvcast";
    case Policy::kRoundRobin:
      return "round-robin";
    case Policy::kAffinity:
      return "affinity";
    case Policy::kLlmd:
      return "llm-d";
    case Policy::kDynamo:
      return "dynamo";
  }
  return "?";
}

double CostModel::DecodeStepMs(int batch) const {
  const auto& p = decode_step_ms;
  if (p.size() == 1) return p[0].second;
  size_t i = 1;
  while (i + 1 < p.size() && batch > p[i].first) ++i;
  const double slope = (p[i].second - p[i - 1].second) / double(p[i].first - p[i - 1].first);
  return std::max(p[0].second, p[i - 1].second + slope * (batch - p[i - 1].first));
}

absl::Status CostModel::ForTrack(const std::string& track) {
  struct Row {
    const char* name;
    double bytes_vs_fp16, live_mib_s, cached_mib_s;
  };
  static constexpr Row kRows[] = {
      {"fp16", 1.0, 205, 566}, {"int8", 0.508, 198, 432}, {"ac", 81.2 / 128, 52, 78}};
  for (const Row& r : kRows) {
    if (track != r.name) continue;
    kv_bytes_per_token = 23040 * r.bytes_vs_fp16;
    transfer_bytes_per_s = r.live_mib_s * (1 << 20);
    fetch_bytes_per_s = r.cached_mib_s * (1 << 20);
    return absl::OkStatus();
  }
  return absl::NotFoundError(absl::StrCat("no measured costs for track \"", track,
                                          "\" (fp16, int8, ac)"));
}

double DefaultRate(const Workload& w, const Cluster& c, const CostModel& m, double utilization) {
  // With its system prompt reused, a request computes its own tokens plus,
  // on average, half a chunk of the system prompt's partial last chunk.
  const double own = 0.5 * (w.user_tokens_min + w.user_tokens_max) + 0.5 * c.chunk_tokens;
  const double per_request = m.prefill_overhead_ms / 1e3 + own / m.prefill_tokens_per_s;
  return utilization * c.prefill / per_request;
}

const char* ScalerName(Scaler s) {
  switch (s) {
    case Scaler::kFixed:
      return "fixed";
    case Scaler::kPlanner:
      return "planner";
    case Scaler::kHpa:
      return "hpa";
  }
  return "?";
}

absl::StatusOr<Result> Simulate(Policy policy, const Workload& workload, const Cluster& cluster,
                                const CostModel& model, const Scaling& scaling) {
  if (scaling.scaler != Scaler::kFixed &&
      (policy != Policy::kKvcast || scaling.interval_s <= 0 || scaling.start_latency_s < 0 ||
       scaling.min_workers < 1 || scaling.max_workers < scaling.min_workers ||
       scaling.hpa_target <= 0)) {
    return absl::InvalidArgumentError(
        "routing simulation: scaling needs the kvcast policy, a positive interval and "
        "1 <= min_workers <= max_workers");
  }
  if ((workload.day_s <= 0 && workload.requests < 10) || workload.system_prompts < 1 || cluster.prefill < 1 ||
      cluster.decode < 1 || cluster.chunk_tokens < 1 || cluster.page_tokens < 1 ||
      workload.system_tokens_min < 1 || workload.system_tokens_max < workload.system_tokens_min ||
      workload.user_tokens_min < 1 || workload.user_tokens_max < workload.user_tokens_min ||
      workload.output_tokens_min < 1 || workload.output_tokens_max < workload.output_tokens_min ||
      model.decode_step_ms.empty()) {
    return absl::InvalidArgumentError("routing simulation: inconsistent workload or cluster");
  }
  const int longest =
      workload.system_tokens_max +
      int(workload.user_tokens_max * (workload.shift_at > 0 ? std::max(1.0, workload.shift_user_tokens) : 1.0));
  if ((longest + workload.output_tokens_max) / cluster.page_tokens + 1 > cluster.decode_pages) {
    return absl::InvalidArgumentError(
        absl::StrCat("routing simulation: a request of ", longest + workload.output_tokens_max,
                     " tokens does not fit in a decode worker's ", cluster.decode_pages, " pages"));
  }
  const double rate =
      workload.rate > 0 ? workload.rate : DefaultRate(workload, cluster, model, 0.7);
  std::vector<Request> trace = MakeTrace(workload, cluster, rate);
  if (trace.size() < 10) return absl::InvalidArgumentError("routing simulation: under 10 arrivals");
  Simulation sim(policy, workload, cluster, model, scaling, std::move(trace));
  return sim.Run();
}

}  // namespace kvcast::sim
