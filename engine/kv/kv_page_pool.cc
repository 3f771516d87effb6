#include "engine/kv/kv_page_pool.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

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

absl::StatusOr<KvPages> KvPagePool::Allocate(int n) {
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
      return KvPages::Adopt(this, std::move(pages));
    }
    return absl::ResourceExhaustedError(absl::StrCat(
        "kv page pool: need ", n, " pages, ", free_list_.size(), " of ",
        num_pages_, " free"));
  }
}

absl::StatusOr<KvPages> KvPagePool::AllocateBy(int n, absl::Time deadline) {
  for (;;) {
    absl::StatusOr<KvPages> pages = Allocate(n);
    if (pages.ok() || n > num_pages_ || absl::Now() >= deadline) return pages;
    struct Want {
      const std::vector<int32_t>* free;
      int n;
    } want{&free_list_, n};
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithDeadline(
        absl::Condition(+[](Want* w) { return int(w->free->size()) >= w->n; }, &want), deadline);
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

absl::Status KvPagePool::ReleaseAll(absl::Span<const int32_t> pages) {
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


KvPages KvPages::Adopt(KvPagePool* pool, std::vector<int32_t> ids) {
  KvPagePool* owner = ids.empty() ? nullptr : pool;  // before `ids` is moved from
  return KvPages(owner, std::move(ids));
}

KvPages::KvPages(KvPages&& other) noexcept
    : pool_(std::exchange(other.pool_, nullptr)), ids_(std::move(other.ids_)) {
  other.ids_.clear();
}

KvPages& KvPages::operator=(KvPages&& other) noexcept {
  if (this != &other) {
    Reset();
    pool_ = std::exchange(other.pool_, nullptr);
    ids_ = std::move(other.ids_);
    other.ids_.clear();
  }
  return *this;
}

absl::StatusOr<KvPages> KvPages::Share(int first, int count) const {
  if (first < 0 || first > size()) {
    return absl::OutOfRangeError(absl::StrCat("kv pages: share from ", first, " of ", size()));
  }
  if (count < 0) count = size() - first;
  if (first + count > size()) {
    return absl::OutOfRangeError(
        absl::StrCat("kv pages: share ", count, " from ", first, " of ", size()));
  }
  std::vector<int32_t> ids(ids_.begin() + first, ids_.begin() + first + count);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (absl::Status st = pool_->AddRef(ids[i]); !st.ok()) {
      for (size_t j = 0; j < i; ++j) pool_->Release(ids[j]).IgnoreError();  // taken just now
      return st;
    }
  }
  return Adopt(pool_, std::move(ids));
}

void KvPages::Append(KvPages&& other) {
  if (other.empty()) return;
  if (empty()) {
    *this = std::move(other);
    return;
  }
  if (other.pool_ != pool_) {
    std::fprintf(stderr, "kv pages: Append of pages of another pool\n");
    std::abort();
  }
  ids_.insert(ids_.end(), other.ids_.begin(), other.ids_.end());
  other.ids_.clear();
  other.pool_ = nullptr;
}

void KvPages::Reset() {
  if (pool_ != nullptr && !ids_.empty()) {
    if (absl::Status st = pool_->ReleaseAll(ids_); !st.ok()) {
      std::fprintf(stderr, "kv pages: %s\n", st.ToString().c_str());
      std::abort();
    }
  }
  ids_.clear();
  pool_ = nullptr;
}

}  // namespace kvcast
