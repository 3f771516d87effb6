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
  entries_.clear();  // their handles release the pages
}

void PrefixCache::SetObserver(Observer observer) {
  absl::MutexLock lock(&mu_);
  observer_ = std::move(observer);
}

bool PrefixCache::Share(Entry& e, KvPages* pages) {
  lru_.splice(lru_.begin(), lru_, e.lru);
  // The cache's own reference keeps the pages allocated, so this holds
  // unless the bookkeeping is broken.
  absl::StatusOr<KvPages> shared = e.pages.Share();
  if (!shared.ok()) return false;
  pages->Append(*std::move(shared));
  return true;
}

KvPages PrefixCache::Acquire(absl::Span<const Hash128> chain, int max_chunks) {
  KvPages pages;
  const int pages_per_chunk = chunk_tokens_ / pool_->layout().page_tokens;
  for (int i = 0; i < int(chain.size()) && i < max_chunks; ++i) {
    {
      absl::MutexLock lock(&mu_);
      if (auto it = entries_.find(chain[i]); it != entries_.end()) {
        if (!Share(it->second, &pages)) break;
        continue;
      }
    }
    // Not in the pool: promote it from the host tier, unlocked (allocating
    // may reclaim, which locks).
    if (tier_ == nullptr || !tier_->Contains(chain[i])) break;
    absl::StatusOr<KvPages> fresh = pool_->Allocate(pages_per_chunk);
    if (!fresh.ok()) break;
    if (!tier_->Promote(chain[i], fresh->ids()).ok()) {  // corrupt: the tier dropped it
      fresh->Reset();
      absl::MutexLock lock(&mu_);
      if (!entries_.contains(chain[i])) Left(chain[i]);
      break;
    }
    absl::MutexLock lock(&mu_);
    if (auto it = entries_.find(chain[i]); it != entries_.end()) {
      fresh->Reset();  // another thread promoted it meanwhile
      if (!Share(it->second, &pages)) break;
      continue;
    }
    // The cache keeps Allocate's reference; the caller gets one more.
    lru_.push_front(chain[i]);
    if (!Share(entries_.emplace(chain[i], Entry{*std::move(fresh), lru_.begin()}).first->second,
               &pages)) {
      break;
    }
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
  Acquire(chain, max_chunks);  // the references go with the handle
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

void PrefixCache::Insert(const Hash128& hash, KvPages pages) {
  absl::MutexLock lock(&mu_);
  if (entries_.contains(hash) || pages.empty()) return;  // `pages` released
  lru_.push_front(hash);
  entries_.emplace(hash, Entry{std::move(pages), lru_.begin()});
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
    for (int32_t p : e->second.pages.ids()) unshared &= pool_->RefCount(p) == 1;
    if (!unshared) continue;
    std::vector<Hash128> dropped, spilled;
    if (tier_ != nullptr) tier_->Demote(*it, e->second.pages.ids(), &dropped, &spilled);
    freed += e->second.pages.size();
    const Hash128 hash = *it;
    entries_.erase(e);  // releases its pages
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
