// A real worker runtime for the worker services' unit tests: the tiny
// model on the cpu-f32 backend, gRPC, metrics and MoQT on loopback ports
// (development certificates, no scheduler, no MoQT authorization), with a
// client channel to its gRPC port once served.
#ifndef KVCAST_SERVICES_WORKER_TESTING_TEST_WORKER_H_
#define KVCAST_SERVICES_WORKER_TESTING_TEST_WORKER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "services/worker/worker_runtime.h"
#include "tools/cluster/metrics_scrape.h"

namespace kvcast::worker::testing {

// The runtime of a `role` worker whose files (certificates) go in `dir`.
absl::StatusOr<std::unique_ptr<WorkerRuntime>> StartTestWorker(v1::WorkerRole role,
                                                               const std::string& dir);

// A channel to the served runtime's gRPC port.
std::shared_ptr<grpc::Channel> ChannelTo(const WorkerRuntime& rt);

// The value of metric `name` (the series with `labels`) in the runtime's
// registry; -1 when absent.
double MetricOf(WorkerRuntime& rt, const std::string& name, const cluster::Labels& labels = {});

}  // namespace kvcast::worker::testing

#endif  // KVCAST_SERVICES_WORKER_TESTING_TEST_WORKER_H_
