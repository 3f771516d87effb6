// Background coding of ac groups: see ac_encode_thread.h.
#include "transport/kvcache/ac_encode_thread.h"

#include <utility>

namespace kvcast::kvcache {

AcEncodeThread::AcEncodeThread(const KvLayout& layout, quic::EventLoop* loop)
    : loop_(loop), codec_(layout), thread_([this] { Run(); }) {}

AcEncodeThread::~AcEncodeThread() {
  *alive_ = false;  // completions posted from now on are dropped
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

void AcEncodeThread::Submit(const ac::AcPolicy& policy, std::vector<uint8_t> half, int tokens,
                            Done done) {
  busy_ = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = std::make_unique<Job>(Job{&policy, std::move(half), tokens, std::move(done)});
  }
  cv_.notify_one();
}

void AcEncodeThread::Run() {
  for (;;) {
    std::unique_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || job_ != nullptr; });
      if (stop_) return;
      job = std::move(job_);
    }
    auto objects = std::make_shared<Objects>();
    codec_.EncodeGathered(*job->policy, job->half.data(), job->tokens, objects.get());
    // The loop owns busy_ and the callback; `alive` outlives this object.
    loop_->Post([this, alive = std::weak_ptr<bool>(alive_), objects, done = std::move(job->done)] {
      auto a = alive.lock();
      if (!a || !*a) return;
      busy_ = false;
      done(std::move(*objects));
    });
  }
}

}  // namespace kvcast::kvcache
