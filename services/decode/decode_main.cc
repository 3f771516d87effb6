// kvcast-decode: a decode worker (docs/services.md). Registers with the
// scheduler, lands prompts' KV from MoQT and generates with continuous
// batching.
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/synchronization/mutex.h"
#include "absl/strings/str_cat.h"
#include "services/common/log.h"
#include "services/common/shutdown.h"
#include "services/decode/decode_service.h"

ABSL_FLAG(double, drain_s, 60, "on SIGTERM: finish in-flight requests for up to this long");
ABSL_FLAG(std::string, kv_abr_ladder, "fp16,ac,ac-lo",
          "adaptive bitrate (a request's compression \"abr\"): the KV tracks to choose from, "
          "most bytes first");
ABSL_FLAG(double, kv_abr_budget_ms, 1000,
          "adaptive bitrate: time for landing a prompt's KV; groups that cannot arrive within "
          "it in the smallest track are computed here");
ABSL_FLAG(double, kv_abr_initial_mbps, 1000,
          "adaptive bitrate: the goodput (Mbit/s) assumed before the first measurement");
ABSL_FLAG(int32_t, kv_abr_depth, 2,
          "adaptive bitrate: groups in flight (2: the next group is asked for, its track "
          "chosen, while one still lands; 1: one at a time)");

namespace {
// Decode serves no MoQT requests; it only subscribes.
class NoRequests : public kvcast::moqt::RequestHandler {};
}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  // Debian's Abseil is built with its debug checks: every Mutex operation
  // would feed the deadlock detector's graph (7% of the scheduler's CPU per
  // request, docs/benchmarks.md). Tests keep it; the servers do not.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  using namespace kvcast;
  auto fail = [](const absl::Status& s) {
    std::fprintf(stderr, "kvcast-decode: %s\n", s.ToString().c_str());
    return absl::IsInvalidArgument(s) ? 2 : 1;
  };
  auto signal = services::ShutdownSignal::Create();
  if (!signal.ok()) return fail(signal.status());
  auto config = worker::WorkerConfigFromFlags(v1::WORKER_ROLE_DECODE, "0.0.0.0:50071");
  if (!config.ok()) return fail(config.status());
  auto rt = worker::WorkerRuntime::Create(*config);
  if (!rt.ok()) return fail(rt.status());
  NoRequests handler;
  decode::DecodeService::Options options;
  options.abr_ladder = absl::GetFlag(FLAGS_kv_abr_ladder);
  options.abr_budget_s = absl::GetFlag(FLAGS_kv_abr_budget_ms) / 1000;
  options.abr_initial_goodput = absl::GetFlag(FLAGS_kv_abr_initial_mbps) * 1e6 / 8;
  options.abr_depth = absl::GetFlag(FLAGS_kv_abr_depth);
  if (options.abr_depth < 1 || options.abr_depth > 8) {
    return fail(absl::InvalidArgumentError(
        absl::StrCat("--kv_abr_depth must be 1..8, got ", options.abr_depth)));
  }
  auto service = decode::DecodeService::Create(rt->get(), options);
  if (!service.ok()) {
    (*rt)->Shutdown(absl::ZeroDuration());
    return fail(service.status());
  }
  if (absl::Status s = (*rt)->Serve(&handler, {{v1::Decode::service_full_name(), service->get()}});
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
  service->reset();
  if (absl::Status s = (*rt)->CheckPagesReleased(); !s.ok()) return fail(s);
  return 0;
}
