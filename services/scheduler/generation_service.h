// kvcast.v1.Generation on the scheduler: the service around RequestRun
// (request.h, where a request's states are). It resolves a call's API key
// to its tenant, names the request, runs it, counts its result, and owns
// what every request shares: admission (admission.h), the stall watchdog,
// the response_format cache and the scheduler's metrics.
#ifndef KVCAST_SERVICES_SCHEDULER_GENERATION_SERVICE_H_
#define KVCAST_SERVICES_SCHEDULER_GENERATION_SERVICE_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "engine/grammar/grammar_cache.h"
#include "engine/tokenizer/tokenizer.h"
#include "kvcast/v1/generation.grpc.pb.h"
#include "services/common/api_keys.h"
#include "services/common/metrics.h"
#include "services/scheduler/admission.h"
#include "services/scheduler/request.h"
#include "services/scheduler/stall_watchdog.h"
#include "services/scheduler/worker_registry.h"

namespace kvcast::scheduler {

class GenerationService final : public v1::Generation::Service {
 public:
  // `registry` and `metrics` are borrowed; `tokenizer` may be null (then
  // only token-id prompts are accepted and deltas carry no text).
  GenerationService(WorkerRegistry* registry, std::unique_ptr<Tokenizer> tokenizer,
                    services::MetricsRegistry* metrics, GenerationOptions options);

  grpc::Status Generate(grpc::ServerContext* context, const v1::GenerateRequest* request,
                        grpc::ServerWriter<v1::GenerateResponse>* writer) override;
  grpc::Status GenerateUnary(grpc::ServerContext* context, const v1::GenerateRequest* request,
                             v1::GenerateResult* result) override;

 private:
  grpc::Status Run(grpc::ServerContext* context, const v1::GenerateRequest& request,
                   const RequestRun::Emit& emit);

  WorkerRegistry* const registry_;
  const std::unique_ptr<Tokenizer> tokenizer_;
  const GenerationOptions options_;
  Admission admission_;
  // response_formats checked (compiled) once per schema, not per request.
  GrammarCache grammars_;
  std::atomic<uint64_t> next_request_{1};
  StallWatchdog watchdog_;
  SchedulerMetrics m_;
};

}  // namespace kvcast::scheduler

#endif  // KVCAST_SERVICES_SCHEDULER_GENERATION_SERVICE_H_
