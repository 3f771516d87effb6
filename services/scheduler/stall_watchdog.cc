// StallWatchdog: see stall_watchdog.h.
#include "services/scheduler/stall_watchdog.h"

namespace kvcast::scheduler {

StallWatchdog::StallWatchdog(absl::Duration tick) : tick_(tick), thread_([this] { Run(); }) {}

StallWatchdog::~StallWatchdog() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

std::unique_ptr<StallWatchdog::Watch> StallWatchdog::Start(grpc::ClientContext* ctx,
                                                           absl::Duration bound) {
  std::unique_ptr<Watch> w(new Watch(this, ctx));
  absl::MutexLock lock(&mu_);
  w->deadline_ = absl::Now() + bound;
  watches_.insert(w.get());
  return w;
}

StallWatchdog::Watch::~Watch() {
  absl::MutexLock lock(&dog_->mu_);
  dog_->watches_.erase(this);
}

void StallWatchdog::Watch::Extend(absl::Duration bound) {
  absl::MutexLock lock(&dog_->mu_);
  deadline_ = absl::Now() + bound;
}

void StallWatchdog::Run() {
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    mu_.AwaitWithTimeout(absl::Condition(&stop_), tick_);
    const absl::Time now = absl::Now();
    for (Watch* w : watches_) {
      if (w->deadline_ <= now && !w->fired_.exchange(true)) w->ctx_->TryCancel();
    }
  }
}

}  // namespace kvcast::scheduler
