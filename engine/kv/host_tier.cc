// HostKvTier: see host_tier.h.
#include "engine/kv/host_tier.h"

#include "absl/strings/str_cat.h"
#include "xxhash.h"

namespace kvcast {

HostKvTier::HostKvTier(KvPagePool* pool, Backend* backend, int chunk_tokens, KvFormat format,
                       uint64_t budget_bytes, Policy policy)
    : pool_(pool),
      backend_(backend),
      chunk_tokens_(chunk_tokens),
      codec_(pool->layout(), format),
      budget_(budget_bytes),
      policy_(policy) {}

void HostKvTier::Touch(Entry& e) {
  lru_.splice(lru_.begin(), lru_, e.lru);
  ++e.uses;
}

Hash128 HostKvTier::Victim() const {
  if (policy_ == Policy::kLru) return lru_.back();
  // LFU: the fewest uses, the least recent among those (a scan: a tier
  // holds thousands of chunks, and this runs once per demotion).
  Hash128 victim = lru_.back();
  uint64_t fewest = entries_.at(victim).uses;
  for (auto it = lru_.rbegin(); it != lru_.rend(); ++it) {
    const uint64_t uses = entries_.at(*it).uses;
    if (uses < fewest) {
      fewest = uses;
      victim = *it;
    }
  }
  return victim;
}

std::vector<int32_t> HostKvTier::Slots(absl::Span<const int32_t> pages) const {
  return SlotsOf(pages, pool_->layout().page_tokens, 0, chunk_tokens_);
}

void HostKvTier::Demote(const Hash128& hash, absl::Span<const int32_t> pages,
                        std::vector<Hash128>* dropped, std::vector<Hash128>* spilled) {
  {
    absl::MutexLock lock(&mu_);
    if (auto it = entries_.find(hash); it != entries_.end()) {
      Touch(it->second);
      return;
    }
  }
  if (chunk_bytes() > budget_ && disk_ == nullptr) return;
  std::vector<uint8_t> bytes(chunk_bytes());
  if (absl::Status s = codec_.Encode(backend_, *pool_, Slots(pages), bytes.data()); !s.ok()) {
    // The chunk is not kept below the pool (it leaves as it would without
    // a tier): a failed copy loses a cache entry, no more.
    absl::MutexLock lock(&mu_);
    ++stats_.transfer_failures;
    return;
  }
  const uint64_t checksum = XXH3_64bits(bytes.data(), bytes.size());
  if (chunk_bytes() > budget_) {  // too big for host memory: straight to disk
    disk_->Put(hash, bytes, checksum, dropped);
    return;
  }
  absl::MutexLock lock(&mu_);
  if (entries_.contains(hash)) return;  // demoted meanwhile by another thread
  while (stats_.bytes + bytes.size() > budget_ && !lru_.empty()) {
    const Hash128 victim = Victim();
    if (disk_ != nullptr) {
      const Entry& e = entries_.at(victim);
      disk_->Put(victim, e.bytes, e.checksum, dropped);
    }
    Drop(victim);
    ++stats_.evictions;
    if (disk_ == nullptr || !disk_->Contains(victim)) {
      dropped->push_back(victim);
    } else if (spilled != nullptr) {
      spilled->push_back(victim);
    }
  }
  stats_.bytes += bytes.size();
  ++stats_.chunks;
  ++stats_.demotions;
  lru_.push_front(hash);
  entries_.emplace(hash, Entry{std::move(bytes), checksum, lru_.begin(), 1});
}

bool HostKvTier::Contains(const Hash128& hash) const { return Locate(hash) != Where::kNone; }

HostKvTier::Where HostKvTier::Locate(const Hash128& hash) const {
  {
    absl::MutexLock lock(&mu_);
    if (entries_.contains(hash)) return Where::kHost;
  }
  return disk_ != nullptr && disk_->Contains(hash) ? Where::kDisk : Where::kNone;
}

void HostKvTier::FlushToDisk() {
  if (disk_ == nullptr) return;
  absl::MutexLock lock(&mu_);
  std::vector<Hash128> dropped;
  for (auto it = lru_.rbegin(); it != lru_.rend(); ++it) {
    const Entry& e = entries_.at(*it);
    disk_->Put(*it, e.bytes, e.checksum, &dropped);
  }
}

absl::Status HostKvTier::Promote(const Hash128& hash, absl::Span<const int32_t> pages) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(hash);
  if (it == entries_.end()) {
    if (disk_ == nullptr) return absl::NotFoundError("chunk not in the host tier");
    absl::StatusOr<DiskKvTier::Chunk> bytes = disk_->Get(hash);
    if (!bytes.ok()) return bytes.status();
    return codec_.Decode(backend_, bytes->data(), Slots(pages), pool_);
  }
  const Entry& e = it->second;
  if (XXH3_64bits(e.bytes.data(), e.bytes.size()) != e.checksum) {
    Drop(hash);
    ++stats_.corrupt;
    return absl::DataLossError("host tier: a chunk's bytes no longer match their checksum");
  }
  if (absl::Status s = codec_.Decode(backend_, e.bytes.data(), Slots(pages), pool_); !s.ok()) {
    return s;  // the entry stays: the copy failed, not the bytes
  }
  Touch(it->second);
  ++stats_.hits;
  return absl::OkStatus();
}

HostKvTier::Stats HostKvTier::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void HostKvTier::CorruptForTest(const Hash128& hash) {
  absl::MutexLock lock(&mu_);
  if (auto it = entries_.find(hash); it != entries_.end()) it->second.bytes[0] ^= 0x40;
}

void HostKvTier::Drop(const Hash128& hash) {
  auto it = entries_.find(hash);
  if (it == entries_.end()) return;
  stats_.bytes -= it->second.bytes.size();
  --stats_.chunks;
  lru_.erase(it->second.lru);
  entries_.erase(it);
}

}  // namespace kvcast
