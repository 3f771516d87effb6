// Worker lifecycles and autoscaling in the routing simulator: see
// routing_sim.h (Scaling) and simulation.h.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "tools/sim/simulation.h"

namespace kvcast::sim::internal {

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


}  // namespace kvcast::sim::internal
