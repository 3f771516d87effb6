// Adaptive bitrate for KV landing: see kv_abr.h.
#include "services/decode/kv_abr.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "services/common/call_wait.h"
#include "services/common/work_pool.h"

namespace kvcast::decode {

absl::StatusOr<std::vector<AbrTrack>> ParseAbrLadder(const std::string& names,
                                                     double fp16_token_bytes) {
  std::vector<AbrTrack> ladder;
  for (absl::string_view name : absl::StrSplit(names, ',', absl::SkipWhitespace())) {
    auto c = kvcache::CompressionOfTrackName(std::string(name));
    if (!c.ok()) return absl::InvalidArgumentError(absl::StrCat("ABR ladder: ", c.status().message()));
    double ratio;
    // The coded tracks' sizes vary with the KV; SmolLM2's on natural text.
    if (c->ac == &kvcache::ac::AcHigh()) {
      ratio = 0.20;
    } else if (c->ac == &kvcache::ac::AcLow()) {
      ratio = 0.13;
    } else if (c->xl == &kvcache::xl::XlHigh()) {
      ratio = 0.154;
    } else if (c->xl == &kvcache::xl::XlLow()) {
      ratio = 0.094;
    } else {
      ratio = KvFormatBits(c->format) / 16.0;
    }
    if (!ladder.empty() && ratio * fp16_token_bytes > ladder.back().bytes_per_token) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ABR ladder \"", names, "\": list tracks from most to fewest bytes (", name,
          " is larger than ", kvcache::TrackNameOf(ladder.back().compression), ")"));
    }
    ladder.push_back({*c, ratio * fp16_token_bytes});
  }
  if (ladder.empty()) return absl::InvalidArgumentError("ABR ladder: no tracks");
  return ladder;
}

AbrPlanner::AbrPlanner(std::vector<AbrTrack> ladder, double budget_s, double initial_goodput)
    : ladder_(std::move(ladder)), budget_s_(budget_s), goodput_(initial_goodput) {}

int AbrPlanner::Choose(int group_tokens, int remaining_tokens, double elapsed_s) const {
  const double left = budget_s_ - elapsed_s;
  // A better track only if everything left would still arrive with a
  // margin: bandwidth can drop mid-way, and a track too big for the time
  // left costs groups at the end.
  for (size_t t = 0; t < ladder_.size(); ++t) {
    if (remaining_tokens * ladder_[t].bytes_per_token / goodput_ <= kMargin * left) return int(t);
  }
  const int smallest = int(ladder_.size()) - 1;
  if (group_tokens * ladder_[smallest].bytes_per_token / goodput_ <= left) return smallest;
  return kStop;
}

void AbrPlanner::Observe(int track, double bytes, int tokens, double seconds) {
  if (tokens > 0 && bytes > 0) ladder_[track].bytes_per_token = bytes / tokens;
  if (seconds > 0 && bytes > 0) {
    goodput_ = 0.5 * goodput_ + 0.5 * (bytes / seconds);
  }
}

AbrOutcome LandAdaptively(AbrPlanner* planner, int first_group, int end_group, int chunk_tokens,
                          int num_tokens, int depth, const AbrLandFn& land,
                          const std::function<void(AbrLanded)>& accept,
                          const std::function<bool()>& cancelled,
                          const std::function<void()>& tick) {
  // A group's landing, on one of `depth` threads kept for this call (not a
  // thread per group).
  struct Slot {
    absl::Mutex mu;
    std::optional<absl::StatusOr<AbrLanded>> result ABSL_GUARDED_BY(mu);
  };
  struct InFlight {
    int track;
    std::shared_ptr<Slot> slot;
  };
  const size_t max_in_flight = std::max(1, depth);
  // Woken by each landing as it ends (the cancellation is seen between
  // groups, by `cancelled()`); `tick` runs every 250 ms meanwhile.
  auto wait = std::make_shared<services::CallWait>(nullptr);
  services::WorkPool landers(int(max_in_flight), max_in_flight);
  AbrOutcome out;
  std::deque<InFlight> flight;
  const absl::Time t0 = absl::Now();
  absl::Time previous_done = absl::InfinitePast();
  int next = first_group, previous_track = -1;
  bool no_more = false;  // the planner stopped: what is in flight still lands
  bool abandon = false;  // a landing failed or the request was cancelled
  while (true) {
    while (!no_more && !abandon && next < end_group && flight.size() < max_in_flight) {
      if (cancelled()) {
        abandon = true;
        break;
      }
      const int tokens = std::min(chunk_tokens, num_tokens - next * chunk_tokens);
      const int t = planner->Choose(tokens, num_tokens - next * chunk_tokens,
                                    absl::ToDoubleSeconds(absl::Now() - t0));
      if (t == AbrPlanner::kStop) {
        no_more = true;
        break;
      }
      if (previous_track >= 0 && t != previous_track) ++out.switches;
      previous_track = t;
      const kvcache::KvCompression c = planner->ladder()[t].compression;
      const int g = next++;
      auto slot = std::make_shared<Slot>();
      flight.push_back({t, slot});
      landers.Post([&land, c, g, slot, wait] {
        absl::StatusOr<AbrLanded> r = land(c, g);
        {
          absl::MutexLock lock(&slot->mu);
          slot->result = std::move(r);
        }
        wait->Notify();
      });
    }
    if (flight.empty()) break;
    InFlight head = std::move(flight.front());
    flight.pop_front();
    auto ended = [&head] {
      absl::MutexLock lock(&head.slot->mu);
      return head.slot->result.has_value();
    };
    while (!ended()) {
      wait->Wait(absl::Now() + absl::Milliseconds(250));
      if (tick) tick();
    }
    absl::StatusOr<AbrLanded> landed = [&head] {
      absl::MutexLock lock(&head.slot->mu);
      return std::move(*head.slot->result);
    }();
    if (!landed.ok()) {
      if (out.error.ok()) out.error = landed.status();
      abandon = true;
      continue;  // what is still in flight is awaited and discarded
    }
    if (abandon) continue;  // a group after a missing one cannot be used: its pages go
    const absl::Time from = std::max(landed->first_object, previous_done);
    if (landed->done > from) {
      planner->Observe(head.track, double(landed->bytes), landed->tokens,
                       absl::ToDoubleSeconds(landed->done - from));
    }
    previous_done = landed->done;
    out.tracks.push_back(head.track);
    ++out.landed_groups;
    accept(*std::move(landed));
  }
  out.recomputed_groups = end_group - first_group - out.landed_groups;
  return out;
}

}  // namespace kvcast::decode
