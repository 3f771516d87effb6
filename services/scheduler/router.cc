#include "services/scheduler/router.h"

#include <algorithm>
#include <tuple>
#include <vector>

namespace kvcast::scheduler {

std::optional<PrefillPlan> ChoosePrefill(
    const std::vector<Candidate>& prefill, int prompt_tokens,
    const absl::flat_hash_map<WorkerSlot, int>& held, int published_chunks,
    const RouterOptions& options,
    const absl::flat_hash_map<WorkerSlot, PrefixIndex::BelowPool>& below) {
  const int chunk = options.chunk_tokens;
  const int max_reuse = (prompt_tokens - 1) / chunk;  // the last token is computed
  std::vector<PrefillPlan> plans;
  plans.reserve(prefill.size());
  double least = 0;
  for (const Candidate& c : prefill) {
    auto it = held.find(c.slot);
    const int cached = std::min(it == held.end() ? 0 : it->second, max_reuse);
    const int fetched = std::max(0, std::min(published_chunks, max_reuse) - cached);
    const int computed = prompt_tokens - (cached + fetched) * chunk;
    double work = computed + options.fetch_weight * fetched * chunk;
    if (auto b = below.find(c.slot); b != below.end()) {
      work += chunk * (options.host_weight * std::min(b->second.host, cached) +
                       options.disk_weight * std::min(b->second.disk, cached));
    }
    plans.push_back(PrefillPlan{c.slot, cached, fetched, work,
                                double(c.backlog_tokens) + options.load_weight * c.active});
    least = plans.size() == 1 ? work : std::min(least, work);
  }
  std::optional<PrefillPlan> best;
  for (PrefillPlan& p : plans) {
    p.cost += p.work + options.miss_weight * (p.work - least);
    if (!best || p.cost < best->cost) best = p;
  }
  return best;
}

std::optional<DecodePlan> ChooseDecode(const std::vector<Candidate>& decode, int prompt_tokens,
                                       int max_tokens,
                                       const absl::flat_hash_map<WorkerSlot, int>& held,
                                       const RouterOptions& options) {
  const int max_reuse = (prompt_tokens - 1) / options.chunk_tokens;
  auto held_by = [&](WorkerSlot slot) {
    auto it = held.find(slot);
    return it == held.end() ? 0 : std::min(it->second, max_reuse);
  };
  // Order: has room for the whole sequence, then fewer requests in flight,
  // then more of the prompt held, then more free pages. A worker without
  // room still takes the request (its engine queues it until pages free up)
  // when no worker has room.
  auto key = [&](const Candidate& c) {
    const int need = (prompt_tokens + max_tokens + c.page_tokens - 1) / c.page_tokens;
    return std::make_tuple(c.free_pages >= need ? 0 : 1, c.active, -held_by(c.slot),
                           -c.free_pages);
  };
  const Candidate* best = nullptr;
  for (const Candidate& c : decode) {
    if (best == nullptr || key(c) < key(*best)) best = &c;
  }
  if (best == nullptr) return std::nullopt;
  const int cached = held_by(best->slot);
  return DecodePlan{best->slot, cached,
                    prompt_tokens - cached * options.chunk_tokens <= options.fuse_tokens};
}

}  // namespace kvcast::scheduler
