// KvPages: references to pages of a KvPagePool, owned. The handle releases
// them when it is destroyed or reset, so no caller releases pages by hand
// and none can leak or drop a release's result; a double release (a page
// already free) is a bookkeeping bug and aborts with its message.
//
// Move-only. Share() takes more references to the same pages (a chunk the
// prefix cache and a sequence both hold; a published chunk kept for a
// relay); Append() moves another handle's pages onto the end (a sequence
// growing). Where pages go from one owner to the next (the pool to a
// lander, a lander to the engine, the engine's sequence to the prefix
// cache), the handle moves with them.
//
// Thread safety: a handle is thread-compatible; the pool is thread-safe.
#ifndef KVCAST_ENGINE_KV_KV_PAGES_H_
#define KVCAST_ENGINE_KV_KV_PAGES_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace kvcast {

class KvPagePool;

class KvPages {
 public:
  KvPages() = default;  // no pages
  // Takes over one reference to each of `ids` in `pool` (which must
  // outlive the handle).
  static KvPages Adopt(KvPagePool* pool, std::vector<int32_t> ids);
  KvPages(KvPages&& other) noexcept;
  KvPages& operator=(KvPages&& other) noexcept;
  KvPages(const KvPages&) = delete;
  KvPages& operator=(const KvPages&) = delete;
  ~KvPages() { Reset(); }

  // Another handle on pages [first, first + count) (count < 0: to the end),
  // one more reference each. FailedPrecondition if a page is free.
  absl::StatusOr<KvPages> Share(int first = 0, int count = -1) const;
  // Moves `other`'s pages onto the end; both of one pool (or either empty).
  void Append(KvPages&& other);
  // Releases every reference now; the handle is empty after.
  void Reset();

  absl::Span<const int32_t> ids() const { return ids_; }
  int32_t operator[](int i) const { return ids_[size_t(i)]; }
  int size() const { return int(ids_.size()); }
  bool empty() const { return ids_.empty(); }
  KvPagePool* pool() const { return pool_; }

 private:
  KvPages(KvPagePool* pool, std::vector<int32_t> ids) : pool_(pool), ids_(std::move(ids)) {}
  KvPagePool* pool_ = nullptr;
  std::vector<int32_t> ids_;
};

}  // namespace kvcast

#endif  // KVCAST_ENGINE_KV_KV_PAGES_H_
