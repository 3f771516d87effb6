// HostKvTier: tier 1 of a worker's KV cache. Chunks the page pool's
// prefix cache evicts are copied here, into host memory in a compact track
// (a KvFormat through TokenCodec: fp16 by default, int8 for half the
// bytes), within a byte budget, least recently used (or least frequently
// used, ties by recency) first out; a later
// request for the prefix brings them back into pages instead of computing
// them again. Each entry keeps its chunk hash and a checksum (XXH3 of its
// bytes, checked on the way back: corrupted memory never lands as KV).
//
// With a disk tier below (disk_tier.h), a chunk the budget pushes out is
// written there instead of dropped, and Promote reads it back from there.
//
// Thread safety: all methods may be called from any thread. Demote and
// Promote use the backend's KV transfer ops (kernels/backend.h), on pages
// the compute ops are not using.
#ifndef KVCAST_ENGINE_KV_HOST_TIER_H_
#define KVCAST_ENGINE_KV_HOST_TIER_H_

#include <cstdint>
#include <list>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "engine/kv/disk_tier.h"
#include "engine/kv/kv_page_pool.h"
#include "engine/kv/prefix_hash.h"
#include "engine/kv/token_codec.h"
#include "kernels/backend.h"

namespace kvcast {

class HostKvTier {
 public:
  enum class Policy { kLru, kLfu };
  struct Stats {
    uint64_t bytes = 0;       // held now
    uint64_t chunks = 0;      // held now
    uint64_t hits = 0;        // Promote calls that found their chunk
    uint64_t demotions = 0;   // chunks copied in
    uint64_t evictions = 0;   // chunks dropped for the budget
    uint64_t corrupt = 0;     // chunks whose checksum failed (dropped)
    uint64_t transfer_failures = 0;  // chunks the backend could not copy out (not kept)
  };

  // `pool` and `backend` (the pool's) are borrowed and must outlive the
  // tier; chunks are `chunk_tokens` tokens (a multiple of the pool's
  // page_tokens), kept in `format` within `budget_bytes`.
  HostKvTier(KvPagePool* pool, Backend* backend, int chunk_tokens, KvFormat format,
             uint64_t budget_bytes, Policy policy = Policy::kLru);

  // Chunks pushed out go to `disk` (borrowed; null: dropped); set before use.
  void SetDiskTier(DiskKvTier* disk) { disk_ = disk; }
  // Writes every chunk held here to the disk tier (oldest first), e.g. at a
  // graceful shutdown, so that a restarted worker finds them.
  void FlushToDisk();

  // Copies the chunk whose KV `pages` hold (its first token at slot 0 of
  // pages[0]) into the tier; one already here is only marked recently used.
  // Chunks that leave every tier below the pool to stay within the budgets
  // are appended to `dropped`. A budget smaller than one chunk holds
  // nothing.
  // Chunks moved from host memory to the disk tier to make room go to
  // `spilled` (when given).
  void Demote(const Hash128& hash, absl::Span<const int32_t> pages,
              std::vector<Hash128>* dropped, std::vector<Hash128>* spilled = nullptr);
  // Whether this tier or the disk tier below holds the chunk.
  bool Contains(const Hash128& hash) const;
  // Where the chunk is: host memory (first), the disk tier, or neither.
  enum class Where { kNone, kHost, kDisk };
  Where Locate(const Hash128& hash) const;
  // Writes the chunk's KV into `pages` (the caller's, chunk_tokens tokens
  // from slot 0 of pages[0]), from host memory or else from disk. NotFound
  // if neither holds it; DataLoss if its bytes no longer match their
  // checksum (it is dropped). The chunk stays where it was.
  absl::Status Promote(const Hash128& hash, absl::Span<const int32_t> pages);

  size_t chunk_bytes() const { return codec_.token_bytes() * chunk_tokens_; }
  Stats stats() const;

  // For tests: flips one byte of the chunk's stored bytes.
  void CorruptForTest(const Hash128& hash);

 private:
  struct Entry {
    std::vector<uint8_t> bytes;
    uint64_t checksum = 0;
    std::list<Hash128>::iterator lru;  // position in lru_ (front = newest)
    uint64_t uses = 0;                 // demotions and promotions (LFU)
  };
  // The chunk the policy sends out next.
  Hash128 Victim() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Touch(Entry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<int32_t> Slots(absl::Span<const int32_t> pages) const;
  void Drop(const Hash128& hash) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  KvPagePool* const pool_;
  Backend* const backend_;
  const int chunk_tokens_;
  const TokenCodec codec_;
  const uint64_t budget_;
  const Policy policy_;
  DiskKvTier* disk_ = nullptr;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<Hash128, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::list<Hash128> lru_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvcast

#endif  // KVCAST_ENGINE_KV_HOST_TIER_H_
