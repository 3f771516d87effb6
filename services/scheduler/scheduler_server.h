// RunScheduler: a kvcast-scheduler process's servers, from its options to
// its drain: kvcast.v1.Generation and grpc.health.v1 on the public gRPC
// port, kvcast.v1.Registry for the workers (there, or on an internal port
// with its own TLS), Prometheus /metrics, and the OpenAI-compatible HTTP
// API, and the planner's metrics (planner_task.h). scheduler_main.cc only
// turns flags into SchedulerServerOptions.
#ifndef KVCAST_SERVICES_SCHEDULER_SCHEDULER_SERVER_H_
#define KVCAST_SERVICES_SCHEDULER_SCHEDULER_SERVER_H_

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "services/common/shutdown.h"
#include "services/scheduler/planner.h"
#include "services/scheduler/request.h"
#include "services/scheduler/worker_registry.h"

namespace kvcast::scheduler {

struct TlsFiles {
  std::string cert, key, ca;  // PEM paths; empty cert: plaintext
};

struct SchedulerServerOptions {
  std::string grpc_listen = "0.0.0.0:50051";
  TlsFiles grpc_tls;
  // Empty: Registry is served on grpc_listen, and the workers' TLS is grpc_tls.
  std::string internal_grpc_listen;
  TlsFiles internal_tls;
  std::string worker_tls_name;  // the name the workers' certificates carry
  std::string metrics_listen;   // empty: off
  std::string http_listen;      // empty: off
  int http_threads = 2;
  int http_work_threads = 2;
  std::string http_cert, http_key;  // HTTPS when set
  std::string api_keys_file;
  std::string moqt_auth_key_file;
  std::string model;  // the tokenizer and chat template's source; empty: token ids only
  WorkerRegistry::Options registry;  // make_channel is set by RunScheduler
  GenerationOptions generation;      // api_keys and moqt_auth are set by RunScheduler
  PlannerOptions planner;            // interval 0: no planner
  absl::Duration drain = absl::Seconds(30);
};

// InvalidArgument naming the option (as its flag) when one is out of range.
absl::Status ValidateSchedulerOptions(const SchedulerServerOptions& options);

// Serves until `shutdown` fires, then drains (open HTTP streams are
// cancelled; gRPC calls get `drain` to finish). Errors: invalid options, a
// file that cannot be read, a port that cannot be bound.
absl::Status RunScheduler(SchedulerServerOptions options, services::ShutdownSignal* shutdown);

}  // namespace kvcast::scheduler

#endif  // KVCAST_SERVICES_SCHEDULER_SCHEDULER_SERVER_H_
