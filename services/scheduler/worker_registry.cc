#include "services/scheduler/worker_registry.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "services/common/log.h"

namespace kvcast::scheduler {
namespace {

Tier TierOf(int tier) {
  switch (tier) {
    case v1::KV_TIER_HOST:
      return Tier::kHost;
    case v1::KV_TIER_DISK:
      return Tier::kDisk;
    default:
      return Tier::kPool;
  }
}

std::vector<Hash128> HashesOf(const google::protobuf::RepeatedPtrField<std::string>& bytes) {
  std::vector<Hash128> out;
  out.reserve(bytes.size());
  for (const std::string& b : bytes) {
    Hash128 h;
    if (HashFromBytes(b, &h)) out.push_back(h);
  }
  return out;
}


// Adds what a worker's cumulative totals grew by between two reports to
// `work` (a total that fell: the counts started again, so all of it).
void AddWork(v1::WorkerRole role, const v1::WorkerLoad& before, const v1::WorkerLoad& now,
             WorkerRegistry::Work* work) {
  auto grown = [](double was, double is) { return is >= was ? is - was : is; };
  work->generated_tokens += grown(before.tokens_generated_total(), now.tokens_generated_total());
  if (role == v1::WORKER_ROLE_PREFILL) {
    work->prefill_prompt_tokens +=
        grown(before.prompt_tokens_computed_total(), now.prompt_tokens_computed_total());
    work->prefill_step_seconds += grown(before.step_seconds_total(), now.step_seconds_total());
  } else {
    work->requests += grown(before.sequences_total(), now.sequences_total());
    work->decode_steps += grown(before.steps_total(), now.steps_total());
    work->decode_step_sequences +=
        grown(before.step_sequences_total(), now.step_sequences_total());
    work->decode_step_seconds += grown(before.step_seconds_total(), now.step_seconds_total());
  }
}

}  // namespace

WorkerRegistry::WorkerRegistry(Options options)
    : options_(std::move(options)), published_(options_.published_chunks) {
  reaper_ = std::thread([this] {
    while (!stop_.WaitForNotificationWithTimeout(options_.lease / 4)) Reap();
  });
}

WorkerRegistry::~WorkerRegistry() {
  stop_.Notify();
  reaper_.join();
}

void WorkerRegistry::Reap() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  std::vector<WorkerSlot> dead;
  for (const auto& [slot, w] : workers_) {
    if (now - w.last_seen > options_.lease) dead.push_back(slot);
  }
  for (WorkerSlot s : dead) {
    services::Log().warn("worker {} missed its lease; dropped", workers_[s].ref.worker_id.c_str());
    DropLocked(s);
  }
}

void WorkerRegistry::DropLocked(WorkerSlot slot) {
  auto it = workers_.find(slot);
  if (it == workers_.end()) return;
  by_id_.erase(it->second.ref.worker_id);
  index_.RemoveWorker(slot);
  workers_.erase(it);
  ++version_;
}

