#include "engine/kv/prefix_cache.h"

#include <utility>

namespace kvcast {

PrefixCache::PrefixCache(KvPagePool* pool, int chunk_tokens)
    : pool_(pool), chunk_tokens_(chunk_tokens) {
  pool_->SetReclaimer(this);
}

PrefixCache::~PrefixCache() {
  pool_->SetReclaimer(nullptr);
  absl::MutexLock lock(&mu_);
  for (auto& [hash, entry] : entries_) pool_->ReleaseAll(entry.pages).IgnoreError();
}

void PrefixCache::SetObserver(Observer observer) {
  absl::MutexLock lock(&mu_);
  observer_ = std::move(observer);
}

std::vector<int32_t> PrefixCache::Acquire(absl::Span<const Hash128> chain,
                                          int max_chunks) {
  absl::MutexLock lock(&mu_);
  std::vector<int32_t> pages;
  for (int i = 0; i < int(chain.size()) && i < max_chunks; ++i) {
    auto it = entries_.find(chain[i]);
    if (it == entries_.end()) break;
    Entry& e = it->second;
    lru_.splice(lru_.begin(), lru_, e.lru);
    for (int32_t p : e.pages) {
      // The cache's own reference keeps the page allocated, so AddRef holds.
      pool_->AddRef(p).IgnoreError();
      pages.push_back(p);
    }
  }
  return pages;
}

void PrefixCache::Insert(const Hash128& hash, absl::Span<const int32_t> pages) {
  absl::MutexLock lock(&mu_);
  if (entries_.contains(hash)) return;
  for (int32_t p : pages) {
    if (!pool_->AddRef(p).ok()) return;  // caller passed a free page: store nothing
  }
  lru_.push_front(hash);
  entries_.emplace(hash, Entry{std::vector<int32_t>(pages.begin(), pages.end()), lru_.begin()});
  if (observer_) observer_(Event::kStored, hash);
}

int PrefixCache::Reclaim(int wanted) {
  absl::MutexLock lock(&mu_);
  int freed = 0;
  for (auto it = lru_.end(); it != lru_.begin() && freed < wanted;) {
    --it;
    auto e = entries_.find(*it);
    bool unshared = true;
    for (int32_t p : e->second.pages) unshared &= pool_->RefCount(p) == 1;
    if (!unshared) continue;
    pool_->ReleaseAll(e->second.pages).IgnoreError();
    freed += int(e->second.pages.size());
    if (observer_) observer_(Event::kEvicted, *it);
    entries_.erase(e);
    it = lru_.erase(it);
  }
  return freed;
}

int PrefixCache::num_chunks() const {
  absl::MutexLock lock(&mu_);
  return int(entries_.size());
}

}  // namespace kvcast
