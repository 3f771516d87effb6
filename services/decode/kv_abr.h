// Adaptive bitrate for landing a prompt's KV (issue 18): which track to
// take each group (128-token chunk) in, from the goodput of the groups so
// far and the time budget, CacheGen's adaptation on the prefill -> decode
// path.
//
// The ladder lists tracks from best quality (most bytes) to fewest bytes.
// Before each group, Choose() takes the best track whose predicted time
// for every remaining token (bytes per token / goodput) fits kMargin of the
// budget left; when none does, the smallest track for as long as this
// group still fits; when not even that fits, it answers kStop: the caller
// lands no more groups and the decode worker computes the rest itself.
// Observe() feeds a landed group back: goodput is an exponentially
// weighted mean (half weight on the newest group) of bytes over seconds,
// and a track's bytes per token (the ac tracks' vary with the KV) is its
// last measurement.
// Switches happen only at group boundaries, since a group is one request.
//
// Thread safety: none; one planner per landing.
#ifndef KVCAST_SERVICES_DECODE_KV_ABR_H_
#define KVCAST_SERVICES_DECODE_KV_ABR_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "services/worker/kv_landed.h"
#include "transport/kvcache/naming.h"

namespace kvcast::decode {

struct AbrTrack {
  kvcache::KvCompression compression;
  double bytes_per_token = 0;  // estimate, refined by Observe
};

// A ladder from a comma-separated list of track names ("fp16,int8,ac,ac-lo")
// for a model with `fp16_token_bytes` bytes per fp16 token. The ac tracks
// start from their SmolLM2 ratios (docs/benchmarks.md). InvalidArgument for
// an unknown name, an empty list, or one not ordered by decreasing bytes.
absl::StatusOr<std::vector<AbrTrack>> ParseAbrLadder(const std::string& names,
                                                     double fp16_token_bytes);

class AbrPlanner {
 public:
  static constexpr int kStop = -1;
  // Half the time left: a link can drop mid-way (kv_abr_bench.sh, a 10x
  // drop for 1 s of a 2.5 s budget: 0.8 landed 13-15 of 16 groups, 0.5
  // lands 15-16, more of them in ac-lo; a group not landed is recomputed).
  static constexpr double kMargin = 0.5;

  // `budget_s`: seconds for the whole landing; `initial_goodput`: bytes/s
  // assumed before the first group lands (its track is chosen with it).
  AbrPlanner(std::vector<AbrTrack> ladder, double budget_s, double initial_goodput);

  // The ladder index for the next group of `group_tokens` tokens, with
  // `remaining_tokens` (this group's included) still to land and
  // `elapsed_s` spent; kStop to land no more.
  int Choose(int group_tokens, int remaining_tokens, double elapsed_s) const;
  // Group landed in ladder track `track`: `bytes` of `tokens` tokens in
  // `seconds` (first object to last).
  void Observe(int track, double bytes, int tokens, double seconds);

  double goodput() const { return goodput_; }
  const std::vector<AbrTrack>& ladder() const { return ladder_; }

 private:
  std::vector<AbrTrack> ladder_;
  const double budget_s_;
  double goodput_;
};

// One group's landing, as the caller's landing function reports it.
using AbrLanded = worker::KvLanded;
// Lands `group` in `compression`, blocking; called from `depth` threads
// LandAdaptively keeps for the call (not a thread per group).
using AbrLandFn =
    std::function<absl::StatusOr<AbrLanded>(const kvcache::KvCompression& compression, int group)>;

struct AbrOutcome {
  int landed_groups = 0;
  int recomputed_groups = 0;  // not landed (no time left, a failure, cancelled)
  int switches = 0;           // track changes between consecutive groups
  std::vector<int> tracks;    // ladder index per landed group
  absl::Status error;         // the first landing that failed (the rest are computed)
};

// Lands groups [first_group, end_group) of a `num_tokens`-token prompt in
// `chunk_tokens` groups by adaptive bitrate with up to `depth` groups in
// flight (with 2, the next is requested, its track chosen from what has
// landed so far, while the one before still lands: no idle link between
// requests; the relay gives each range subscription its own). `accept`
// gets each landed group in group order on this thread. When the planner
// stops, what is in flight still lands and is accepted; after a failure or
// `cancelled()` nothing more is requested and groups still in flight are
// dropped (their pages released) once they land: a group after a missing
// one is of no use. A group's goodput sample is its
// bytes over the time from the later of its first object and the previous
// group's end to its own end. `tick` runs every 250 ms while waiting.
AbrOutcome LandAdaptively(AbrPlanner* planner, int first_group, int end_group, int chunk_tokens,
                          int num_tokens, int depth, const AbrLandFn& land,
                          const std::function<void(AbrLanded)>& accept,
                          const std::function<bool()>& cancelled,
                          const std::function<void()>& tick);

}  // namespace kvcast::decode

#endif  // KVCAST_SERVICES_DECODE_KV_ABR_H_
