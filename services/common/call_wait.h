// CallWait: how a request's handler thread waits for work another thread
// does for it (the compute thread's events, a KV landing) while its call
// may be cancelled: it sleeps until that work signals, the call is
// cancelled, or a deadline it chose (its next keepalive), whichever comes
// first; it does not wake every few milliseconds to ask.
//
//   CallWait wait([ctx] { return ctx->IsCancelled(); });
//   ... hand work to another thread that calls wait.Notify() as it moves ...
//   while (!finished) {
//     if (wait.Wait(absl::Now() + kKeepalive) == CallWait::kCancelled) ...;
//     ... read what the other thread left, write progress or a keepalive ...
//   }
//
// gRPC's synchronous API has no cancellation callback, so one watcher
// thread per process asks every waiting call's `cancelled()` every 20 ms
// and wakes only those cancelled: many waiting calls cost one thread's
// polling, and none while nothing waits. A cancellation that comes while
// nobody waits is seen at the next Wait (within a tick).
//
// Thread safety: Notify from any thread; Wait from one thread at a time.
#ifndef KVCAST_SERVICES_COMMON_CALL_WAIT_H_
#define KVCAST_SERVICES_COMMON_CALL_WAIT_H_

#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace kvcast::services {

class CallWait {
 public:
  // `cancelled` is asked from the watcher thread, only while a thread is
  // inside Wait (so a call's context it reads is alive then, although this
  // object may outlive the call); it must be safe to call from there
  // (ServerContext::IsCancelled is). Null: no call to watch (work only).
  explicit CallWait(std::function<bool()> cancelled);
  ~CallWait();
  CallWait(const CallWait&) = delete;
  CallWait& operator=(const CallWait&) = delete;

  // Wakes the waiter: now, or at once at its next Wait.
  void Notify();

  enum Woke { kNotified, kCancelled, kTimeout };
  // Blocks until Notify was called since the last Wait returned kNotified,
  // the call is cancelled (reported by one Wait; later ones wait for
  // notifications only, so a caller waiting for its work to wind down does
  // not spin), or `deadline`. A notification and a cancellation together:
  // kNotified first.
  Woke Wait(absl::Time deadline);
  // Whether the call was seen cancelled.
  bool cancelled();

  // Called by the watcher (internal).
  void CheckCancelled();

 private:
  const std::function<bool()> cancelled_fn_;
  absl::Mutex mu_;
  bool notified_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool cancel_reported_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace kvcast::services

#endif  // KVCAST_SERVICES_COMMON_CALL_WAIT_H_
