// PrefixCache: full chunks of KV that later sequences reuse.
//
// Maps a chunk hash (prefix_hash.h) to the pages holding that chunk's KV.
// The cache holds one reference on each page it stores; a sequence that
// reuses a chunk takes its own. Entries whose pages nobody else references
// are evicted least-recently-used first when the pool asks for pages.
// An observer hears where every chunk goes (the KV events that feed the
// scheduler's prefix index): kStored when it enters the pool.
//
// With a host tier (host_tier.h), an evicted chunk is first copied there
// and Acquire brings it back into fresh pages (a promotion, kStored again)
// when a chain reaches it; the observer hears kInHost / kOnDisk when it
// leaves the pool for host memory or the disk tier (also when the host tier
// pushes it down to disk), and kEvicted only when it leaves every tier.
//
// Thread safety: all methods may be called from any thread; the observer is
// called with the cache's lock held and must not call back into the cache.
#ifndef KVCAST_ENGINE_KV_PREFIX_CACHE_H_
#define KVCAST_ENGINE_KV_PREFIX_CACHE_H_

#include <cstdint>
#include <functional>
#include <list>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "engine/kv/host_tier.h"
#include "engine/kv/kv_page_pool.h"
#include "engine/kv/prefix_hash.h"

namespace kvcast {

class PrefixCache : public PageReclaimer {
 public:
  enum class Event { kStored, kInHost, kOnDisk, kEvicted };
  using Observer = std::function<void(Event, const Hash128&)>;

  // `pool` is borrowed and must outlive the cache; the cache registers itself
  // as the pool's reclaimer and unregisters on destruction, releasing every
  // page it holds.
  PrefixCache(KvPagePool* pool, int chunk_tokens);
  ~PrefixCache() override;

  void SetObserver(Observer observer);
  // Evicted chunks go to `tier` (borrowed; null: dropped); set before use.
  void SetHostTier(HostKvTier* tier) { tier_ = tier; }

  // Walks `chain` from its start and returns the pages of the longest run of
  // cached chunks (chunk_tokens / page_tokens pages each, in order), at most
  // `max_chunks` chunks, with one reference taken for the caller on every
  // page. Touches the matched entries for LRU. Chunks found only in the
  // host tier are promoted into pages allocated from the pool (which may
  // evict others) and cached again; the walk stops where neither has one,
  // or no pages are free.
  KvPages Acquire(absl::Span<const Hash128> chain, int max_chunks);

  // Promotes the leading chunks of `chain` (at most `max_chunks`) that wait
  // in the host or disk tier into the pool now, so that a later Acquire
  // finds them there (a request's prefix while it waits for admission).
  // Holds no references: they are ordinary cached chunks afterwards.
  void Prefetch(absl::Span<const Hash128> chain, int max_chunks);

  // Chunks never reclaimed from the pool (an operator's system prompts):
  // present ones stay, absent ones stay once inserted.
  void Pin(absl::Span<const Hash128> chunks);
  int num_pinned() const;  // pinned chunks in the pool now

  // How many leading chunks of `chain` (at most `max_chunks`) Acquire would
  // find in the pool or the host tier now; touches nothing.
  int Held(absl::Span<const Hash128> chain, int max_chunks) const;

  // Stores a finished chunk's pages (hand it a Share() of them). A chunk
  // already present is left as it is (`pages` is dropped).
  void Insert(const Hash128& hash, KvPages pages);

  int Reclaim(int wanted) override;

  int num_chunks() const;
  int chunk_tokens() const { return chunk_tokens_; }

 private:
  struct Entry {
    KvPages pages;  // the cache's own references
    std::list<Hash128>::iterator lru;  // position in lru_ (front = newest)
  };

  // Under mu_: appends a reference on each page of `e` to `pages`; false
  // if the pool refused (broken bookkeeping).
  bool Share(Entry& e, KvPages* pages) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A chunk left tier 0: reported unless the host tier still holds it.
  // A chunk left the pool: reports where it is now.
  void Left(const Hash128& hash) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  KvPagePool* const pool_;
  const int chunk_tokens_;
  HostKvTier* tier_ = nullptr;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<Hash128, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::list<Hash128> lru_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<Hash128> pinned_ ABSL_GUARDED_BY(mu_);
  Observer observer_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvcast

#endif  // KVCAST_ENGINE_KV_PREFIX_CACHE_H_
