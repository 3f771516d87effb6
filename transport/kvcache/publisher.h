// KvPublisher: serves the KVCache tracks of prompts whose KV sits in this
// process's page pool, encoding each chunk on demand in the compression a
// subscriber asks for (any track of any published prompt).
//
// The owner (a prefill worker) announces a prompt with BeginPrompt, hands
// over each chunk the moment its KV is computed (ChunkReady: the publisher
// keeps a KvPages handle on its pages), and ends it with EndPrompt. Meanwhile:
//  - SUBSCRIBE of (root, model id, digest)/<compression>: accepted, every
//    ready chunk the filter wants is sent at once, later chunks as they come
//    (each group on its own subgroup stream, objects = tokens in order);
//    PUBLISH_DONE "track ended" after the last chunk, or an error if the
//    prompt was abandoned. Chunks may become ready in any order.
//  - FETCH of a group range: served from ready chunks; a range reaching past
//    the prompt or into chunks not computed yet is refused (INVALID_RANGE)
//    with a message naming the missing chunk. Once the prompt failed
//    (EndPrompt with an error) no missing chunk will come: a range that
//    starts with ready chunks is served up to its last ready one (FETCH_OK
//    ends there, end of track), one that starts with a missing chunk is
//    refused naming the failure.
//  - Pacing: each request's objects go out a piece (a quarter of a chunk)
//    at a time while its send queue holds less than the send window
//    (SetSendWindow; QUIC flow control and congestion drain it), so a slow
//    subscriber costs at most about a window and a piece of memory, never
//    its whole backlog.
//  - Errors name their cause: another model id, an unknown prompt, an
//    unknown compression (TRACK_DOES_NOT_EXIST). With SetSubscribeWait, a
//    SUBSCRIBE of a prompt not begun yet waits for it that long first.
// DropPrompt releases a prompt's pages; its subscriptions end. With an
// upstream session (a relay), each prompt's namespace is announced there
// (PUBLISH_NAMESPACE) so the relay routes subscriptions here and caches.
//
// Thread safety: none; the publisher and its sessions live on one loop
// thread. Other threads (the compute thread) Post their calls to it.
#ifndef KVCAST_TRANSPORT_KVCACHE_PUBLISHER_H_
#define KVCAST_TRANSPORT_KVCACHE_PUBLISHER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "engine/kv/kv_page_pool.h"
#include "engine/kv/prefix_hash.h"
#include "kernels/backend.h"
#include "transport/kvcache/ac_codec_thread.h"
#include "transport/kvcache/ac_pages.h"
#include "transport/kvcache/xl_pages.h"
#include "transport/kvcache/naming.h"
#include "transport/kvcache/ac/ac_tuning.h"
#include "transport/moqt/authorization.h"
#include "transport/moqt/session.h"
#include "transport/quic/event_loop.h"

namespace kvcast::kvcache {

class KvPublisher : public moqt::RequestHandler {
 public:
  // `pool` and `backend` (the pool's) are borrowed and must outlive the
  // publisher. Chunks are `chunk_tokens` tokens (a multiple of the pool's
  // page_tokens).
  KvPublisher(KvPagePool* pool, Backend* backend, const Hash128& model_fingerprint,
              int chunk_tokens);
  ~KvPublisher() override;  // releases every page it holds

  // Announces prompts on `session` (borrowed; null to stop); prompts already
  // begun are announced now. `on_announced` (optional) gets the relay's
  // answer to each prompt's PUBLISH_NAMESPACE.
  using AnnounceCallback = std::function<void(const std::string& prompt_digest, absl::Status)>;
  void SetUpstream(moqt::MoqtSession* session, AnnounceCallback on_announced = nullptr);
  // Set: each PUBLISH_NAMESPACE carries a token it signs for exactly that
  // prompt's namespace (the relay verifies it; moqt/authorization.h).
  void SetAnnounceAuthority(std::shared_ptr<const moqt::HmacTokenAuthority> authority) {
    announce_authority_ = std::move(authority);
  }
  // A SUBSCRIBE of a prompt not begun yet (a decode worker asking this
  // publisher directly may be faster than the prefill call) waits up to
  // `wait` for BeginPrompt instead of being refused at once; `loop` (the
  // sessions' loop, borrowed) runs the timers. Default: no wait.
  void SetSubscribeWait(quic::EventLoop* loop, absl::Duration wait) {
    loop_ = loop;
    subscribe_wait_ = wait;
  }

  // ac groups (and xl groups, with a basis) are coded on a thread of the
  // publisher's own (AcCodecThread)
  // instead of the loop thread, and the next group some request will need
  // is coded while the loop sends this one. `loop`: the sessions' loop
  // (borrowed). Without this call a group is coded on the loop thread when
  // its first piece goes out.
  void CodeAcInBackground(quic::EventLoop* loop);

  // The model's per-layer ac levels and (for the points that take them:
  // AcPolicy::takes_channel_weights) K channel weights (ac/ac_tuning.h)
  // for the ac tracks' groups coded from now on; decoders need nothing (the
  // steps and weights travel in each group). InvalidArgument for a tuning
  // of another shape than the pool's.
  absl::Status SetAcTuning(const ac::AcLayerTuning& tuning);