grpc::Status WorkerRegistry::Register(grpc::ServerContext*, const v1::RegisterRequest* request,
                                      v1::RegisterResponse* response) {
  const v1::WorkerInfo& info = request->worker();
  if (info.worker_id().empty() || info.grpc_address().empty() ||
      (info.role() != v1::WORKER_ROLE_PREFILL && info.role() != v1::WORKER_ROLE_DECODE)) {
    return grpc::Status(grpc::INVALID_ARGUMENT,
                        "register: worker_id, grpc_address and a role are required");
  }
  auto fingerprint = Hash128FromHex(info.model_id());
  if (!fingerprint.ok()) {
    return grpc::Status(grpc::INVALID_ARGUMENT,
                        absl::StrCat("register: model_id ", fingerprint.status().message()));
  }
  if (info.chunk_tokens() <= 0 || info.page_tokens() <= 0) {
    return grpc::Status(grpc::INVALID_ARGUMENT, "register: chunk_tokens and page_tokens must be > 0");
  }
  absl::MutexLock lock(&mu_);
  if (model_ && (model_->model_id != info.model_id() || model_->chunk_tokens != info.chunk_tokens())) {
    return grpc::Status(
        grpc::FAILED_PRECONDITION,
        absl::StrCat("register: this scheduler serves model ", model_->name, " (", model_->model_id,
                     ", chunk ", model_->chunk_tokens, "); worker ", info.worker_id(), " has ",
                     info.model_name(), " (", info.model_id(), ", chunk ", info.chunk_tokens(), ")"));
  }
  if (!model_) {
    ModelInfo m;
    m.name = info.model_name();
    m.model_id = info.model_id();
    m.fingerprint = *fingerprint;
    m.prefix_seed = PrefixSeed(*fingerprint);
    m.chunk_tokens = info.chunk_tokens();
    m.vocab_size = info.vocab_size();
    m.max_sequence_len = info.max_sequence_len();
    m.eos_token_ids.assign(info.eos_token_ids().begin(), info.eos_token_ids().end());
    model_ = std::move(m);
  }
  if (auto it = by_id_.find(info.worker_id()); it != by_id_.end()) DropLocked(it->second);
  const WorkerSlot slot = next_slot_++;
  Worker& w = workers_[slot];
  w.ref = WorkerRef{slot,
                    info.worker_id(),
                    info.grpc_address(),
                    info.moqt_address(),
                    options_.make_channel(info.grpc_address()),
                    info.calibrated_chunk_ms()};
  w.info = info;
  w.load = request->load();
  w.dispatched_at_report = w.dispatched;
  w.dispatched_work_at_report = w.dispatched_work;
  w.last_seen = absl::Now();
  by_id_[info.worker_id()] = slot;
  ++version_;
  std::vector<Tier> tiers;
  for (int t : request->cached_chunk_tiers()) tiers.push_back(TierOf(t));
  index_.Replace(slot, HashesOf(request->cached_chunks()), tiers);
  services::Log().info("{} worker {} registered ({} chunks cached)",
                       info.role() == v1::WORKER_ROLE_PREFILL ? "prefill" : "decode",
                       info.worker_id().c_str(), request->cached_chunks_size());
  response->set_lease_s(absl::ToDoubleSeconds(options_.lease));
  return grpc::Status::OK;
}

WorkerRegistry::Work WorkerRegistry::WorkDone() const {
  absl::MutexLock lock(&mu_);
  return work_;
}

WorkerRegistry::Fleet WorkerRegistry::Summary() const {
  absl::MutexLock lock(&mu_);
  Fleet f;
  int rated = 0, stepped = 0;
  for (const auto& [slot, w] : workers_) {
    if (w.info.role() == v1::WORKER_ROLE_PREFILL) {
      f.prefill_backlog_tokens += double(w.load.queued_tokens());
      if (w.info.calibrated_chunk_ms() > 0) {
        f.prefill_tokens_per_s += w.info.chunk_tokens() / w.info.calibrated_chunk_ms() * 1e3;
        ++rated;
      }
    } else {
      f.decode_backlog_requests += double(w.load.queued());
      if (w.info.calibrated_step_ms() > 0) {
        f.decode_step_ms += w.info.calibrated_step_ms();
        ++stepped;
      }
    }
  }
  if (rated > 0) f.prefill_tokens_per_s /= rated;
  if (stepped > 0) f.decode_step_ms /= stepped;
  return f;
}

grpc::Status WorkerRegistry::Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest* request,
                                       v1::HeartbeatResponse* response) {
  absl::MutexLock lock(&mu_);
  auto it = by_id_.find(request->worker_id());
  if (it == by_id_.end()) {
    response->set_reregister(true);
    return grpc::Status::OK;
  }
  Worker& w = workers_[it->second];
  AddWork(w.info.role(), w.load, request->load(), &work_);
  w.load = request->load();
  w.dispatched_at_report = w.dispatched;
  w.dispatched_work_at_report = w.dispatched_work;
  w.last_seen = absl::Now();
  if (w.suspended) ++version_;
  w.suspended = false;
  ++w.heartbeats;
  for (auto e = w.speculative.begin(); e != w.speculative.end();) {
    e->second.drop_at <= w.heartbeats ? w.speculative.erase(e++) : void(++e);
  }
  for (const v1::KvEvent& e : request->events()) {
    std::vector<Hash128> hashes = HashesOf(e.chunk_hashes());
    if (e.kind() == v1::KvEvent::KIND_STORED) {
      index_.Stored(it->second, hashes, TierOf(e.tier()));
    } else if (e.kind() == v1::KvEvent::KIND_EVICTED) {
      index_.Evicted(it->second, hashes);
    } else if (e.kind() == v1::KvEvent::KIND_PUBLISHED && !e.prompt_digest().empty()) {
      published_.Add(e.prompt_digest(), w.ref.moqt_address, hashes);
    }
  }
  return grpc::Status::OK;
}

