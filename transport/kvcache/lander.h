// KvLander: lands the objects of one KVCache track (a SUBSCRIBE or FETCH)
// straight into pre-allocated pages of a decoding sequence.
//
// A lander owns the pages of a run of whole groups [first_group, end_group)
// of a sequence of num_tokens tokens: tokens [first_group * chunk_tokens,
// min(end_group * chunk_tokens, num_tokens)), first token at slot 0 of
// pages[0]. Each object is checked, then lands in its slot: on host pages
// (Backend::KvPagesInHostMemory) at once, with a DecodeKv call of its own;
// on a device, through a staging buffer of one group
// (Backend::AllocateStaging: page-locked), whose tokens land with one
// DecodeKv call, for every layer, when the buffer is full, a group's end
// marker arrives, or the last token does.
// An ac track's objects wait until their group is complete, which then
// decodes whole (ac_pages.h): on the spec's AcCodecThread when it has one,
// so that the loop keeps receiving meanwhile, else on the loop thread. A
// group decoding there holds a reference to the lander, so the landing
// finishes even if the session has let go of it meanwhile.
// Groups and objects may arrive in any order; a duplicate is ignored.
// When every token has landed, `done` gets the pages (ownership passes to
// the caller). On the first bad object or failure, nothing of it is written,
// `done` gets an error naming the cause, the pages are released to the
// pool, and later objects are ignored; the caller should then end the
// subscription. `done` is called exactly once (success, failure or Abort)
// unless the lander is destroyed first.
// With LandingSpec::keep_whole_groups, a track that ends (OK or with an
// error) with tokens missing still hands over what is usable: the pages of
// the leading groups, from first_group on, whose every token is in its
// pages (landed, flushed, an ac group decoded), as a success with fewer
// pages; shortfall() then says why the rest is missing. With no such group
// it fails as above. Bad objects and Abort never keep anything.
//
// Errors: InvalidArgument (bad track name, model id of another model,
// group outside the range, object id past its chunk, wrong payload length,
// a page count that does not match), NotFound (publisher says a token does
// not exist), DataLoss (track ended with tokens missing), and the error a
// subscription or fetch ended with.
//
// Thread safety: none; use on the session's loop thread.
#ifndef KVCAST_TRANSPORT_KVCACHE_LANDER_H_
#define KVCAST_TRANSPORT_KVCACHE_LANDER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/kv/kv_page_pool.h"
#include "engine/kv/prefix_hash.h"
#include "kernels/backend.h"
#include "transport/kvcache/ac_codec_thread.h"
#include "transport/kvcache/ac_pages.h"
#include "transport/kvcache/xl_pages.h"
#include "transport/kvcache/naming.h"
#include "engine/kv/token_codec.h"
#include "transport/moqt/track_consumer.h"

namespace kvcast::kvcache {

struct LandingSpec {
  int chunk_tokens = 128;
  int num_tokens = 0;   // tokens of the whole sequence
  int first_group = 0;  // groups [first_group, end_group) land here
  int end_group = 0;
  KvPages pages;  // owned by the lander from Create on
  // Borrowed, on the session's loop (null: ac groups decode on the loop).
  AcCodecThread* ac_thread = nullptr;
  // A track cut short keeps its leading whole groups (see above).
  bool keep_whole_groups = false;
  // Borrowed, on the session's loop: the xl tracks' codec over the
  // worker's KV basis (null: an xl track is refused). Its groups decode on
  // the loop.
  XlPageCodec* xl = nullptr;
};

class KvLander : public moqt::TrackConsumer, public std::enable_shared_from_this<KvLander> {
 public:
  using DoneCallback = std::function<void(absl::StatusOr<KvPages>)>;

