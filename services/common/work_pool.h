// WorkPool: a fixed set of threads running posted closures in order, with a
// bounded queue, for work that must not run on I/O threads (e.g. the HTTP
// API's tokenization and chat-template rendering).
//
// Thread safety: Post may be called from any thread. The destructor runs
// what is queued, then joins.
#ifndef KVCAST_SERVICES_COMMON_WORK_POOL_H_
#define KVCAST_SERVICES_COMMON_WORK_POOL_H_

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace kvcast::services {

class WorkPool {
 public:
  WorkPool(int threads, size_t max_queued);
  ~WorkPool();
  WorkPool(const WorkPool&) = delete;
  WorkPool& operator=(const WorkPool&) = delete;

  // Queues `fn`; false (and `fn` dropped) when `max_queued` closures wait.
  bool Post(std::function<void()> fn);
  size_t queued() const;

 private:
  void Run();

  const size_t max_queued_;
  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace kvcast::services

#endif  // KVCAST_SERVICES_COMMON_WORK_POOL_H_
