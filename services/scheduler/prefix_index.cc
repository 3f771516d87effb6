#include "services/scheduler/prefix_index.h"

#include <algorithm>

namespace kvcast::scheduler {

void PrefixIndex::Stored(WorkerSlot w, absl::Span<const Hash128> chunks, Tier tier) {
  auto& mine = by_worker_[w];
  for (const Hash128& h : chunks) {
    auto [it, added] = mine.try_emplace(h, tier);
    it->second = tier;
    if (added) holders_[h].push_back(w);
  }
}

void PrefixIndex::Evicted(WorkerSlot w, absl::Span<const Hash128> chunks) {
  auto it = by_worker_.find(w);
  if (it == by_worker_.end()) return;
  for (const Hash128& h : chunks) {
    if (it->second.erase(h) == 0) continue;
    auto hit = holders_.find(h);
    if (hit == holders_.end()) continue;
    auto& v = hit->second;
    v.erase(std::remove(v.begin(), v.end(), w), v.end());
    if (v.empty()) holders_.erase(hit);
  }
}

void PrefixIndex::Replace(WorkerSlot w, absl::Span<const Hash128> snapshot,
                          absl::Span<const Tier> tiers) {
  RemoveWorker(w);
  for (size_t i = 0; i < snapshot.size(); ++i) {
    Stored(w, snapshot.subspan(i, 1), i < tiers.size() ? tiers[i] : Tier::kPool);
  }
}

void PrefixIndex::RemoveWorker(WorkerSlot w) {
  auto it = by_worker_.find(w);
  if (it == by_worker_.end()) return;
  std::vector<Hash128> held;
  held.reserve(it->second.size());
  for (const auto& [h, tier] : it->second) held.push_back(h);
  Evicted(w, held);
  by_worker_.erase(w);
}

PrefixIndex::BelowPool PrefixIndex::Below(WorkerSlot w, absl::Span<const Hash128> chain,
                                          int n) const {
  BelowPool out;
  auto it = by_worker_.find(w);
  if (it == by_worker_.end()) return out;
  for (int i = 0; i < n && i < int(chain.size()); ++i) {
    auto c = it->second.find(chain[i]);
    if (c == it->second.end()) continue;
    out.host += c->second == Tier::kHost;
    out.disk += c->second == Tier::kDisk;
  }
  return out;
}

size_t PrefixIndex::chunks_of(WorkerSlot w) const {
  auto it = by_worker_.find(w);
  return it == by_worker_.end() ? 0 : it->second.size();
}

absl::flat_hash_map<WorkerSlot, int> PrefixIndex::Match(absl::Span<const Hash128> chain) const {
  absl::flat_hash_map<WorkerSlot, int> run;
  if (chain.empty()) return run;
  auto first = holders_.find(chain[0]);
  if (first == holders_.end()) return run;
  absl::InlinedVector<WorkerSlot, 8> alive(first->second.begin(), first->second.end());
  for (WorkerSlot w : alive) run[w] = 1;
  for (size_t i = 1; i < chain.size() && !alive.empty(); ++i) {
    auto hit = holders_.find(chain[i]);
    if (hit == holders_.end()) break;
    const auto& holders = hit->second;
    alive.erase(std::remove_if(alive.begin(), alive.end(),
                               [&](WorkerSlot w) {
                                 return std::find(holders.begin(), holders.end(), w) ==
                                        holders.end();
                               }),
                alive.end());
    for (WorkerSlot w : alive) run[w] = int(i) + 1;
  }
  return run;
}

void PublishedPrefixes::Add(const std::string& prompt_digest, const std::string& publisher,
                            absl::Span<const Hash128> chain) {
  for (size_t i = 0; i < chain.size(); ++i) {
    const uint64_t age = ++clock_;
    auto [it, fresh] = entries_.try_emplace(chain[i]);
    // Keep the newest publisher of a chunk: its track is the likeliest to be
    // still cached.
    it->second = Entry{prompt_digest, publisher, int(i), age};
    order_.emplace_back(age, chain[i]);
    (void)fresh;
  }
  while (entries_.size() > max_chunks_ && order_head_ < order_.size()) {
    const auto& [age, h] = order_[order_head_++];
    auto it = entries_.find(h);
    if (it != entries_.end() && it->second.age == age) entries_.erase(it);
  }
  if (order_head_ > order_.size() / 2 && order_head_ > 1024) {
    order_.erase(order_.begin(), order_.begin() + order_head_);
    order_head_ = 0;
  }
}

PublishedPrefixes::Hit PublishedPrefixes::Longest(absl::Span<const Hash128> chain) const {
  // Entry i of a track implies its groups [0, i] exist, so the deepest
  // matching chunk whose track also covers the chain's start is the answer.
  Hit best;
  for (size_t i = 0; i < chain.size(); ++i) {
    auto it = entries_.find(chain[i]);
    if (it == entries_.end() || it->second.group != int(i)) break;
    best.prompt_digest = it->second.digest;
    best.publisher = it->second.publisher;
    best.groups = int(i) + 1;
  }
  return best;
}

}  // namespace kvcast::scheduler
