// KvPagePool: the paged KV memory of one model replica.
//
// All K and V of all layers live in one backend allocation laid out
// [layer][K|V][page][page_tokens][num_kv_heads][head_dim], values kept as
// layout.storage says (float32, or fp16 bits); a page id names
// the same page in every layer. Pages are reference counted: Allocate() hands
// out pages with one reference in a KvPages handle (kv_pages.h), whose
// Share() takes more (prefix cache, several sequences) and whose destruction
// drops them, returning a page to the free list when its last goes. When free pages run short, Allocate() asks the registered
// PageReclaimer (the prefix cache) to give unreferenced pages back.
//
// Thread safety: all methods may be called from any thread. The reclaimer is
// called without the pool's lock held.
#ifndef KVCAST_ENGINE_KV_KV_PAGE_POOL_H_
#define KVCAST_ENGINE_KV_KV_PAGE_POOL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/kv/kv_pages.h"
#include "kernels/backend.h"

namespace kvcast {

struct KvLayout {
  int num_layers = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int page_tokens = 16;
  // How values are kept (KvStorage): with fp16 values (kF32Fp16Values, or
  // kF16: 2 bytes a value, where the backend supports it) the pages hold
  // exactly what the fp16 track and host tier carry, so KV that crossed
  // them equals KV computed in place.
  KvStorage storage = KvStorage::kF32;

  size_t token_floats() const { return size_t(num_kv_heads) * head_dim; }
  size_t page_floats() const { return token_floats() * page_tokens; }
  size_t page_bytes() const { return page_floats() * KvValueBytes(storage); }
};

// Gives pages back to the pool on request; implemented by the prefix cache.
class PageReclaimer {
 public:
  virtual ~PageReclaimer() = default;
  // Releases cached pages until at least `wanted` pages were freed or nothing
  // more can be; returns how many were freed.
  virtual int Reclaim(int wanted) = 0;
};

class KvPagePool {
 public:
  // Allocates num_pages pages from `backend` (borrowed; must outlive the pool).
  static absl::StatusOr<std::unique_ptr<KvPagePool>> Create(
      Backend* backend, const KvLayout& layout, int num_pages);

  // `reclaimer` is borrowed and must outlive the pool (or be reset to null).
  void SetReclaimer(PageReclaimer* reclaimer);

  // n fresh pages, each with one reference, owned by the handle.
  // ResourceExhausted when fewer than n pages are free even after
  // reclaiming; then nothing is allocated.
  absl::StatusOr<KvPages> Allocate(int n);
  // As Allocate, but while fewer than n pages are free it waits, until
  // `deadline`, for references to come back (sequences ending); then
  // Allocate's ResourceExhausted. More pages than the pool has fail at once.
  absl::StatusOr<KvPages> AllocateBy(int n, absl::Time deadline);

  int RefCount(int32_t page) const;
  int num_pages() const { return num_pages_; }
  int free_pages() const;
  const KvLayout& layout() const { return layout_; }

  // Layer caches, laid out [num_pages][page_tokens][num_kv_heads][head_dim],
  // values as layout().storage keeps them.
  void* k_pages(int layer) const { return base_ + size_t(2 * layer) * layer_bytes(); }
  void* v_pages(int layer) const { return base_ + size_t(2 * layer + 1) * layer_bytes(); }
  // The same as floats, for a pool that keeps float32 (aborts on kF16).
  float* k_cache(int layer) const { return Floats(k_pages(layer)); }
  float* v_cache(int layer) const { return Floats(v_pages(layer)); }
  // Values of one layer's K (or V) array, and their bytes.
  size_t layer_values() const { return layout_.page_floats() * num_pages_; }
  size_t layer_bytes() const { return layout_.page_bytes() * num_pages_; }

 private:
  // References are taken and dropped only by KvPages.
  friend class KvPages;
  // Adds a reference to an allocated page. FailedPrecondition if it is free.
  absl::Status AddRef(int32_t page);
  // Drops one reference; the page is free again after its last. Releasing a
  // free page or an id out of range is FailedPrecondition / OutOfRange.
  absl::Status Release(int32_t page);
  // Releases each page of `pages` once, reporting the first error.
  absl::Status ReleaseAll(absl::Span<const int32_t> pages);

  KvPagePool(const KvLayout& layout, int num_pages, std::unique_ptr<DeviceBuffer> buf);
  float* Floats(void* pages) const;

  const KvLayout layout_;
  const int num_pages_;
  const std::unique_ptr<DeviceBuffer> storage_;
  uint8_t* const base_;
  mutable absl::Mutex mu_;
  std::vector<int32_t> free_list_ ABSL_GUARDED_BY(mu_);
  std::vector<int32_t> refcount_ ABSL_GUARDED_BY(mu_);
  PageReclaimer* reclaimer_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace kvcast

#endif  // KVCAST_ENGINE_KV_KV_PAGE_POOL_H_
