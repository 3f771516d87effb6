// KvLander: see lander.h.
#include "transport/kvcache/lander.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "transport/kvcache/naming.h"

namespace kvcast::kvcache {

absl::StatusOr<std::shared_ptr<KvLander>> KvLander::Create(
    KvPagePool* pool, Backend* backend, const Hash128& model_fingerprint,
    const moqt::FullTrackName& track, LandingSpec spec, DoneCallback done) {
  auto fail = [](absl::Status st) { return st; };  // `spec`'s pages go with it
  absl::StatusOr<KvTrack> parsed = ParseTrack(track);
  if (!parsed.ok()) return fail(absl::InvalidArgumentError(parsed.status().message()));
  if (parsed->model_id != ModelId(model_fingerprint)) {
    return fail(absl::InvalidArgumentError(absl::StrCat(
        "KV of model ", parsed->model_id, " cannot land in model ", ModelId(model_fingerprint))));
  }
  const int page_tokens = pool->layout().page_tokens;
  if (spec.chunk_tokens <= 0 || spec.chunk_tokens % page_tokens != 0) {
    return fail(absl::InvalidArgumentError(absl::StrCat(
        "chunk_tokens ", spec.chunk_tokens, " is not a multiple of page_tokens ", page_tokens)));
  }
  const int first = spec.first_group * spec.chunk_tokens;
  const int end = std::min(spec.end_group * spec.chunk_tokens, spec.num_tokens);
  if (spec.first_group < 0 || first >= end) {
    return fail(absl::InvalidArgumentError(
        absl::StrCat("empty landing range: groups [", spec.first_group, ", ", spec.end_group,
                     ") of a ", spec.num_tokens, "-token sequence")));
  }
  const size_t want_pages = (end - first + page_tokens - 1) / page_tokens;
  if (size_t(spec.pages.size()) != want_pages) {
    return fail(absl::InvalidArgumentError(absl::StrCat(
        "landing ", end - first, " tokens needs ", want_pages, " pages, got ",
        spec.pages.size())));
  }
  const KvCompression& compression = parsed->compression;
  std::unique_ptr<AcPageCodec> ac;
  std::unique_ptr<DeviceBuffer> staging;
  if (compression.ac) {
    // An ac group decodes whole: its objects wait in memory until it is complete.
    ac = std::make_unique<AcPageCodec>(pool->layout());
    if (absl::Status s = ac->Supported(); !s.ok()) return fail(s);
  } else if (compression.xl) {
    // So does an xl group, with the worker's basis.
    if (spec.xl == nullptr) {
      return fail(absl::FailedPreconditionError(absl::StrCat(
          "the ", TrackNameOf(compression), " track needs a KV basis; this worker has none")));
    }
    if (absl::Status s = spec.xl->Supported(); !s.ok()) return fail(s);
  } else if (absl::Status s = TokenCodec(pool->layout(), compression.format, compression.rotated)
                                 .Supported();
             !s.ok()) {
    return fail(s);
  } else if (!backend->KvPagesInHostMemory()) {
    // Staging for one group: objects are copied into it as they arrive and
    // land (one backend call for every layer) when the group is complete.
    const size_t token_bytes =
        TokenCodec(pool->layout(), compression.format, compression.rotated).token_bytes();
    auto buffer = backend->AllocateStaging(size_t(spec.chunk_tokens) * token_bytes);
    if (!buffer.ok()) return fail(buffer.status());
    staging = *std::move(buffer);
  }
  return std::shared_ptr<KvLander>(new KvLander(pool, backend, compression, std::move(ac),
                                                std::move(spec), std::move(done),
                                                std::move(staging)));
}

KvLander::KvLander(KvPagePool* pool, Backend* backend, const KvCompression& compression,
                   std::unique_ptr<AcPageCodec> ac, LandingSpec spec, DoneCallback done,
                   std::unique_ptr<DeviceBuffer> staging)
    : pool_(pool),
      backend_(backend),
      codec_(pool->layout(), compression.format, compression.rotated),
      ac_(std::move(ac)),
      xl_(compression.xl != nullptr),
      spec_(std::move(spec)),
      first_token_(spec_.first_group * spec_.chunk_tokens),
      end_token_(std::min(spec_.end_group * spec_.chunk_tokens, spec_.num_tokens)),
      done_(std::move(done)),
      landed_(end_token_ - first_token_, false),
      ac_decoded_(grouped() ? size_t(spec_.end_group - spec_.first_group) : 0, false),
      staging_(std::move(staging)) {
  staged_slots_.reserve(spec_.chunk_tokens);
}

absl::Status KvLander::Land(const moqt::ObjectHeader& h, absl::Span<const uint8_t> payload) {
  if (h.group < uint64_t(spec_.first_group) || h.group >= uint64_t(spec_.end_group)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV object in group ", h.group, ", outside the requested groups [", spec_.first_group,
        ", ", spec_.end_group, ")"));
  }
  const int64_t token = int64_t(h.group) * spec_.chunk_tokens + int64_t(h.object);
  if (h.object >= uint64_t(spec_.chunk_tokens) || token >= end_token_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV object ", h.group, "/", h.object, " is past the ", end_token_, "-token sequence"));
  }
  if (h.status == moqt::ObjectStatus::kDoesNotExist) {
    return absl::NotFoundError(
        absl::StrCat("publisher has no KV for token ", token, " (object ", h.group, "/",
                     h.object, ")"));
  }
  const int index = int(token - first_token_);
  if (grouped()) {
    if (landed_[index]) return absl::OkStatus();  // duplicate: first copy stands
    return LandAc(h, payload, index);
  }
  if (payload.size() != codec_.token_bytes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV object ", h.group, "/", h.object, " has ", payload.size(), " bytes; ",
                     TrackNameOf(KvCompression(codec_.format(), codec_.rotated())),
                     " tokens of this model have ", codec_.token_bytes()));
  }
  if (landed_[index]) return absl::OkStatus();  // duplicate: first copy stands
  const int32_t slot = SlotsOf(spec_.pages.ids(), pool_->layout().page_tokens, index, 1)[0];
  landed_[index] = true;
  ++landed_count_;
  if (staging_ == nullptr) {  // host pages: straight in, while the bytes are in cache
    ++flushes_;
    absl::Status s = codec_.Decode(backend_, payload.data(), {&slot, 1}, pool_);
    return s.ok() ? s : GroupError(h.group, s);
  }
  std::memcpy(static_cast<uint8_t*>(staging_->data()) + staged_slots_.size() * payload.size(),
              payload.data(), payload.size());
  staged_slots_.push_back(slot);
  staged_group_ = h.group;
  if (staged_slots_.size() == size_t(spec_.chunk_tokens)) return Flush();
  return absl::OkStatus();
}