  // The model's KV basis (xl/kv_basis.h) and RoPE inverse frequencies
  // (head_dim / 2), for the xl tracks; without it they are refused.
  // InvalidArgument for a basis of another shape than the pool's;
  // FailedPrecondition once a basis is set (the groups cached and being
  // coded are of that one).
  absl::Status SetKvBasis(std::shared_ptr<const xl::KvBasis> basis,
                          std::vector<float> rope_inv_freq);

  // Bytes a request's send queue may hold before the publisher waits for
  // it to drain to half (default 8 MiB; at least 1).
  void SetSendWindow(size_t bytes) { send_window_ = std::max<size_t>(1, bytes); }

  // A prompt of `num_tokens` tokens named `prompt_digest` (naming.h).
  // AlreadyExists if it is being published; InvalidArgument for a malformed
  // digest or a non-positive length.
  absl::Status BeginPrompt(const std::string& prompt_digest, int num_tokens);
  // Chunk `group` is computed; `pages` hold its tokens (ceil(tokens in the
  // chunk / page_tokens) pages, first token at slot 0 of pages[0]); the
  // publisher keeps the handle (a Share() of the computing sequence's) until
  // the prompt is dropped. NotFound for an unknown prompt, OutOfRange for a
  // group past the prompt, InvalidArgument for the wrong number of pages or
  // pages of another pool, AlreadyExists for a chunk handed over twice (the
  // refused handle's pages are released).
  absl::Status ChunkReady(const std::string& prompt_digest, int group, KvPages pages);
  // No more chunks come (later ChunkReady calls are FailedPrecondition). OK: subscribers get PUBLISH_DONE once every chunk
  // was ready (FailedPrecondition, and nothing changes, if some are
  // missing); an error: subscriptions end with it. Chunks stay fetchable
  // until DropPrompt.
  absl::Status EndPrompt(const std::string& prompt_digest, const absl::Status& status);
  // Releases the prompt's pages and ends its subscriptions (CANCELLED).
  void DropPrompt(const std::string& prompt_digest);

  struct Stats {
    uint64_t objects_sent = 0;
    uint64_t bytes_sent = 0;   // encoded payload bytes
    uint64_t encodes = 0;  // pieces encoded (ac tracks: whole groups, once for all pieces)
    uint64_t encodes_ahead = 0;  // of those, ac groups coded on the background thread
    uint64_t rejected = 0;     // refused requests
    uint64_t paced_waits = 0;  // times a request's queue was full and sending waited
    uint64_t max_queued_bytes = 0;  // the most any request's send queue held after a piece
  };
  const Stats& stats() const { return stats_; }

  // moqt::RequestHandler
  void OnSubscribe(moqt::MoqtSession* session, const moqt::Subscribe& request,
                   std::shared_ptr<moqt::Downstream> downstream) override;
  void OnTrackStatus(moqt::MoqtSession* session, const moqt::Subscribe& request,
                     std::shared_ptr<moqt::Downstream> downstream) override;
  void OnFetch(moqt::MoqtSession* session, const moqt::Fetch& request,
               std::shared_ptr<moqt::Downstream> downstream) override;
  void OnSessionClosed(moqt::MoqtSession* session, const absl::Status& reason) override;

 private:
  // One accepted request (subscription or fetch) and the sends it still
  // has to make, in order.
  struct Outlet {
    std::shared_ptr<moqt::Downstream> downstream;
    KvCompression compression;
    struct Piece {
      int group;
      uint64_t lo, hi;  // object ids, as SendChunk's
    };
    std::deque<Piece> pending;
    std::optional<absl::Status> done;  // OnDone once `pending` is sent
  };
  struct Subscriber {
    moqt::Subscribe request;
    std::optional<moqt::Location> largest_at_subscribe;
    std::shared_ptr<Outlet> out;
  };
  struct Prompt {
    std::string digest;
    int num_tokens = 0;
    std::vector<KvPages> chunk_pages;  // the publisher's references; empty: not ready
    bool ended = false;
    absl::Status end_status;
    std::vector<std::shared_ptr<Subscriber>> subscribers;  // live: want chunks to come
    std::vector<std::shared_ptr<Outlet>> outlets;          // every request not done yet
  };

