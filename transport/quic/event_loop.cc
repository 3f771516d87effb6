// EventLoop on Linux: one epoll set; an eventfd wakes the loop for Post() and
// Stop(); the wait for events ends when the earliest timer is due, with
// epoll_pwait2's nanosecond timeout (or, on kernels before 5.11, a timerfd
// armed with the absolute CLOCK_MONOTONIC deadline), so pacing delays of a
// few microseconds are honoured without spinning.
#include "transport/quic/event_loop.h"

#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

namespace kvcast::quic {
namespace {

int64_t MonotonicNanos() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

absl::Status ErrnoStatus(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

class EpollEventLoop : public EventLoop {
 public:
  EpollEventLoop(int epoll_fd, int wake_fd, int timer_fd)
      : epoll_fd_(epoll_fd), wake_fd_(wake_fd), timer_fd_(timer_fd) {}

  ~EpollEventLoop() override {
    close(timer_fd_);
    close(wake_fd_);
    close(epoll_fd_);
  }

  void Run() override {
    loop_thread_.store(std::this_thread::get_id());
    epoll_event events[64];
    while (!stop_.load()) {
      RunPostedTasks();
      if (stop_.load()) break;
      RunDueTimers();
      if (stop_.load()) break;
      int n = Wait(events, 64);
      if (n < 0) {
        if (errno == EINTR) continue;
        break;  // Only EBADF/EINVAL: the loop itself is broken.
      }
      for (int i = 0; i < n && !stop_.load(); ++i) {
        Dispatch(events[i]);
      }
    }
    loop_thread_.store(std::thread::id());
  }

  void Stop() override {
    stop_.store(true);
    Wake();
  }

  void Post(std::function<void()> task) override {
    bool wake = false;
    {
      absl::MutexLock lock(&mu_);
      tasks_.push_back(std::move(task));
      // The loop drains the queue before it blocks, so a task posted from
      // the loop thread needs no wake-up.
      if (!wake_pending_ && !InLoopThread()) {
        wake_pending_ = true;
        wake = true;
      }
    }
    if (wake) Wake();
  }

  TimerId RunAfter(absl::Duration delay, std::function<void()> fn) override {
    if (delay < absl::ZeroDuration()) delay = absl::ZeroDuration();
    int64_t deadline = MonotonicNanos() + absl::ToInt64Nanoseconds(delay);
    TimerId id = ++last_timer_id_;
    timers_.emplace(std::make_pair(deadline, id), std::move(fn));
    timer_deadlines_[id] = deadline;
    return id;
  }

  void Cancel(TimerId id) override {
    auto it = timer_deadlines_.find(id);
    if (it == timer_deadlines_.end()) return;
    timers_.erase(std::make_pair(it->second, id));
    timer_deadlines_.erase(it);
  }

  absl::Status AddFd(int fd, std::function<void()> on_readable) override {
    if (watches_.contains(fd)) {
      return absl::AlreadyExistsError(absl::StrCat("fd ", fd, " already added"));
    }
    auto watch = std::make_shared<Watch>();
    watch->on_readable = std::move(on_readable);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      return ErrnoStatus("epoll_ctl(ADD)");
    }
    watches_[fd] = std::move(watch);
    return absl::OkStatus();
  }

  void RemoveFd(int fd) override {
    auto it = watches_.find(fd);
    if (it == watches_.end()) return;
    it->second->removed = true;
    watches_.erase(it);
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  }

  absl::Status WatchWritableOnce(int fd,
                                 std::function<void()> on_writable) override {
    auto it = watches_.find(fd);
    if (it == watches_.end()) {
      return absl::NotFoundError(absl::StrCat("fd ", fd, " was not added"));
    }
    it->second->on_writable = std::move(on_writable);
    return UpdateInterest(fd, *it->second);
  }

  bool InLoopThread() const override {
    return loop_thread_.load() == std::this_thread::get_id();
  }

 private:
  struct Watch {
    std::function<void()> on_readable;
    std::function<void()> on_writable;  // One-shot.
    bool removed = false;
  };

  absl::Status UpdateInterest(int fd, const Watch& watch) {
    epoll_event ev{};
    ev.events = EPOLLIN | (watch.on_writable ? EPOLLOUT : 0);
    ev.data.fd = fd;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &ev) != 0) {
      return ErrnoStatus("epoll_ctl(MOD)");
    }
    return absl::OkStatus();
  }

  void Wake() {
    uint64_t one = 1;
    ssize_t rc = write(wake_fd_, &one, sizeof(one));
    (void)rc;  // EAGAIN means the counter is already non-zero: awake anyway.
  }

  void Dispatch(const epoll_event& ev) {
    int fd = ev.data.fd;
    if (fd == wake_fd_ || fd == timer_fd_) {
      uint64_t count;
      ssize_t rc = read(fd, &count, sizeof(count));
      (void)rc;
      if (fd == wake_fd_) {
        absl::MutexLock lock(&mu_);
        wake_pending_ = false;
      } else {
        armed_deadline_ = 0;  // Fired: the next ArmTimerFd() must re-arm.
      }
      return;  // Tasks and timers run at the top of the loop.
    }
    auto it = watches_.find(fd);
    if (it == watches_.end()) return;
    std::shared_ptr<Watch> watch = it->second;  // Survives RemoveFd in a callback.
    if ((ev.events & EPOLLOUT) && watch->on_writable) {
      std::function<void()> fn = std::move(watch->on_writable);
      watch->on_writable = nullptr;
      (void)UpdateInterest(fd, *watch);
      fn();
    }
    if (!watch->removed && (ev.events & (EPOLLIN | EPOLLERR | EPOLLHUP)) &&
        watch->on_readable) {
      watch->on_readable();
    }
  }

