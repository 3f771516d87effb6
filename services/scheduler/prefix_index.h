// PrefixIndex: the scheduler's global map of which worker holds which KV
// chunk, fed by the workers' KV events (stored / evicted chunk hashes) and
// replaced wholesale by a snapshot when a worker (re)registers.
//
// Chunk hashes form a chain (engine/kv/prefix_hash.h): a worker that holds
// chunk i of a prompt's chain can serve the prompt's first i + 1 chunks only
// if it also holds chunks 0..i-1, so matching walks the chain from its start
// and keeps, per worker, the length of its unbroken run.
//
// Thread safety: none; the scheduler guards it with its registry lock.
#ifndef KVCAST_SERVICES_SCHEDULER_PREFIX_INDEX_H_
#define KVCAST_SERVICES_SCHEDULER_PREFIX_INDEX_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/types/span.h"
#include "engine/kv/prefix_hash.h"

namespace kvcast::scheduler {

using WorkerSlot = uint32_t;  // the registry's dense id of a worker

// Where on its worker a chunk is: the page pool, or a tier below it that a
// reuse must first promote from (kv_events' KvTier).
enum class Tier : uint8_t { kPool = 0, kHost = 1, kDisk = 2 };

class PrefixIndex {
 public:
  // Held at `tier` from now on (a chunk already held just changes tier).
  void Stored(WorkerSlot w, absl::Span<const Hash128> chunks, Tier tier = Tier::kPool);
  void Evicted(WorkerSlot w, absl::Span<const Hash128> chunks);
  // The worker holds exactly `snapshot` from now on, at `tiers` (parallel;
  // missing entries: kPool).
  void Replace(WorkerSlot w, absl::Span<const Hash128> snapshot,
               absl::Span<const Tier> tiers = {});
  void RemoveWorker(WorkerSlot w);

  // Of chain[0, n), the chunks `w` holds below its pool.
  struct BelowPool {
    int host = 0;
    int disk = 0;
  };
  BelowPool Below(WorkerSlot w, absl::Span<const Hash128> chain, int n) const;

  // Per worker holding chunk 0 of `chain`: how many leading chunks it holds
  // (at most chain.size()). Workers holding none are absent.
  absl::flat_hash_map<WorkerSlot, int> Match(absl::Span<const Hash128> chain) const;

  size_t num_chunks() const { return holders_.size(); }
  size_t chunks_of(WorkerSlot w) const;

 private:
  absl::flat_hash_map<Hash128, absl::InlinedVector<WorkerSlot, 2>> holders_;
  absl::flat_hash_map<WorkerSlot, absl::flat_hash_map<Hash128, Tier>> by_worker_;
};

// Where prefixes published by earlier requests can be fetched over MoQT
// (relays cache them): chunk hash i of a prompt -> (its prompt digest, i).
// A later prompt sharing chunks [0, k) fetches groups [0, k) of the track
// named by chunk k-1's entry. Bounded: the oldest prompts are forgotten
// first. Entries may outlive the relay's copy; a failed fetch falls back to
// recomputation.
class PublishedPrefixes {
 public:
  explicit PublishedPrefixes(size_t max_chunks) : max_chunks_(max_chunks) {}
  // `publisher`: the MoQT address of the worker that published the track.
  void Add(const std::string& prompt_digest, const std::string& publisher,
           absl::Span<const Hash128> chain);
  struct Hit {
    std::string prompt_digest;
    std::string publisher;
    int groups = 0;
  };
  // The longest run [0, k) of `chain` one published track holds (k = 0: none).
  Hit Longest(absl::Span<const Hash128> chain) const;
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::string digest;
    std::string publisher;
    int group = 0;
    uint64_t age = 0;
  };
  const size_t max_chunks_;
  uint64_t clock_ = 0;
  absl::flat_hash_map<Hash128, Entry> entries_;
  std::vector<std::pair<uint64_t, Hash128>> order_;  // (age, hash), oldest first
  size_t order_head_ = 0;
};

}  // namespace kvcast::scheduler

#endif  // KVCAST_SERVICES_SCHEDULER_PREFIX_INDEX_H_
