// EventLoop: one thread, one epoll set, a timer wheel-less timer list and a
// cross-thread task queue. Every QUIC connection, MoQT session and relay is
// owned by exactly one loop and touched only on its thread.
//
// Thread safety: Post() and Stop() may be called from any thread; everything
// else only on the loop thread (inside Run(), i.e. from a callback or a
// posted task).
#ifndef KVCAST_TRANSPORT_QUIC_EVENT_LOOP_H_
#define KVCAST_TRANSPORT_QUIC_EVENT_LOOP_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace kvcast::quic {

class EventLoop {
 public:
  using TimerId = uint64_t;

  static absl::StatusOr<std::unique_ptr<EventLoop>> Create();
  virtual ~EventLoop() = default;

  // Runs until Stop(). Must be called from one thread only.
  virtual void Run() = 0;
  // Thread-safe; Run() returns after the task being executed.
  virtual void Stop() = 0;
  // Thread-safe: runs `task` on the loop thread, in posting order.
  virtual void Post(std::function<void()> task) = 0;
  // Loop thread: runs `fn` once after `delay`. Cancel before it fires to drop it.
  virtual TimerId RunAfter(absl::Duration delay, std::function<void()> fn) = 0;
  virtual void Cancel(TimerId id) = 0;
  // Loop thread: calls `on_readable` whenever `fd` is readable (level
  // triggered) until RemoveFd. The loop does not own `fd`.
  virtual absl::Status AddFd(int fd, std::function<void()> on_readable) = 0;
  virtual void RemoveFd(int fd) = 0;
  // Loop thread: calls `on_writable` once, the next time `fd` (registered
  // with AddFd) is writable; a later call replaces a pending one. Lets a
  // sender that hit EAGAIN resume without polling. (Added with the ngtcp2
  // endpoint; RemoveFd drops a pending callback.)
  virtual absl::Status WatchWritableOnce(int fd,
                                         std::function<void()> on_writable) = 0;
  // True when called on the thread inside Run().
  virtual bool InLoopThread() const = 0;
};

// Runs a loop on its own thread; joins it on destruction (after Stop()).
class LoopThread {
 public:
  // `name` (up to 15 characters kept) names the thread, as `top -H` and
  // /proc/<pid>/task/<tid>/comm show it.
  static absl::StatusOr<std::unique_ptr<LoopThread>> Start(const std::string& name = "kvcast-loop");
  ~LoopThread();
  EventLoop* loop() const { return loop_.get(); }
  // Posts `fn` and blocks until it has run on the loop thread.
  void RunSync(std::function<void()> fn);

 private:
  LoopThread() = default;
  std::unique_ptr<EventLoop> loop_;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvcast::quic

#endif  // KVCAST_TRANSPORT_QUIC_EVENT_LOOP_H_
