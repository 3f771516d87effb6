// KvLanding: receives groups [first_group, end_group) of a KVCache track
// into pages over a MoQT session, by FETCH (groups that exist already, e.g.
// a prefix published by an earlier request) or SUBSCRIBE (a prompt being
// computed now: objects arrive as each chunk is published). A refused
// request, a track that ends early, a bad object or Abort all end it with
// an error and release the pages (kvcache::KvLander).
//
// Thread safety: loop thread only.
#ifndef KVCAST_SERVICES_WORKER_KV_LANDING_H_
#define KVCAST_SERVICES_WORKER_KV_LANDING_H_

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "transport/kvcache/lander.h"
#include "transport/moqt/session.h"

namespace kvcast::worker {

class KvLanding {
 public:
  using Done = std::function<void(absl::StatusOr<KvPages>)>;
  enum class Mode { kFetch, kSubscribe };

  // `done` runs exactly once on the loop thread (unless Abort/destruction
  // comes first, then Abort's reason is reported). The pages of `spec`
  // belong to the landing from this call on, also on error. `auth_token`
  // (KvSource.auth_token: a Token structure; empty: none) goes with the
  // request as its AUTHORIZATION TOKEN.
  static absl::StatusOr<std::shared_ptr<KvLanding>> Start(
      moqt::MoqtSession* session, KvPagePool* pool, Backend* backend,
      const Hash128& fingerprint, const moqt::FullTrackName& track, kvcache::LandingSpec spec,
      Mode mode, const std::string& auth_token, Done done);
  ~KvLanding();

  // Gives up if not finished (`reason` goes to done), and ends the request
  // at the publisher in any case (the destructor does the same).
  void Abort(const absl::Status& reason);
  int tokens_landed() const { return lander_->tokens_landed(); }
  // OK, or why the pages handed to `done` hold only the leading whole
  // groups (LandingSpec::keep_whole_groups).
  const absl::Status& shortfall() const { return lander_->shortfall(); }
  uint64_t bytes_landed() const { return bytes_; }
  // When the first object arrived (InfiniteFuture before): a goodput
  // measure excludes the wait for the publisher to compute the KV.
  absl::Time first_object_at() const { return first_object_at_; }

 private:
  KvLanding() = default;
  moqt::MoqtSession* session_ = nullptr;
  Mode mode_ = Mode::kSubscribe;
  uint64_t request_id_ = 0;
  bool finished_ = false;
  bool closed_ = false;  // UNSUBSCRIBE / FETCH_CANCEL sent
  uint64_t bytes_ = 0;
  absl::Time first_object_at_ = absl::InfiniteFuture();
  std::shared_ptr<kvcache::KvLander> lander_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace kvcast::worker

#endif  // KVCAST_SERVICES_WORKER_KV_LANDING_H_
