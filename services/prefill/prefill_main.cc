// kvcast-prefill: a prefill worker (docs/services.md). Registers with the
// scheduler, computes prompts' KV and publishes it over MoQT.
#include <cstdio>
#include <memory>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/synchronization/mutex.h"
#include "services/common/log.h"
#include "services/common/shutdown.h"
#include "services/prefill/prefill_service.h"

ABSL_FLAG(double, retain_s, 60, "keep published prompts fetchable this long");
ABSL_FLAG(double, drain_s, 20, "on SIGTERM: finish in-flight requests for up to this long");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  // Debian's Abseil is built with its debug checks: every Mutex operation
  // would feed the deadlock detector's graph (7% of the scheduler's CPU per
  // request, docs/benchmarks.md). Tests keep it; the servers do not.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  using namespace kvcast;
  auto fail = [](const absl::Status& s) {
    std::fprintf(stderr, "kvcast-prefill: %s\n", s.ToString().c_str());
    return absl::IsInvalidArgument(s) ? 2 : 1;
  };
  auto signal = services::ShutdownSignal::Create();
  if (!signal.ok()) return fail(signal.status());
  auto config = worker::WorkerConfigFromFlags(v1::WORKER_ROLE_PREFILL, "0.0.0.0:50061");
  if (!config.ok()) return fail(config.status());
  auto rt = worker::WorkerRuntime::Create(*config);
  if (!rt.ok()) return fail(rt.status());
  auto service = std::make_unique<prefill::PrefillService>(
      rt->get(), absl::Seconds(absl::GetFlag(FLAGS_retain_s)));
  if (absl::Status s = (*rt)->Serve(service->moqt_handler(),
                                          {{v1::Prefill::service_full_name(), service.get()}});
      !s.ok()) {
    (*rt)->Shutdown(absl::ZeroDuration());
    return fail(s);
  }
  services::Log().info("serving {}; gRPC :{}, MoQT :{} (UDP), metrics :{}",
                       (*rt)->model_name(), (*rt)->grpc_port(), (*rt)->moqt_port(),
                       (*rt)->metrics_port());
  (*signal)->Wait();
  services::Log().info("draining");
  (*rt)->Shutdown(absl::Seconds(absl::GetFlag(FLAGS_drain_s)));
  service.reset();  // its publisher and retained prompts give their pages back
  if (absl::Status s = (*rt)->CheckPagesReleased(); !s.ok()) return fail(s);
  return 0;
}