  // Validates `track` (a KVCache track of `model_fingerprint`'s model) and
  // `spec`. On error the spec's pages are released before returning.
  // `pool` and `backend` (the pool's) are borrowed and outlive the lander.
  static absl::StatusOr<std::shared_ptr<KvLander>> Create(
      KvPagePool* pool, Backend* backend, const Hash128& model_fingerprint,
      const moqt::FullTrackName& track, LandingSpec spec, DoneCallback done);
  ~KvLander() override = default;  // spec_.pages releases them if still held

  // Gives up (deadline, cancellation): releases the pages and reports
  // `reason` through `done`, unless already finished.
  void Abort(const absl::Status& reason);

  int tokens_landed() const { return landed_count_; }  // received, staged or in pages
  int tokens_wanted() const { return end_token_ - first_token_; }
  int flushes() const { return flushes_; }  // DecodeKv calls (or ac groups decoded) so far
  // OK, or why a keep_whole_groups landing handed over only its leading
  // whole groups.
  const absl::Status& shortfall() const { return shortfall_; }

  // moqt::TrackConsumer
  void OnObject(const moqt::ObjectHeader& header, absl::Span<const uint8_t> payload) override;
  void OnDone(const absl::Status& status) override;

 private:
  KvLander(KvPagePool* pool, Backend* backend, const KvCompression& compression,
           std::unique_ptr<AcPageCodec> ac, LandingSpec spec, DoneCallback done,
           std::unique_ptr<DeviceBuffer> staging);
  absl::Status Land(const moqt::ObjectHeader& header, absl::Span<const uint8_t> payload);
  // A coded group's object (an ac or xl track): kept until its group is
  // complete, then the group decodes into its pages.
  absl::Status LandAc(const moqt::ObjectHeader& header, absl::Span<const uint8_t> payload,
                      int index);
  int TokensIn(uint64_t group) const;                   // of the sequence's group
  std::vector<int32_t> GroupSlots(uint64_t group) const;  // its tokens' page slots
  static absl::Status GroupError(uint64_t group, const absl::Status& s);  // names the group
  // An ac group decoded on the spec's thread: into its pages, or the error.
  void AcDecoded(uint64_t group, absl::StatusOr<std::vector<uint8_t>> half);
  // Decodes the staged tokens into their pages (a device: one DMA).
  absl::Status Flush();
  // Every token landed and no group still decoding: done gets the pages.
  void FinishIfComplete();
  // How many groups from first_group on have every token in their pages.
  int WholeLeadingGroups() const;
  // The track ended short with `cause`: done gets the leading whole groups
  // (keep_whole_groups), else `cause`.
  void FinishShort(const absl::Status& cause);
  void Finish(absl::StatusOr<KvPages> result);

  KvPagePool* const pool_;
  Backend* const backend_;
  const TokenCodec codec_;  // fixed-size tracks
  const std::unique_ptr<AcPageCodec> ac_;  // ac tracks
  const bool xl_;                          // an xl track (spec_.xl decodes it)
  bool grouped() const { return ac_ != nullptr || xl_; }
  struct AcGroup {
    std::vector<std::vector<uint8_t>> objects;  // one per token of the group
    int received = 0;
  };
  std::map<uint64_t, AcGroup> ac_groups_;  // incomplete coded groups
  int ac_decoding_ = 0;                    // groups on spec_.ac_thread (each holds a reference)
  LandingSpec spec_;  // spec_.pages are ours until Finish
  const int first_token_;
  const int end_token_;
  DoneCallback done_;
  std::vector<bool> landed_;
  std::vector<bool> ac_decoded_;  // of each group in range (coded tracks)
  absl::Status shortfall_;
  int landed_count_ = 0;
  bool finished_ = false;
  // chunk_tokens payloads (fixed-size tracks on a device; null on host pages)
  const std::unique_ptr<DeviceBuffer> staging_;
  std::vector<int32_t> staged_slots_;             // slot of each staged payload
  uint64_t staged_group_ = 0;                     // of the last one (named in errors)
  int flushes_ = 0;
};

}  // namespace kvcast::kvcache

#endif  // KVCAST_TRANSPORT_KVCACHE_LANDER_H_
