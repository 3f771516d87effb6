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
// on. Cancelling the stream cancels the sequence; pages are freed on every
// path (the engine and the lander own them in turn).
#ifndef KVCAST_SERVICES_DECODE_DECODE_SERVICE_H_
#define KVCAST_SERVICES_DECODE_DECODE_SERVICE_H_

#include <vector>

#include "kvcast/v1/worker.grpc.pb.h"
#include "services/common/metrics.h"
#include "services/worker/worker_runtime.h"

namespace kvcast::decode {

class DecodeService final : public v1::Decode::Service {
 public:
  explicit DecodeService(worker::WorkerRuntime* runtime);

  grpc::Status Decode(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::DecodeResponse, v1::DecodeRequest>* stream) override;

 private:
  struct Landed {
    std::vector<int32_t> pages;  // cover prompt tokens [0, tokens)
    int tokens = 0;
    int local_cached = 0;
    int landed = 0;
    uint64_t bytes = 0;
    double ms = 0;
  };
  // Step 1; on a transfer failure returns what the own cache held.
  // `keepalive` runs on this thread about every kKeepalive while it waits.
  Landed LandPromptKv(grpc::ServerContext* context, const v1::DecodeStart& start,
                      const std::function<void()>& keepalive);

  worker::WorkerRuntime* const rt_;
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