int KvLander::TokensIn(uint64_t group) const {
  return std::min(spec_.chunk_tokens, spec_.num_tokens - int(group) * spec_.chunk_tokens);
}

std::vector<int32_t> KvLander::GroupSlots(uint64_t group) const {
  return SlotsOf(spec_.pages.ids(), pool_->layout().page_tokens,
                 int(group) * spec_.chunk_tokens - first_token_, TokensIn(group));
}

absl::Status KvLander::GroupError(uint64_t group, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat("KV group ", group, ": ", s.message()));
}

absl::Status KvLander::LandAc(const moqt::ObjectHeader& h, absl::Span<const uint8_t> payload,
                              int index) {
  const int tokens = TokensIn(h.group);
  AcGroup& g = ac_groups_[h.group];
  if (g.objects.empty()) g.objects.resize(tokens);
  g.objects[h.object].assign(payload.begin(), payload.end());
  landed_[index] = true;
  ++landed_count_;
  if (++g.received < tokens) return absl::OkStatus();
  // The group is complete: decode it into its pages.
  if (spec_.ac_thread != nullptr && (!xl_ || spec_.ac_thread->codes_xl())) {
    ++ac_decoding_;
    auto done = [self = shared_from_this(), group = h.group](auto half) {
      self->AcDecoded(group, std::move(half));
    };
    if (xl_) {
      spec_.ac_thread->SubmitDecodeXl(std::move(g.objects), int(h.group) * spec_.chunk_tokens,
                                      std::move(done));
    } else {
      spec_.ac_thread->SubmitDecode(std::move(g.objects), std::move(done));
    }
    ac_groups_.erase(h.group);
    return absl::OkStatus();
  }
  const std::vector<absl::Span<const uint8_t>> spans(g.objects.begin(), g.objects.end());
  absl::Status s =
      xl_ ? spec_.xl->Decode(backend_, spans, GroupSlots(h.group),
                             int(h.group) * spec_.chunk_tokens, pool_)
          : ac_->Decode(backend_, spans, GroupSlots(h.group), pool_);
  ac_groups_.erase(h.group);
  ++flushes_;
  if (!s.ok()) return GroupError(h.group, s);
  ac_decoded_[h.group - spec_.first_group] = true;
  return s;
}

