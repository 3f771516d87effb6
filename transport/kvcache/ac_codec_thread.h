// AcCodecThread: codes and decodes the ac tracks' groups on a thread of its
// own, off a session's loop thread.
//  - A publisher's loop keeps sending one group while the next is coded
//    (coding a Llama-3-8B-shaped group takes ~15 ms of a core; on the loop
//    thread the link sat idle meanwhile). The caller gathers a group's fp16
//    token payloads on the loop thread (AcPageCodec::Gather: the pages and
//    backend stay the loop's) and hands them over; the objects come back on
//    the loop.
//  - A lander's loop keeps receiving, and acknowledging, while a complete
//    group decodes (on the loop thread no ACK left for the ~15 ms a group
//    takes, so the sender, whose window a fast link fills in a millisecond,
//    stood idle); the fp16 payloads come back on the loop, which writes them
//    into the pages (AcPageCodec::Scatter).
// It codes the xl tracks' groups the same way once given the model's KV
// basis (SetKvBasis; an xl group of SmolLM2 takes ~45 ms of a core).
// Jobs run one at a time, in the order submitted.
//
// Thread safety: Submit*, busy() and the destructor on the loop thread (the
// destructor waits for the job running; completions not delivered by then
// are dropped).
#ifndef KVCAST_TRANSPORT_KVCACHE_AC_CODEC_THREAD_H_
#define KVCAST_TRANSPORT_KVCACHE_AC_CODEC_THREAD_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/kv/kv_page_pool.h"
#include "transport/kvcache/ac/ac_codec.h"
#include "transport/kvcache/ac_pages.h"
#include "transport/kvcache/xl_pages.h"
#include "transport/quic/event_loop.h"

namespace kvcast::kvcache {

class AcCodecThread {
 public:
  using Objects = std::vector<std::vector<uint8_t>>;
  using Encoded = std::function<void(Objects objects)>;
  using Decoded = std::function<void(absl::StatusOr<std::vector<uint8_t>> half)>;

  // `loop` (borrowed) receives the completions; `layout` is the pool's.
  AcCodecThread(const KvLayout& layout, quic::EventLoop* loop);
  ~AcCodecThread();

  // Codes `half` (the fp16 payloads of `tokens` tokens, AcPageCodec::Gather)
  // in `policy` (which outlives the job), starts_sequence as
  // AcPageCodec::Encode; `done` then runs on the loop with the group's
  // objects.
  void SubmitEncode(const ac::AcPolicy& policy, std::vector<uint8_t> half, int tokens,
                    bool starts_sequence, Encoded done);
  // Decodes a whole group, objects[t] = token t's object; `done` then runs
  // on the loop with the fp16 payloads (AcPageCodec::Scatter them) or the
  // decoder's error.
  void SubmitDecode(Objects objects, Decoded done);

  // The xl tracks: SetKvBasis gives the thread its own XlPageCodec
  // (`basis` and `rope_inv_freq` as XlPageCodec's; once, before any xl job:
  // later calls are ignored), codes_xl() says whether it has one. SubmitEncodeXl codes `half` (XlPageCodec::
  // Gather's payloads of `tokens` tokens, the first at first_position) at
  // `point` (which outlives the job); SubmitDecodeXl decodes a whole group
  // (XlPageCodec::DecodeToHalf); completions as above.
  void SetKvBasis(std::shared_ptr<const xl::KvBasis> basis, std::vector<float> rope_inv_freq);
  bool codes_xl() const { return xl_codec_ != nullptr; }
  void SubmitEncodeXl(const xl::XlPoint& point, std::vector<uint8_t> half, int tokens,
                      int first_position, Encoded done);
  void SubmitDecodeXl(Objects objects, int first_position, Decoded done);
  // A job was submitted whose `done` has not run yet.
  bool busy() const { return pending_ > 0; }

  // Buffers for a group's fp16 payloads: TakeBuffer gives one handed back
  // earlier (an encode job's input, a decode's output once scattered), or
  // an empty one; GiveBack keeps up to two. A reused buffer of the same
  // size is neither cleared nor faulted in again (16 MiB a Llama-3-8B
  // group). Any thread.
  std::vector<uint8_t> TakeBuffer();
  void GiveBack(std::vector<uint8_t> buffer);

 private:
  struct Job {
    const ac::AcPolicy* policy = nullptr;  // an ac encode
    const xl::XlPoint* xl_point = nullptr;  // an xl encode
    bool xl_decode = false;                 // an xl decode (else, neither set: an ac decode)
    int first_position = 0;                 // xl jobs
    std::vector<uint8_t> half;
    int tokens = 0;
    bool starts_sequence = false;
    Objects objects;
    Encoded encoded;
    Decoded decoded;
  };
  void Push(std::unique_ptr<Job> job);
  void Run();
  // On the thread: the job's result, as the completion to post to the loop.
  std::function<void()> Work(Job& job);

  quic::EventLoop* const loop_;
  const KvLayout layout_;
  AcPageCodec codec_;  // the thread's own
  std::unique_ptr<XlPageCodec> xl_codec_;  // likewise (SetKvBasis)
  int pending_ = 0;    // loop thread's view
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Job>> jobs_;  // guarded by mu_
  bool stop_ = false;                      // guarded by mu_
  std::vector<std::vector<uint8_t>> spare_buffers_;  // guarded by mu_
  std::thread thread_;
};

}  // namespace kvcast::kvcache

#endif  // KVCAST_TRANSPORT_KVCACHE_AC_CODEC_THREAD_H_
