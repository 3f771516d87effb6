// Adaptive bitrate for KV landing: see kv_abr.h.
#include "services/decode/kv_abr.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace kvcast::decode {

absl::StatusOr<std::vector<AbrTrack>> ParseAbrLadder(const std::string& names,
                                                     double fp16_token_bytes) {
  std::vector<AbrTrack> ladder;
  for (absl::string_view name : absl::StrSplit(names, ',', absl::SkipWhitespace())) {
    auto c = kvcache::CompressionOfTrackName(std::string(name));
    if (!c.ok()) return absl::InvalidArgumentError(absl::StrCat("ABR ladder: ", c.status().message()));
    double ratio;
    if (c->ac == &kvcache::ac::AcNearLossless()) {
      ratio = 0.47;
    } else if (c->ac == &kvcache::ac::AcLow()) {
      ratio = 0.34;
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

}  // namespace kvcast::decode
