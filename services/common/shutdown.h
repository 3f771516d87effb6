// Graceful-shutdown trigger for a service binary: SIGINT, SIGTERM or an
// explicit Trigger() wakes everything blocked in Wait()/WaitFor().
//
//   ASSIGN_OR_RETURN(auto stop, ShutdownSignal::Create());
//   ... start servers ...
//   stop->Wait();                 // Ctrl-C, `kill`, or stop->Trigger()
//   grpc_server->Shutdown(absl::Seconds(10));
//
// The handlers write one byte to a self-pipe (async-signal-safe), so the
// signal may land on any thread: libraries such as OpenBLAS start threads
// before main(), which rules out a blocked signal mask + signalfd. The pipe
// is never drained, so once triggered every present and future waiter
// returns at once. The handlers are installed with SA_RESETHAND: a second
// SIGINT/SIGTERM gets the default action and ends a process whose graceful
// shutdown hangs.
//
// One instance per process: Create() fails with FAILED_PRECONDITION while
// another exists. Destruction restores the previous handlers; do not destroy
// it while another thread is in Wait().
//
// Thread safety: Wait, WaitFor, Trigger, triggered and signal_number may be
// called concurrently from any threads.
#ifndef KVCAST_SERVICES_COMMON_SHUTDOWN_H_
#define KVCAST_SERVICES_COMMON_SHUTDOWN_H_

#include <signal.h>

#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace kvcast::services {

class ShutdownSignal {
 public:
  // Installs the SIGINT/SIGTERM handlers. FAILED_PRECONDITION if another
  // ShutdownSignal exists; the errno's status if pipe/sigaction fail.
  static absl::StatusOr<std::unique_ptr<ShutdownSignal>> Create();
  ~ShutdownSignal();
  ShutdownSignal(const ShutdownSignal&) = delete;
  ShutdownSignal& operator=(const ShutdownSignal&) = delete;

  // Blocks until triggered.
  void Wait();
  // Blocks until triggered (true) or `timeout` passed (false).
  bool WaitFor(absl::Duration timeout);
  // Triggers as if a signal arrived (signal_number() stays 0).
  void Trigger();
  bool triggered() const;
  // The first signal received (SIGINT or SIGTERM), 0 if none.
  int signal_number() const;

 private:
  ShutdownSignal(int read_fd, int write_fd, struct sigaction old_int,
                 struct sigaction old_term);
  const int read_fd_, write_fd_;
  const struct sigaction old_int_, old_term_;
};

}  // namespace kvcast::services

#endif  // KVCAST_SERVICES_COMMON_SHUTDOWN_H_