grpc::Status WorkerRegistry::Deregister(grpc::ServerContext*,
                                        const v1::DeregisterRequest* request,
                                        v1::DeregisterResponse*) {
  absl::MutexLock lock(&mu_);
  auto it = by_id_.find(request->worker_id());
  if (it != by_id_.end()) {
    services::Log().info("worker {} left", request->worker_id().c_str());
    DropLocked(it->second);
  }
  return grpc::Status::OK;
}

std::optional<ModelInfo> WorkerRegistry::model() const {
  absl::MutexLock lock(&mu_);
  return model_;
}

Candidate WorkerRegistry::CandidateOf(const Worker& w) const {
  Candidate c;
  c.slot = w.ref.slot;
  c.free_pages = w.load.free_pages();
  c.page_tokens = w.info.page_tokens();
  // The report, moved by what was dispatched and answered since.
  const double reported_work =
      double(w.load.queued_tokens()) + w.dispatched_work - w.dispatched_work_at_report;
  c.backlog_tokens = int64_t(std::max(reported_work, w.dispatched_work));
  c.active = std::max(w.load.running() + w.load.queued() + w.dispatched - w.dispatched_at_report,
                      w.dispatched);
  return c;
}

absl::StatusOr<Route> WorkerRegistry::Choose(absl::Span<const Hash128> chain, int prompt_tokens,
                                             int max_tokens,
                                             const absl::flat_hash_set<WorkerSlot>& exclude) {
  absl::MutexLock lock(&mu_);
  std::vector<Candidate> prefill, decode, quiet_prefill, quiet_decode;
  const absl::Time now = absl::Now();
  for (const auto& [slot, w] : workers_) {
    if (exclude.contains(slot) || w.suspended) continue;
    const bool is_prefill = w.info.role() == v1::WORKER_ROLE_PREFILL;
    const bool quiet = now - w.last_seen > options_.quiet;
    (is_prefill ? (quiet ? quiet_prefill : prefill) : (quiet ? quiet_decode : decode))
        .push_back(CandidateOf(w));
  }
  if (prefill.empty()) prefill = std::move(quiet_prefill);
  if (decode.empty()) decode = std::move(quiet_decode);
  // Ties go to the longest-registered worker, whatever the map's order.
  auto by_slot = [](const Candidate& a, const Candidate& b) { return a.slot < b.slot; };
  std::sort(prefill.begin(), prefill.end(), by_slot);
  std::sort(decode.begin(), decode.end(), by_slot);
  if (decode.empty()) {
    return absl::UnavailableError("no decode worker is registered with the scheduler");
  }
  const auto held = options_.prefix_reuse ? HeldLocked(chain)
                                          : absl::flat_hash_map<WorkerSlot, int>{};
  Route route;
  if (options_.prefix_reuse) route.reuse = published_.Longest(chain);
  RouterOptions ro = options_.router;
  ro.chunk_tokens = model_->chunk_tokens;
  auto d = ChooseDecode(decode, prompt_tokens, max_tokens, held, ro);
  Worker& dw = workers_[d->slot];
  route.decode = dw.ref;
  route.decode_plan = *d;
  dw.dispatched += 1;
  if (d->fused) return route;
  // The reusable part each holder keeps below its pool, to promote first.
  absl::flat_hash_map<WorkerSlot, PrefixIndex::BelowPool> below;
  const int max_reuse = (prompt_tokens - 1) / ro.chunk_tokens;
  for (const auto& [slot, run] : held) {
    const PrefixIndex::BelowPool b = index_.Below(slot, chain, std::min(run, max_reuse));
    if (b.host + b.disk > 0) below[slot] = b;
  }
  if (auto p = ChoosePrefill(prefill, prompt_tokens, held, route.reuse.groups, ro, below)) {
    Worker& w = workers_[p->slot];
    route.prefill = w.ref;
    route.prefill_plan = *p;
    route.prefill_counted = true;
    w.dispatched += 1;
    w.dispatched_work += p->work;
    if (options_.prefix_reuse && max_reuse > 0) {
      route.speculative_id = ++next_speculative_id_;
      w.speculative[route.speculative_id].chain.assign(
          chain.begin(), chain.begin() + std::min<size_t>(max_reuse, chain.size()));
    }
  }
  return route;
}

