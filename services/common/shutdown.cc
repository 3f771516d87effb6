#include "services/common/shutdown.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "absl/status/status.h"

namespace kvcast::services {
namespace {

// Read by the signal handler: plain lock-free atomics only.
std::atomic<int> g_write_fd{-1};
std::atomic<int> g_signal{0};
std::atomic<bool> g_exists{false};
static_assert(std::atomic<int>::is_always_lock_free, "used in a signal handler");

void WakeByte(int fd) {
  char byte = 1;
  // Non-blocking: a full pipe is already readable, so EAGAIN is fine.
  while (write(fd, &byte, 1) < 0 && errno == EINTR) {
  }
}

void OnSignal(int sig) {
  int saved_errno = errno;
  int expected = 0;
  g_signal.compare_exchange_strong(expected, sig);
  int fd = g_write_fd.load();
  if (fd >= 0) WakeByte(fd);
  errno = saved_errno;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShutdownSignal>> ShutdownSignal::Create() {
  if (g_exists.exchange(true)) {
    return absl::FailedPreconditionError("a ShutdownSignal already exists in this process");
  }
  int fds[2];
  if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0) {
    g_exists = false;
    return absl::ErrnoToStatus(errno, "ShutdownSignal pipe");
  }
  g_signal = 0;
  g_write_fd = fds[1];
  struct sigaction sa = {}, old_int = {}, old_term = {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART | SA_RESETHAND;
  bool int_installed = sigaction(SIGINT, &sa, &old_int) == 0;
  if (!int_installed || sigaction(SIGTERM, &sa, &old_term) != 0) {
    absl::Status status = absl::ErrnoToStatus(errno, "ShutdownSignal sigaction");
    if (int_installed) sigaction(SIGINT, &old_int, nullptr);
    g_write_fd = -1;
    close(fds[0]);
    close(fds[1]);
    g_exists = false;
    return status;
  }
  return std::unique_ptr<ShutdownSignal>(new ShutdownSignal(fds[0], fds[1], old_int, old_term));
}

ShutdownSignal::ShutdownSignal(int read_fd, int write_fd, struct sigaction old_int,
                               struct sigaction old_term)
    : read_fd_(read_fd), write_fd_(write_fd), old_int_(old_int), old_term_(old_term) {}

ShutdownSignal::~ShutdownSignal() {
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGTERM, &old_term_, nullptr);
  g_write_fd = -1;
  close(read_fd_);
  close(write_fd_);
  g_exists = false;
}

bool ShutdownSignal::WaitFor(absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    pollfd p{read_fd_, POLLIN, 0};
    absl::Duration left = deadline - absl::Now();
    int ms = left <= absl::ZeroDuration() ? 0
             : left >= absl::Hours(24)    ? 24 * 3600 * 1000
                                          : static_cast<int>(absl::ToInt64Milliseconds(
                                                left + absl::Milliseconds(1) - absl::Nanoseconds(1)));
    int rc = poll(&p, 1, ms);
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return triggered();
    if (rc == 0 && left <= absl::ZeroDuration()) return false;
  }
}

void ShutdownSignal::Wait() { WaitFor(absl::InfiniteDuration()); }

void ShutdownSignal::Trigger() { WakeByte(write_fd_); }

bool ShutdownSignal::triggered() const {
  pollfd p{read_fd_, POLLIN, 0};
  return poll(&p, 1, 0) > 0;
}

int ShutdownSignal::signal_number() const { return g_signal.load(); }

}  // namespace kvcast::services
