// StallWatchdog: cancels worker calls that stop making progress, so that a
// frozen worker (SIGSTOP, a hung GPU, a partitioned host) costs a request a
// bounded wait and a retry elsewhere instead of its whole deadline.
//
//   auto watch = watchdog.Start(&call_context, absl::Seconds(30));
//   while (stream->Read(&msg)) { ...; watch->Extend(bound); }
//   if (watch->fired()) { ... the call was cancelled as stalled: retry ... }
//
// One thread checks every watch each `tick`; a watch whose bound passed
// without an Extend has ClientContext::TryCancel called once and reports
// fired(). Destroying the watch stops watching.
//
// Thread safety: Watch/Extend/fired/destruction from any thread.
#ifndef KVCAST_SERVICES_SCHEDULER_STALL_WATCHDOG_H_
#define KVCAST_SERVICES_SCHEDULER_STALL_WATCHDOG_H_

#include <atomic>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/client_context.h"

namespace kvcast::scheduler {

class StallWatchdog {
 public:
  explicit StallWatchdog(absl::Duration tick = absl::Milliseconds(20));
  ~StallWatchdog();
  StallWatchdog(const StallWatchdog&) = delete;
  StallWatchdog& operator=(const StallWatchdog&) = delete;

  class Watch {
   public:
    ~Watch();
    // Progress: the call now has `bound` from now before it counts as stalled.
    void Extend(absl::Duration bound);
    // The call was cancelled because its bound passed.
    bool fired() const { return fired_.load(); }

   private:
    friend class StallWatchdog;
    Watch(StallWatchdog* dog, grpc::ClientContext* ctx) : dog_(dog), ctx_(ctx) {}
    StallWatchdog* const dog_;
    grpc::ClientContext* const ctx_;
    absl::Time deadline_ ABSL_GUARDED_BY(dog_->mu_);
    std::atomic<bool> fired_{false};
  };

  // Watches `ctx` (borrowed; it must outlive the watch) with `bound`.
  std::unique_ptr<Watch> Start(grpc::ClientContext* ctx, absl::Duration bound);

 private:
  void Run();

  const absl::Duration tick_;
  absl::Mutex mu_;
  absl::flat_hash_set<Watch*> watches_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace kvcast::scheduler

#endif  // KVCAST_SERVICES_SCHEDULER_STALL_WATCHDOG_H_
