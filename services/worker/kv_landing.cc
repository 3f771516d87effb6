#include "services/worker/kv_landing.h"

#include <utility>

#include "common/status_macros.h"

namespace kvcast::worker {
namespace {

// Counts payload bytes on their way to the lander, and notes when the
// first one came.
class CountingConsumer : public moqt::TrackConsumer {
 public:
  CountingConsumer(std::shared_ptr<moqt::TrackConsumer> inner, uint64_t* bytes,
                   absl::Time* first, std::shared_ptr<bool> alive)
      : inner_(std::move(inner)), bytes_(bytes), first_(first), alive_(std::move(alive)) {}
  void OnObject(const moqt::ObjectHeader& header, absl::Span<const uint8_t> payload) override {
    if (*alive_) {
      *bytes_ += payload.size();
      if (*first_ == absl::InfiniteFuture()) *first_ = absl::Now();
    }
    inner_->OnObject(header, payload);
  }
  void OnDone(const absl::Status& status) override { inner_->OnDone(status); }

 private:
  std::shared_ptr<moqt::TrackConsumer> inner_;
  uint64_t* bytes_;
  absl::Time* first_;
  std::shared_ptr<bool> alive_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<KvLanding>> KvLanding::Start(
    moqt::MoqtSession* session, KvPagePool* pool, Backend* backend, const Hash128& fingerprint,
    const moqt::FullTrackName& track, kvcache::LandingSpec spec, Mode mode,
    const std::string& auth_token, Done done) {
  std::shared_ptr<KvLanding> landing(new KvLanding());
  KvLanding* self = landing.get();
  self->mode_ = mode;
  const uint64_t first = spec.first_group, last = spec.end_group - 1;
  std::weak_ptr<bool> alive = self->alive_;
  ASSIGN_OR_RETURN(self->lander_,
                   kvcache::KvLander::Create(
                       pool, backend, fingerprint, track, std::move(spec),
                       [self, alive, done = std::move(done)](auto result) {
                         auto a = alive.lock();
                         if (!a || !*a) return;  // dropped: the owner is gone
                         self->finished_ = true;
                         done(std::move(result));
                       }));
  auto consumer = std::make_shared<CountingConsumer>(self->lander_, &self->bytes_,
                                                     &self->first_object_at_, self->alive_);
  auto on_reply = [self, alive](absl::StatusOr<moqt::TrackInfo> r) {
    auto a = alive.lock();
    if (!r.ok() && a && *a) self->lander_->Abort(r.status());
  };
  moqt::Parameters params;
  if (!auth_token.empty()) params.push_back({moqt::kParamAuthorizationToken, 0, auth_token});
  absl::StatusOr<uint64_t> id;
  if (mode == Mode::kFetch) {
    moqt::Fetch f;
    f.track = track;
    f.start = {first, 0};
    f.end = {last, 0};  // object 0 = the whole end group
    f.parameters = std::move(params);
    id = session->Fetch(f, consumer, on_reply);
  } else {
    moqt::Subscribe s;
    s.track = track;
    s.filter_type = moqt::FilterType::kAbsoluteRange;
    s.start = moqt::Location{first, 0};
    s.end_group = last;
    s.parameters = std::move(params);
    id = session->Subscribe(s, consumer, on_reply);
  }
  if (!id.ok()) {
    self->lander_->Abort(id.status());
    return id.status();
  }
  // Only now is there a request to end (Abort, on every way out).
  self->session_ = session;
  self->request_id_ = *id;
  return landing;
}

void KvLanding::Abort(const absl::Status& reason) {
  // A lander the track was refused for was never made (Start failed).
  if (!finished_ && lander_ != nullptr) lander_->Abort(reason);  // reports through done, frees pages
  // A subscription stays open at the publisher (and a relay) after its
  // range landed: end it either way.
  if (session_ != nullptr && !session_->closed() && !closed_) {
    closed_ = true;
    if (mode_ == Mode::kFetch) {
      session_->FetchCancel(request_id_);
    } else {
      session_->Unsubscribe(request_id_);
    }
  }
}

KvLanding::~KvLanding() {
  *alive_ = false;  // no callbacks into the owner from here on
  Abort(absl::CancelledError("landing dropped"));
}

}  // namespace kvcast::worker
