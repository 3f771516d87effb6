// kvcast.v1.Decode on a decode worker. Per request (one bidi stream):
//  1. takes the chunks of the prompt it already holds from its own prefix
//     cache, allocates pages for the rest of the published KV and
//     subscribes to the request's track for only those groups (landing
//     objects straight into the pages while the prefill computes);
//  2. when the KV covers the whole prompt, waits for the prefill's first
//     token on the stream;
//  3. joins the engine's continuous batch and streams every token it
//     samples, then a last message with the finish reason.
// A failed landing (publisher gone, track refused, deadline) falls back to
// computing the missing KV locally: KV is an optimization, the request goes
// on. With the request's compression "abr" the worker lands group by group
// and picks each group's track from the goodput it measures and
// Options::abr_budget_s (kv_abr.h); groups that cannot arrive in time are
// computed here. Requests landing the same prompt at once (n > 1 choices)
// land it once: the others wait, then share its full chunks through the
// prefix cache (shared_landings.h). Cancelling the stream cancels the
// sequence; pages are freed on every path (the engine and the lander own
// them in turn).
#ifndef KVCAST_SERVICES_DECODE_DECODE_SERVICE_H_
#define KVCAST_SERVICES_DECODE_DECODE_SERVICE_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kvcast/v1/worker.grpc.pb.h"
#include "services/decode/kv_abr.h"
#include "services/decode/shared_landings.h"
#include "services/common/metrics.h"
#include "services/worker/land_kv.h"
#include "services/worker/worker_runtime.h"

namespace kvcast::decode {

class DecodeService final : public v1::Decode::Service {
 public:
  struct Options {
    std::string abr_ladder = "fp16,ac,ac-lo";  // tracks, most bytes first
    double abr_budget_s = 1.0;                    // for landing a prompt's KV
    double abr_initial_goodput = 125e6;           // bytes/s before the first measure
    int abr_depth = 2;  // groups in flight (2: the next is asked for while one lands)
  };
  // InvalidArgument for a bad ladder.
  static absl::StatusOr<std::unique_ptr<DecodeService>> Create(worker::WorkerRuntime* runtime,
                                                               const Options& options);

  grpc::Status Decode(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::DecodeResponse, v1::DecodeRequest>* stream) override;

 private:
  struct Landed {
    KvPages pages;  // cover prompt tokens [0, tokens)
    int tokens = 0;
    int local_cached = 0;
    int landed = 0;
    uint64_t bytes = 0;
    double ms = 0;
  };
  DecodeService(worker::WorkerRuntime* runtime, const Options& options,
                std::vector<AbrTrack> ladder);
  // Step 1; on a transfer failure returns what the own cache held (and what
  // landed before it). `keepalive` runs on this thread about every
  // kKeepalive while it waits.
  // Runs the sequence and streams its tokens until it finishes.
  grpc::Status StreamTokens(grpc::ServerContext* context,
                            grpc::ServerReaderWriter<v1::DecodeResponse, v1::DecodeRequest>* stream,
                            std::vector<int32_t> prompt, const GenerationParams& params,
                            PrefilledKv prefilled);
  Landed LandPromptKv(grpc::ServerContext* context, const v1::DecodeStart& start,
                      const std::function<void()>& keepalive);
  // Groups [first_group, end_group) of the request's prompt in one track;
  // a track cut short lands its leading whole groups (KvLanded::shortfall).
  absl::StatusOr<worker::KvLanded> LandGroups(grpc::ServerContext* context,
                                          const v1::DecodeStart& start,
                                          const kvcache::KvCompression& compression,
                                          int first_group, int end_group,
                                          const std::function<void()>& keepalive);
  // Groups [first_group, end_group) in the request's track (its name:
  // `track`), handing what lands to `add`: a landing cut short or failed by
  // a lost session is asked once more for the groups still missing.
  void LandTrack(grpc::ServerContext* context, const v1::DecodeStart& start,
                 const std::string& track, int first_group, int end_group,
                 const std::function<void()>& keepalive,
                 const std::function<void(worker::KvLanded)>& add);
  // Groups [first_group, end_group), each in the track the planner picks,
  // handing each to `add`; stops at the first failure or when time is up.
  void LandAdaptively(grpc::ServerContext* context, const v1::DecodeStart& start,
                      int first_group, int end_group, const std::function<void()>& keepalive,
                      const std::function<void(worker::KvLanded)>& add);

  worker::WorkerRuntime* const rt_;
  const Options options_;
  SharedLandings landings_;  // one landing at a time per prompt
  const std::vector<AbrTrack> abr_ladder_;
  std::atomic<double> abr_goodput_;  // the last landing's estimate, for the next
  std::vector<services::Counter*> abr_groups_;  // per ladder track
  services::Counter* abr_switches_;
  services::Counter* abr_recomputed_groups_;
  services::Gauge* abr_goodput_gauge_;
  services::Counter* requests_ok_;
  services::Counter* requests_failed_;
  services::Counter* tokens_generated_;
  services::Counter* transfer_bytes_;
  services::Counter* transfer_failures_;
  services::Counter* local_cached_tokens_;
  services::Histogram* transfer_seconds_;
  services::Histogram* tbt_seconds_;
};

}  // namespace kvcast::decode

#endif  // KVCAST_SERVICES_DECODE_DECODE_SERVICE_H_