void KvLander::AcDecoded(uint64_t group, absl::StatusOr<std::vector<uint8_t>> half) {
  --ac_decoding_;
  if (finished_) return;
  if (!half.ok()) {
    Finish(GroupError(group, half.status()));
    return;
  }
  absl::Status s = xl_ ? spec_.xl->Scatter(backend_, half->data(), GroupSlots(group), pool_)
                      : ac_->Scatter(backend_, half->data(), GroupSlots(group), pool_);
  spec_.ac_thread->GiveBack(*std::move(half));
  ++flushes_;
  if (!s.ok()) {
    Finish(GroupError(group, s));
    return;
  }
  ac_decoded_[group - spec_.first_group] = true;
  FinishIfComplete();
}

void KvLander::FinishIfComplete() {
  if (landed_count_ != tokens_wanted() || ac_decoding_ > 0 || finished_) return;
  if (absl::Status s = Flush(); !s.ok()) {
    Finish(s);
    return;
  }
  Finish(std::move(spec_.pages));
}

absl::Status KvLander::Flush() {
  if (staged_slots_.empty()) return absl::OkStatus();
  absl::Status s =
      codec_.Decode(backend_, static_cast<const uint8_t*>(staging_->data()), staged_slots_, pool_);
  ++flushes_;
  staged_slots_.clear();
  return s.ok() ? s : GroupError(staged_group_, s);
}

void KvLander::OnObject(const moqt::ObjectHeader& header, absl::Span<const uint8_t> payload) {
  if (finished_) return;
  if (header.status == moqt::ObjectStatus::kEndOfGroup ||
      header.status == moqt::ObjectStatus::kEndOfTrack) {
    // A group is complete: land it while the next one is computed.
    if (absl::Status s = Flush(); !s.ok()) Finish(s);
    return;
  }
  if (absl::Status st = Land(header, payload); !st.ok()) {
    Finish(st);
    return;
  }
  FinishIfComplete();
}

void KvLander::OnDone(const absl::Status& status) {
  // Every token came: the groups still decoding finish the landing.
  if (finished_ || landed_count_ == tokens_wanted()) return;
  const int missing = tokens_wanted() - landed_count_;
  if (status.ok()) {
    FinishShort(absl::DataLossError(absl::StrCat("KV track ended with ", missing, " of ",
                                                 tokens_wanted(), " tokens missing")));
  } else {
    FinishShort(absl::Status(status.code(), absl::StrCat("KV transfer failed with ", missing,
                                                         " tokens missing: ", status.message())));
  }
}

int KvLander::WholeLeadingGroups() const {
  int n = 0;
  for (int g = spec_.first_group; g < spec_.end_group; ++g, ++n) {
    if (grouped()) {
      if (!ac_decoded_[g - spec_.first_group]) break;
      continue;
    }
    const int first = g * spec_.chunk_tokens - first_token_;
    const auto begin = landed_.begin() + first;
    if (std::find(begin, begin + TokensIn(g), false) != begin + TokensIn(g)) break;
  }
  return n;
}

void KvLander::FinishShort(const absl::Status& cause) {
  // Staged tokens are landed ones: into their pages first.
  if (!spec_.keep_whole_groups || !Flush().ok()) {
    Finish(cause);
    return;
  }
  const int groups = WholeLeadingGroups();
  if (groups == 0) {
    Finish(cause);
    return;
  }
  absl::StatusOr<KvPages> kept =
      spec_.pages.Share(0, groups * spec_.chunk_tokens / pool_->layout().page_tokens);
  if (!kept.ok()) {
    Finish(cause);
    return;
  }
  shortfall_ = cause;
  Finish(std::move(kept));  // the rest of spec_.pages is released
}

void KvLander::Abort(const absl::Status& reason) {
  if (finished_) return;
  Finish(reason.ok() ? absl::CancelledError("KV landing aborted") : reason);
}

void KvLander::Finish(absl::StatusOr<KvPages> result) {
  finished_ = true;
  spec_.pages.Reset();  // failed: released; landed: moved into `result` already
  DoneCallback done = std::move(done_);
  if (done) done(std::move(result));
}

}  // namespace kvcast::kvcache
