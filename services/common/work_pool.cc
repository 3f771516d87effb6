#include "services/common/work_pool.h"

#include <algorithm>
#include <utility>

namespace kvcast::services {

WorkPool::WorkPool(int threads, size_t max_queued) : max_queued_(max_queued) {
  for (int i = 0; i < std::max(1, threads); ++i) threads_.emplace_back([this] { Run(); });
}

WorkPool::~WorkPool() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

bool WorkPool::Post(std::function<void()> fn) {
  absl::MutexLock lock(&mu_);
  if (queue_.size() >= max_queued_) return false;
  queue_.push_back(std::move(fn));
  return true;
}

size_t WorkPool::queued() const {
  absl::MutexLock lock(&mu_);
  return queue_.size();
}

void WorkPool::Run() {
  for (;;) {
    std::function<void()> fn;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !queue_.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // stopping, nothing left
      fn = std::move(queue_.front());
      queue_.pop_front();
    }
    fn();
  }
}

}  // namespace kvcast::services
