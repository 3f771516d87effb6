// kvcast.v1.Prefill on a prefill worker: computes a prompt's KV (reusing
// its own prefix cache, or a prefix fetched over MoQT when the scheduler
// names one), publishes every chunk the moment its forward pass is done
// (the decode worker is already subscribed, so transfer overlaps compute),
// and answers with the first token. While it works it streams progress (the
// prompt tokens whose KV is in place, after every chunk, and a keepalive at
// most every 250 ms while the model computes or KV lands), so the scheduler
// bounds silence, not the length of the prompt. Published prompts stay
// fetchable for `retain` (later requests reuse them), then their pages are
// released; sooner, oldest first, when a new prompt needs their pages (the
// relay caches them, and a lost one is computed again).
#ifndef KVCAST_SERVICES_PREFILL_PREFILL_SERVICE_H_
#define KVCAST_SERVICES_PREFILL_PREFILL_SERVICE_H_

#include <deque>
#include <memory>

#include "kvcast/v1/worker.grpc.pb.h"
#include "services/common/call_wait.h"
#include "services/common/metrics.h"
#include "services/worker/kv_landed.h"
#include "services/worker/worker_runtime.h"
#include "transport/kvcache/publisher.h"

namespace kvcast::prefill {

class PrefillService final : public v1::Prefill::Service {
 public:
  // `runtime` is borrowed and outlives the service.
  PrefillService(worker::WorkerRuntime* runtime, absl::Duration retain);
  ~PrefillService() override;

  // Serves MoQT requests for the published prompts (give to Serve()).
  moqt::RequestHandler* moqt_handler();

  grpc::Status Prefill(grpc::ServerContext* context, const v1::PrefillRequest* request,
                       grpc::ServerWriter<v1::PrefillReply>* writer) override;

 private:
  class Publisher;
  class Progress;
  class Publication;
  grpc::Status Compute(grpc::ServerContext* context, const v1::PrefillRequest& request,
                       Progress* progress, v1::PrefillResponse* response);
  // The published prefix the scheduler named (request.reuse), beyond what
  // this worker holds: fetched and prepended to what it holds. Empty when
  // there is none, all is held, or the fetch failed (then computed).
  PrefilledKv ReusePrefix(grpc::ServerContext* context, const v1::PrefillRequest& request,
                          absl::Span<const int32_t> tokens, Progress* progress,
                          int* fetched_tokens);
  // Runs the prompt on the compute thread to its first token, writing
  // progress meanwhile and cancelling it with the call.
  absl::StatusOr<SequenceEvent> FirstToken(grpc::ServerContext* context,
                                           std::vector<int32_t> tokens,
                                           const GenerationParams& params, PrefilledKv kv,
                                           Progress* progress, services::CallWait* wait);
  // Fetches groups [own_chunks, source.groups()) of `source`; returns
  // `own_pages` (held chunks) followed by the fetched ones: all of them, or
  // the leading whole groups of a fetch cut short (`tokens`: the fetched
  // ones; `shortfall`: why the rest did not come).
  absl::StatusOr<worker::KvLanded> FetchPrefix(grpc::ServerContext* context,
                                               const v1::KvSource& source, KvPages own_pages,
                                               int own_chunks, Progress* progress);

  // Drops retained prompts, oldest first, until `pages` pages are free or
  // none is retained (loop thread).
  void MakeRoom(int pages);

  worker::WorkerRuntime* const rt_;
  const absl::Duration retain_;
  std::unique_ptr<Publisher> publisher_;  // loop thread
  std::deque<std::string> retained_;      // ended prompts kept, oldest first (loop thread)
  services::Counter* requests_ok_;
  services::Counter* requests_failed_;
  services::Counter* tokens_computed_;
  services::Counter* tokens_cached_;
  services::Counter* tokens_fetched_;
  services::Counter* fetch_failures_;
  services::Histogram* prefill_seconds_;
};

}  // namespace kvcast::prefill

#endif  // KVCAST_SERVICES_PREFILL_PREFILL_SERVICE_H_