  bool HasPostedTasks() {
    absl::MutexLock lock(&mu_);
    return !tasks_.empty();
  }

  void RunPostedTasks() {
    std::deque<std::function<void()>> batch;
    {
      absl::MutexLock lock(&mu_);
      batch.swap(tasks_);
    }
    while (!batch.empty()) {
      std::function<void()> task = std::move(batch.front());
      batch.pop_front();
      task();
      if (stop_.load()) {
        // Keep the rest, in order, ahead of anything posted meanwhile.
        absl::MutexLock lock(&mu_);
        while (!batch.empty()) {
          tasks_.push_front(std::move(batch.back()));
          batch.pop_back();
        }
        return;
      }
    }
  }

  void RunDueTimers() {
    int64_t now = MonotonicNanos();
    while (!timers_.empty() && !stop_.load()) {
      auto it = timers_.begin();
      if (it->first.first > now) break;
      std::function<void()> fn = std::move(it->second);
      timer_deadlines_.erase(it->first.second);
      timers_.erase(it);
      fn();
    }
  }

  // Waits for events until the earliest timer is due (not at all when
  // tasks are posted). epoll_pwait2 takes the timeout in nanoseconds, so a
  // timer costs no system call of its own; where the kernel lacks it
  // (before Linux 5.11) the timerfd carries the deadline instead.
  int Wait(epoll_event* events, int max_events) {
    const bool tasks = HasPostedTasks();
    if (use_pwait2_) {
      timespec ts{0, 0};
      const timespec* timeout = &ts;
      if (!tasks) {
        if (timers_.empty()) {
          timeout = nullptr;
        } else {
          const int64_t wait = std::max<int64_t>(0, timers_.begin()->first.first - MonotonicNanos());
          ts.tv_sec = wait / 1000000000;
          ts.tv_nsec = wait % 1000000000;
        }
      }
      const int n = epoll_pwait2(epoll_fd_, events, max_events, timeout, nullptr);
      if (n >= 0 || errno != ENOSYS) return n;
      use_pwait2_ = false;
    }
    ArmTimerFd();
    return epoll_wait(epoll_fd_, events, max_events, tasks ? 0 : -1);
  }

  // Re-arms only when the earliest deadline moved earlier (or nothing is
  // armed): a deadline that moved later costs one early wake-up instead of
  // a timerfd_settime per event, which matters when QUIC pacing reschedules
  // a timer after every packet burst.
  void ArmTimerFd() {
    int64_t deadline = timers_.empty() ? 0 : timers_.begin()->first.first;
    if (deadline == 0 || (armed_deadline_ != 0 && deadline >= armed_deadline_)) {
      return;
    }
    armed_deadline_ = deadline;
    itimerspec spec{};  // deadline > 0 here, so it_value is never all-zero
    spec.it_value.tv_sec = deadline / 1000000000;
    spec.it_value.tv_nsec = deadline % 1000000000;
    timerfd_settime(timer_fd_, TFD_TIMER_ABSTIME, &spec, nullptr);
  }

  const int epoll_fd_;
  const int wake_fd_;
  const int timer_fd_;
  bool use_pwait2_ = true;  // loop thread: false once the kernel said ENOSYS
  std::atomic<bool> stop_{false};
  std::atomic<std::thread::id> loop_thread_{};

  absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool wake_pending_ ABSL_GUARDED_BY(mu_) = false;

  // Loop thread only.
  TimerId last_timer_id_ = 0;
  std::map<std::pair<int64_t, TimerId>, std::function<void()>> timers_;
  absl::flat_hash_map<TimerId, int64_t> timer_deadlines_;
  int64_t armed_deadline_ = 0;
  absl::flat_hash_map<int, std::shared_ptr<Watch>> watches_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<EventLoop>> EventLoop::Create() {
  int epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd < 0) return ErrnoStatus("epoll_create1");
  int wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd < 0) {
    absl::Status st = ErrnoStatus("eventfd");
    close(epoll_fd);
    return st;
  }
  int timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (timer_fd < 0) {
    absl::Status st = ErrnoStatus("timerfd_create");
    close(wake_fd);
    close(epoll_fd);
    return st;
  }
  for (int fd : {wake_fd, timer_fd}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) {
      absl::Status st = ErrnoStatus("epoll_ctl");
      close(timer_fd);
      close(wake_fd);
      close(epoll_fd);
      return st;
    }
  }
  return std::unique_ptr<EventLoop>(
      new EpollEventLoop(epoll_fd, wake_fd, timer_fd));
}

struct LoopThread::Impl {
  std::thread thread;
};

absl::StatusOr<std::unique_ptr<LoopThread>> LoopThread::Start(const std::string& name) {
  absl::StatusOr<std::unique_ptr<EventLoop>> loop = EventLoop::Create();
  if (!loop.ok()) return loop.status();
  std::unique_ptr<LoopThread> lt(new LoopThread());
  lt->loop_ = std::move(*loop);
  lt->impl_ = std::make_unique<Impl>();
  EventLoop* raw = lt->loop_.get();
  lt->impl_->thread = std::thread([raw, name = name.substr(0, 15)] {
    pthread_setname_np(pthread_self(), name.c_str());
    raw->Run();
  });
  // Wait until Run() is on its thread, so InLoopThread() is meaningful.
  lt->RunSync([] {});
  return lt;
}

LoopThread::~LoopThread() {
  loop_->Stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

void LoopThread::RunSync(std::function<void()> fn) {
  if (loop_->InLoopThread()) {
    fn();
    return;
  }
  absl::Notification done;
  loop_->Post([&] {
    fn();
    done.Notify();
  });
  done.WaitForNotification();
}

}  // namespace kvcast::quic
