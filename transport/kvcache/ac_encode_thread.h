// AcEncodeThread: codes the ac tracks' groups on a thread of its own, so
// that a publisher's loop thread keeps sending one group while the next is
// coded (coding a Llama-3-8B-shaped group takes ~15 ms of a core; on the
// loop thread the link sat idle meanwhile). The caller gathers a group's
// fp16 token payloads on the loop thread (AcPageCodec::Gather: the pages
// and backend stay the loop's) and hands them over; the objects come back
// on the loop.
//
// Thread safety: Submit and busy() on the loop thread; the destructor on
// the loop thread too (it waits for the group being coded; a completion
// not delivered by then is dropped).
#ifndef KVCAST_TRANSPORT_KVCACHE_AC_ENCODE_THREAD_H_
#define KVCAST_TRANSPORT_KVCACHE_AC_ENCODE_THREAD_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/kv/kv_page_pool.h"
#include "transport/kvcache/ac/ac_codec.h"
#include "transport/kvcache/ac_pages.h"
#include "transport/quic/event_loop.h"

namespace kvcast::kvcache {

class AcEncodeThread {
 public:
  using Objects = std::vector<std::vector<uint8_t>>;
  using Done = std::function<void(Objects objects)>;

  // `loop` (borrowed) receives the completions.
  AcEncodeThread(const KvLayout& layout, quic::EventLoop* loop);
  ~AcEncodeThread();

  // Codes `half` (the fp16 payloads of `tokens` tokens, AcPageCodec::Gather)
  // in `policy`; `done` then runs on the loop with the group's objects.
  // One group at a time: only when !busy().
  void Submit(const ac::AcPolicy& policy, std::vector<uint8_t> half, int tokens, Done done);
  // A group was submitted and its `done` has not run yet.
  bool busy() const { return busy_; }

 private:
  struct Job {
    const ac::AcPolicy* policy;
    std::vector<uint8_t> half;
    int tokens;
    Done done;
  };
  void Run();

  quic::EventLoop* const loop_;
  AcPageCodec codec_;  // the thread's own
  bool busy_ = false;  // loop thread's view
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  std::mutex mu_;
  std::condition_variable cv_;
  std::unique_ptr<Job> job_;  // guarded by mu_
  bool stop_ = false;         // guarded by mu_
  std::thread thread_;
};

}  // namespace kvcast::kvcache

#endif  // KVCAST_TRANSPORT_KVCACHE_AC_ENCODE_THREAD_H_