absl::flat_hash_map<WorkerSlot, int> WorkerRegistry::HeldLocked(
    absl::Span<const Hash128> chain) const {
  absl::flat_hash_map<WorkerSlot, int> held = index_.Match(chain);
  for (const auto& [slot, w] : workers_) {
    for (const auto& [id, e] : w.speculative) {
      const size_t n = std::min(chain.size(), e.chain.size());
      size_t run = 0;
      while (run < n && chain[run] == e.chain[run]) ++run;
      if (run > 0) {
        int& h = held[slot];
        h = std::max(h, int(run));
      }
    }
  }
  return held;
}

absl::StatusOr<RouteLease> WorkerRegistry::Lease(absl::Span<const Hash128> chain,
                                                 int prompt_tokens, int max_tokens,
                                                 const absl::flat_hash_set<WorkerSlot>& exclude) {
  absl::StatusOr<Route> route = Choose(chain, prompt_tokens, max_tokens, exclude);
  if (!route.ok()) return route.status();
  return RouteLease(this, std::move(*route));
}

uint64_t WorkerRegistry::version() const {
  absl::MutexLock lock(&mu_);
  return version_;
}

bool WorkerRegistry::AwaitChange(uint64_t seen, absl::Time deadline) const {
  struct Seen {
    const uint64_t* version;
    uint64_t seen;
  } arg{&version_, seen};
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithDeadline(
      absl::Condition(+[](Seen* a) { return *a->version != a->seen; }, &arg), deadline);
}

void WorkerRegistry::PrefillAnswered(Route* route) {
  if (!route->prefill_counted) return;
  route->prefill_counted = false;
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(route->prefill->slot);
  if (it == workers_.end()) return;
  Worker& w = it->second;
  w.dispatched -= 1;
  if (auto e = w.speculative.find(route->speculative_id); e != w.speculative.end()) {
    e->second.drop_at = w.heartbeats + 2;
  }
  // No drift from rounding: an idle worker owes nothing.
  w.dispatched_work = w.dispatched == 0 ? 0 : std::max(0.0, w.dispatched_work - route->prefill_plan.work);
}

void WorkerRegistry::Release(Route* route) {
  PrefillAnswered(route);
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(route->decode.slot);
  if (it != workers_.end()) it->second.dispatched -= 1;
}

void WorkerRegistry::MarkFailed(WorkerSlot slot) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(slot);
  if (it == workers_.end()) return;
  services::Log().warn("worker {} failed a call; suspended until it heartbeats",
                       it->second.ref.worker_id.c_str());
  it->second.suspended = true;
}

void WorkerRegistry::Published(const std::string& digest, const std::string& publisher,
                               absl::Span<const Hash128> chain) {
  absl::MutexLock lock(&mu_);
  published_.Add(digest, publisher, chain);
}

WorkerRegistry::Counts WorkerRegistry::counts() const {
  absl::MutexLock lock(&mu_);
  Counts c;
  for (const auto& [slot, w] : workers_) {
    const bool prefill = w.info.role() == v1::WORKER_ROLE_PREFILL;
    (prefill ? c.prefill : c.decode) += 1;
    (prefill ? c.prefill_chunks : c.decode_chunks) += index_.chunks_of(slot);
    c.waiting += w.load.queued();
    c.running += w.load.running();
    c.pages_total += w.info.total_pages();
    c.pages_used += std::max(0, w.info.total_pages() - w.load.free_pages());
  }
  c.index_chunks = index_.num_chunks();
  return c;
}

}  // namespace kvcast::scheduler