  int num_groups(const Prompt& p) const { return (p.num_tokens + chunk_tokens_ - 1) / chunk_tokens_; }
  int tokens_in(const Prompt& p, int group) const;
  static int ReadyChunks(const Prompt& p);
  // PUBLISH_NAMESPACE of the prompt on the upstream session.
  void Announce(const std::string& prompt_digest);
  std::optional<moqt::Location> Largest(const Prompt& p) const;
  // The prompt a request names; null after rejecting `d` with the reason
  // it cannot be served.
  Prompt* Resolve(const moqt::FullTrackName& name, moqt::Downstream& d,
                  KvCompression* compression);
  // Whether `s`'s filter wants any object of chunk `group`.
  bool Wants(const Subscriber& s, const Prompt& p, int group) const;
  // Encodes chunk `group` of `p` and sends its objects with ids in [lo, hi]
  // (tokens, then the end-of-group marker) to `to` (kept alive meanwhile:
  // a send may end a subscription). An ac track encodes the whole group
  // (its objects depend on every token) and sends the range of it.
  void SendChunk(const Prompt& p, int group, const KvCompression& compression,
                 const std::vector<std::shared_ptr<moqt::Downstream>>& to, uint64_t lo = 0,
                 uint64_t hi = UINT64_MAX);
  // Adds objects [lo, hi] of chunk `group` (as SendChunk) to `o`'s sends,
  // in pieces.
  void Queue(const Prompt& p, Outlet& o, int group, uint64_t lo = 0, uint64_t hi = UINT64_MAX);
  // Sends `o`'s pieces while its queue is under the window, then waits for
  // it to drain; ends the request once nothing is left and `done` is set.
  void Pump(Prompt& p, const std::shared_ptr<Outlet>& o);
  // Registers a new request's outlet; its cancellation forgets it.
  void Track(Prompt& p, const std::shared_ptr<Outlet>& o);
  // Ends every request of `p` with `status` at once (what is queued for
  // them is dropped).
  void EndSubscribers(Prompt& p, const absl::Status& status);
  void Release(Prompt& p);

  KvPagePool* const pool_;
  Backend* const backend_;
  using AcObjects = std::vector<std::vector<uint8_t>>;
  // (prompt, group, the track's ac policy or xl point)
  using AcKey = std::tuple<std::string, int, const void*>;
  static AcKey AcKeyOf(const Prompt& p, int group, const KvCompression& compression) {
    return {p.digest, group,
            compression.ac != nullptr ? static_cast<const void*>(compression.ac)
                                      : static_cast<const void*>(compression.xl)};
  }
  // The coded groups (ac, xl) coded last, newest at the back (a group goes out in
  // pieces, maybe to several requests): at most kAcCachedGroups. Streams
  // send the objects from here, sharing them: an evicted group lives on
  // until the streams that still hold its objects let go.
  static constexpr size_t kAcCachedGroups = 3;
  std::shared_ptr<const AcObjects> CachedAc(const AcKey& key) const;
  std::shared_ptr<const AcObjects> CacheAc(AcKey key, AcObjects objects);
  // Background coding (CodeAcInBackground). AcReady: whether the objects of
  // `o`'s next piece are coded; if not, their group is being coded or
  // waits its turn, and `o` is pumped again when a group comes back.
  bool AcReady(Prompt& p, const std::shared_ptr<Outlet>& o);
  // False when the backend could not read the group's pages (nothing started).
  bool StartAc(const Prompt& p, int group, const KvCompression& compression);
  // Whether `c`'s groups are coded on ac_thread_ (an ac track, or an xl
  // track once the thread has the basis).
  bool CodedInBackground(const KvCompression& c) const {
    return ac_thread_ && (c.ac || (c.xl && ac_thread_->codes_xl()));
  }
  // Starts coding the first group some request's pending pieces need.
  void CodeAhead();
  // The policy an ac track's groups are coded with: the track's own, or
  // its tuned copy (SetAcTuning).
  const ac::AcPolicy& CodingPolicy(const ac::AcPolicy* track) const;
  std::map<const ac::AcPolicy*, std::unique_ptr<const ac::AcPolicy>> tuned_;  // before ac_thread_
  AcPageCodec ac_;  // the ac tracks' codec (loop thread)
  std::unique_ptr<XlPageCodec> xl_;  // the xl tracks' (loop thread; null: no basis)
  std::deque<std::pair<AcKey, std::shared_ptr<const AcObjects>>> ac_groups_;
  std::unique_ptr<AcCodecThread> ac_thread_;
  std::vector<std::pair<std::string, std::weak_ptr<Outlet>>> ac_waiters_;  // (prompt, request)
  size_t send_window_ = 8 << 20;
  const std::string model_id_;
  const int chunk_tokens_;
  moqt::MoqtSession* upstream_ = nullptr;
  AnnounceCallback on_announced_;
  std::shared_ptr<const moqt::HmacTokenAuthority> announce_authority_;
  quic::EventLoop* loop_ = nullptr;
  absl::Duration subscribe_wait_ = absl::ZeroDuration();
  // SUBSCRIBEs waiting for BeginPrompt, by prompt digest.
  std::map<std::string, std::vector<std::pair<moqt::Subscribe, std::shared_ptr<moqt::Downstream>>>>
      parked_;
  std::map<std::string, Prompt> prompts_;
  // A staging buffer (Backend::AllocateStaging) of at least `bytes` that no
  // stream still holds, from batches_ or new.
  absl::StatusOr<std::shared_ptr<DeviceBuffer>> FreeBatch(size_t bytes);
  // Encoded tokens. Streams send them from here without a copy, holding a
  // batch until its bytes are acknowledged; free ones are reused, up to
  // kPooledBatchBytes of them.
  std::vector<std::shared_ptr<DeviceBuffer>> batches_;
  Stats stats_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // for session callbacks
};

}  // namespace kvcast::kvcache

#endif  // KVCAST_TRANSPORT_KVCACHE_PUBLISHER_H_
