#include "engine/kv/kv_page_pool.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"

namespace kvcast {

absl::StatusOr<std::unique_ptr<KvPagePool>> KvPagePool::Create(
    Backend* backend, const KvLayout& layout, int num_pages) {
  if (num_pages <= 0 || layout.num_layers <= 0 || layout.page_tokens <= 0 ||
      layout.num_kv_heads <= 0 || layout.head_dim <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kv page pool: invalid layout or page count (num_pages=", num_pages,
        ", page_tokens=", layout.page_tokens, ")"));
  }
  size_t bytes = layout.page_bytes() * num_pages * 2 * layout.num_layers;
  auto buf = backend->Allocate(bytes);
  if (!buf.ok()) return buf.status();
  return std::unique_ptr<KvPagePool>(new KvPagePool(layout, num_pages, std::move(*buf)));
}

KvPagePool::KvPagePool(const KvLayout& layout, int num_pages,
                       std::unique_ptr<DeviceBuffer> buf)
    : layout_(layout),
      num_pages_(num_pages),
      storage_(std::move(buf)),
      base_(static_cast<uint8_t*>(storage_->data())),
      refcount_(num_pages, 0) {
  free_list_.reserve(num_pages);
  // Highest id at the back so pages are handed out in increasing order.
  for (int p = num_pages - 1; p >= 0; --p) free_list_.push_back(p);
}

float* KvPagePool::Floats(void* pages) const {
  if (layout_.storage == KvStorage::kF16) {
    std::fprintf(stderr, "KvPagePool: k_cache/v_cache on a pool of fp16 pages\n");
    std::abort();
  }
  return static_cast<float*>(pages);
}

void KvPagePool::SetReclaimer(PageReclaimer* reclaimer) {
  absl::MutexLock lock(&mu_);
  reclaimer_ = reclaimer;
}

absl::StatusOr<std::vector<int32_t>> KvPagePool::Allocate(int n) {
  PageReclaimer* reclaimer;
  {
    absl::MutexLock lock(&mu_);
    reclaimer = reclaimer_;
    if (int(free_list_.size()) < n && reclaimer != nullptr) {
      int short_by = n - int(free_list_.size());
      mu_.Unlock();
      reclaimer->Reclaim(short_by);
      mu_.Lock();
    }
    if (int(free_list_.size()) >= n) {
      std::vector<int32_t> pages(free_list_.end() - n, free_list_.end());
      free_list_.resize(free_list_.size() - n);
      for (int32_t p : pages) refcount_[p] = 1;
      return pages;
    }
    return absl::ResourceExhaustedError(absl::StrCat(
        "kv page pool: need ", n, " pages, ", free_list_.size(), " of ",
        num_pages_, " free"));
  }
}

absl::Status KvPagePool::AddRef(int32_t page) {
  absl::MutexLock lock(&mu_);
  if (page < 0 || page >= num_pages_) {
    return absl::OutOfRangeError(absl::StrCat("kv page pool: no page ", page));
  }
  if (refcount_[page] == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("kv page pool: AddRef of free page ", page));
  }
  ++refcount_[page];
  return absl::OkStatus();
}

absl::Status KvPagePool::Release(int32_t page) {
  absl::MutexLock lock(&mu_);
  if (page < 0 || page >= num_pages_) {
    return absl::OutOfRangeError(absl::StrCat("kv page pool: no page ", page));
  }
  if (refcount_[page] == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("kv page pool: page ", page, " released twice"));
  }
  if (--refcount_[page] == 0) free_list_.push_back(page);
  return absl::OkStatus();
}

absl::Status KvPagePool::ReleaseAll(const std::vector<int32_t>& pages) {
  absl::Status first;
  for (int32_t p : pages) first.Update(Release(p));
  return first;
}

int KvPagePool::RefCount(int32_t page) const {
  absl::MutexLock lock(&mu_);
  return (page >= 0 && page < num_pages_) ? refcount_[page] : 0;
}

int KvPagePool::free_pages() const {
  absl::MutexLock lock(&mu_);
  return int(free_list_.size());
}

}  // namespace kvcast
