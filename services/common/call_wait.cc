#include "services/common/call_wait.h"

#include <thread>

#include "absl/container/flat_hash_set.h"

namespace kvcast::services {
namespace {

// Asks the registered waits whether their calls were cancelled, every tick,
// while any is registered. Never destroyed (process lifetime).
class Watcher {
 public:
  static Watcher& Get() {
    static Watcher* w = new Watcher();
    return *w;
  }
  void Add(CallWait* w) {
    absl::MutexLock lock(&mu_);
    waits_.insert(w);
  }
  // After it returns, the watcher no longer touches `w`.
  void Remove(CallWait* w) {
    absl::MutexLock lock(&mu_);
    waits_.erase(w);
  }

 private:
  static constexpr absl::Duration kTick = absl::Milliseconds(20);
  Watcher() {
    std::thread([this] { Run(); }).detach();
  }
  void Run() {
    absl::MutexLock lock(&mu_);
    for (;;) {
      auto busy = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !waits_.empty(); };
      mu_.Await(absl::Condition(&busy));
      // Checks run under mu_, so Remove waits for a check in progress.
      for (CallWait* w : waits_) w->CheckCancelled();
      mu_.Unlock();
      absl::SleepFor(kTick);
      mu_.Lock();
    }
  }

  absl::Mutex mu_;
  absl::flat_hash_set<CallWait*> waits_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

CallWait::CallWait(std::function<bool()> cancelled) : cancelled_fn_(std::move(cancelled)) {}

CallWait::~CallWait() = default;

void CallWait::Notify() {
  absl::MutexLock lock(&mu_);
  notified_ = true;
}

void CallWait::CheckCancelled() {
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_) return;
  }
  if (!cancelled_fn_()) return;
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
}

CallWait::Woke CallWait::Wait(absl::Time deadline) {
  // Watched only while a thread waits here: `cancelled()` is then never
  // asked after its call ended, even if another thread keeps this object
  // (a callback's state) alive longer.
  const bool watched = bool(cancelled_fn_);
  if (watched) Watcher::Get().Add(this);
  Woke woke = kTimeout;
  {
    absl::MutexLock lock(&mu_);
    auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return notified_ || (cancelled_ && !cancel_reported_);
    };
    mu_.AwaitWithDeadline(absl::Condition(&woken), deadline);
    if (notified_) {
      notified_ = false;
      woke = kNotified;
    } else if (cancelled_ && !cancel_reported_) {
      cancel_reported_ = true;
      woke = kCancelled;
    }
  }
  if (watched) Watcher::Get().Remove(this);  // waits for a check in progress
  return woke;
}

bool CallWait::cancelled() {
  absl::MutexLock lock(&mu_);
  return cancelled_;
}

}  // namespace kvcast::services
