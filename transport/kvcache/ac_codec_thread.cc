// Background coding of ac groups: see ac_codec_thread.h.
#include "transport/kvcache/ac_codec_thread.h"

#include <pthread.h>

#include <utility>

namespace kvcast::kvcache {

AcCodecThread::AcCodecThread(const KvLayout& layout, quic::EventLoop* loop)
    : loop_(loop), layout_(layout), codec_(layout), thread_([this] {
        pthread_setname_np(pthread_self(), "ac-coder");
        Run();
      }) {}

AcCodecThread::~AcCodecThread() {
  *alive_ = false;  // completions posted from now on are dropped
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

void AcCodecThread::SubmitEncode(const ac::AcPolicy& policy, std::vector<uint8_t> half,
                                 int tokens, bool starts_sequence, Encoded done) {
  auto job = std::make_unique<Job>();
  job->policy = &policy;
  job->half = std::move(half);
  job->tokens = tokens;
  job->starts_sequence = starts_sequence;
  job->encoded = std::move(done);
  Push(std::move(job));
}

void AcCodecThread::SubmitDecode(Objects objects, Decoded done) {
  auto job = std::make_unique<Job>();
  job->objects = std::move(objects);
  job->decoded = std::move(done);
  Push(std::move(job));
}

void AcCodecThread::SetKvBasis(std::shared_ptr<const xl::KvBasis> basis,
                               std::vector<float> rope_inv_freq) {
  // Once: a second codec could replace the one an xl job is using. Until
  // now no xl job was submitted (codes_xl() was false), so none reads it.
  if (xl_codec_) return;
  xl_codec_ = std::make_unique<XlPageCodec>(layout_, std::move(rope_inv_freq),
                                            std::move(basis));
}

void AcCodecThread::SubmitEncodeXl(const xl::XlPoint& point, std::vector<uint8_t> half,
                                   int tokens, int first_position, Encoded done) {
  auto job = std::make_unique<Job>();
  job->xl_point = &point;
  job->half = std::move(half);
  job->tokens = tokens;
  job->first_position = first_position;
  job->encoded = std::move(done);
  Push(std::move(job));
}

void AcCodecThread::SubmitDecodeXl(Objects objects, int first_position, Decoded done) {
  auto job = std::make_unique<Job>();
  job->objects = std::move(objects);
  job->xl_decode = true;
  job->first_position = first_position;
  job->decoded = std::move(done);
  Push(std::move(job));
}

void AcCodecThread::Push(std::unique_ptr<Job> job) {
  ++pending_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(job));
  }
  cv_.notify_one();
}

std::vector<uint8_t> AcCodecThread::TakeBuffer() {
  std::lock_guard<std::mutex> lock(mu_);
  if (spare_buffers_.empty()) return {};
  std::vector<uint8_t> b = std::move(spare_buffers_.back());
  spare_buffers_.pop_back();
  return b;
}

void AcCodecThread::GiveBack(std::vector<uint8_t> buffer) {
  std::lock_guard<std::mutex> lock(mu_);
  if (spare_buffers_.size() < 2) spare_buffers_.push_back(std::move(buffer));
}

std::function<void()> AcCodecThread::Work(Job& job) {
  if (job.policy != nullptr || job.xl_point != nullptr) {
    auto objects = std::make_shared<Objects>();
    if (job.xl_point != nullptr) {
      xl_codec_->EncodeGathered(*job.xl_point, job.half.data(), job.tokens, job.first_position,
                                objects.get());
    } else {
      codec_.EncodeGathered(*job.policy, job.half.data(), job.tokens, objects.get(),
                            job.starts_sequence);
    }
    GiveBack(std::move(job.half));
    return [objects, done = std::move(job.encoded)] { done(std::move(*objects)); };
  }
  const std::vector<absl::Span<const uint8_t>> spans(job.objects.begin(), job.objects.end());
  auto half = std::make_shared<std::vector<uint8_t>>(TakeBuffer());
  absl::Status s = job.xl_decode ? xl_codec_->DecodeToHalf(spans, job.first_position, half.get())
                                 : codec_.DecodeToHalf(spans, half.get());
  return [half, s = std::move(s), done = std::move(job.decoded)] {
    if (s.ok()) {
      done(std::move(*half));
    } else {
      done(s);
    }
  };
}

void AcCodecThread::Run() {
  for (;;) {
    std::unique_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      if (stop_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    std::function<void()> complete = Work(*job);
    // The loop owns pending_ and the callbacks; `alive` outlives this object.
    loop_->Post([this, alive = std::weak_ptr<bool>(alive_), complete = std::move(complete)] {
      auto a = alive.lock();
      if (!a || !*a) return;
      --pending_;
      complete();
    });
  }
}

}  // namespace kvcast::kvcache
