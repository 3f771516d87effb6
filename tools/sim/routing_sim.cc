// The routing simulator's events and routing: see routing_sim.h and
// simulation.h (scaling.cc: worker lifecycles; trace.cc: the trace).
#include "tools/sim/routing_sim.h"

#include <climits>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "tools/sim/simulation.h"

namespace kvcast::sim {
namespace internal {

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
  // Interval i starts at i x interval_s (Scale runs every interval from 0).
  std::vector<std::vector<double>> ttft_by_interval(res.timeline.size());
  for (const Request& q : reqs_) {
    const size_t i = size_t(q.arrival / s_.interval_s);
    if (i < ttft_by_interval.size()) ttft_by_interval[i].push_back((q.first_token - q.arrival) * 1e3);
  }
  for (size_t i = 0; i < res.timeline.size(); ++i) {
    res.timeline[i].ttft_p99_ms = Percentile(std::move(ttft_by_interval[i]), 0.99);
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

}  // namespace internal

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
  // kv_path_bench --cases relay,cached --tokens 1024 --rounds 3, medians,
  // AMD EPYC Zen 5, 2026-11-28 (docs/benchmarks.md, "Routing at scale").
  static constexpr Row kRows[] = {
      {"fp16", 1.0, 1116, 2217}, {"int8", 0.508, 687, 1516}, {"ac", 81.2 / 128, 313, 655}};
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

namespace {

// The trace Simulate runs: at the workload's rate, or 70% of DefaultRate.
std::vector<internal::Request> TraceOf(const Workload& w, const Cluster& c, const CostModel& m) {
  return internal::MakeTrace(w, c, w.rate > 0 ? w.rate : DefaultRate(w, c, m, 0.7));
}

}  // namespace

int TraceRequests(const Workload& workload, const Cluster& cluster, const CostModel& model) {
  return int(TraceOf(workload, cluster, model).size());
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
  std::vector<internal::Request> trace = TraceOf(workload, cluster, model);
  if (trace.size() < 10) return absl::InvalidArgumentError("routing simulation: under 10 arrivals");
  internal::Simulation sim(policy, workload, cluster, model, scaling, std::move(trace));
  return sim.Run();
}

}  // namespace kvcast::sim
