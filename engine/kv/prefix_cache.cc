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

void PrefixCache::Share(Entry& e, std::vector<int32_t>* pages) {
  lru_.splice(lru_.begin(), lru_, e.lru);
  for (int32_t p : e.pages) {
    // The cache's own reference keeps the page allocated, so AddRef holds.
    pool_->AddRef(p).IgnoreError();
    pages->push_back(p);
  }
}

std::vector<int32_t> PrefixCache::Acquire(absl::Span<const Hash128> chain,
                                          int max_chunks) {
  std::vector<int32_t> pages;
  const int pages_per_chunk = chunk_tokens_ / pool_->layout().page_tokens;
  for (int i = 0; i < int(chain.size()) && i < max_chunks; ++i) {
    {
      absl::MutexLock lock(&mu_);
      if (auto it = entries_.find(chain[i]); it != entries_.end()) {
        Share(it->second, &pages);
        continue;
      }
    }
    // Not in the pool: promote it from the host tier, unlocked (allocating
    // may reclaim, which locks).
    if (tier_ == nullptr || !tier_->Contains(chain[i])) break;
    absl::StatusOr<std::vector<int32_t>> fresh = pool_->Allocate(pages_per_chunk);
    if (!fresh.ok()) break;
    if (!tier_->Promote(chain[i], *fresh).ok()) {  // corrupt: the tier dropped it
      pool_->ReleaseAll(*fresh).IgnoreError();
      absl::MutexLock lock(&mu_);
      if (!entries_.contains(chain[i])) Left(chain[i]);
      break;
    }
    absl::MutexLock lock(&mu_);
    if (auto it = entries_.find(chain[i]); it != entries_.end()) {
      pool_->ReleaseAll(*fresh).IgnoreError();  // another thread promoted it meanwhile
      Share(it->second, &pages);
      continue;
    }
    // The cache keeps Allocate's reference; the caller gets one more.
    lru_.push_front(chain[i]);
    Share(entries_.emplace(chain[i], Entry{*fresh, lru_.begin()}).first->second, &pages);
    if (observer_) observer_(Event::kStored, chain[i]);
  }
  return pages;
}

void PrefixCache::Pin(absl::Span<const Hash128> chunks) {
  absl::MutexLock lock(&mu_);
  pinned_.insert(chunks.begin(), chunks.end());
}

int PrefixCache::num_pinned() const {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const Hash128& h : pinned_) n += entries_.contains(h);
  return n;
}

void PrefixCache::Prefetch(absl::Span<const Hash128> chain, int max_chunks) {
  if (tier_ == nullptr) return;
  pool_->ReleaseAll(Acquire(chain, max_chunks)).IgnoreError();
}

int PrefixCache::Held(absl::Span<const Hash128> chain, int max_chunks) const {
  int n = 0;
  for (; n < int(chain.size()) && n < max_chunks; ++n) {
    {
      absl::MutexLock lock(&mu_);
      if (entries_.contains(chain[n])) continue;
    }
    if (tier_ == nullptr || !tier_->Contains(chain[n])) break;
  }
  return n;
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
    if (pinned_.contains(*it)) continue;
    auto e = entries_.find(*it);
    bool unshared = true;
    for (int32_t p : e->second.pages) unshared &= pool_->RefCount(p) == 1;
    if (!unshared) continue;
    std::vector<Hash128> dropped, spilled;
    if (tier_ != nullptr) tier_->Demote(*it, e->second.pages, &dropped, &spilled);
    pool_->ReleaseAll(e->second.pages).IgnoreError();
    freed += int(e->second.pages.size());
    const Hash128 hash = *it;
    entries_.erase(e);
    it = lru_.erase(it);
    Left(hash);
    for (const Hash128& h : spilled) {
      if (!entries_.contains(h) && observer_) observer_(Event::kOnDisk, h);
    }
    for (const Hash128& h : dropped) {
      if (!entries_.contains(h)) Left(h);
    }
  }
  return freed;
}

void PrefixCache::Left(const Hash128& hash) {
  if (!observer_) return;
  switch (tier_ == nullptr ? HostKvTier::Where::kNone : tier_->Locate(hash)) {
    case HostKvTier::Where::kHost:
      return observer_(Event::kInHost, hash);
    case HostKvTier::Where::kDisk:
      return observer_(Event::kOnDisk, hash);
    case HostKvTier::Where::kNone:
      return observer_(Event::kEvicted, hash);
  }
}

int PrefixCache::num_chunks() const {
  absl::MutexLock lock(&mu_);
  return int(entries_.size());
}

}  // namespace kvcast
