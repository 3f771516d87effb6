// LandKv: a gRPC handler thread (or a tool) lands KV over MoQT and waits
// for it. The landing (KvLanding) runs on the sessions' loop thread over
// the session picked for the publisher's address (a worker's SessionFor:
// the relay while it is up, else the publisher's own port); this thread
// sleeps until it ends (services::CallWait), calling `tick` every 250 ms
// (keepalives) and aborting the landing once `cancelled()`, which is
// asked from CallWait's watcher thread.
//
// Thread safety: call from any thread but the runtime's loop thread.
#ifndef KVCAST_SERVICES_WORKER_LAND_KV_H_
#define KVCAST_SERVICES_WORKER_LAND_KV_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "services/worker/kv_landed.h"
#include "services/worker/kv_landing.h"
#include "services/worker/worker_runtime.h"

namespace kvcast::worker {


struct KvRequest {
  std::string address;  // the publisher's MoQT endpoint (KvSource.moqt_address)
  moqt::FullTrackName track;
  std::string auth_token;
  int chunk_tokens = 0;
  int num_tokens = 0;  // of the whole sequence
  int first_group = 0;
  int end_group = 0;
  KvLanding::Mode mode = KvLanding::Mode::kSubscribe;
  // A track cut short still lands its leading whole groups (KvLanded::shortfall).
  bool keep_whole_groups = false;
};

// Where KV lands and how to reach its publisher.
struct KvLandingTarget {
  // Runs `fn` on the sessions' loop thread and waits for it.
  std::function<void(std::function<void()>)> run_on_loop;
  // The session to ask for `address` (called on the loop thread).
  std::function<absl::StatusOr<moqt::MoqtSession*>(const std::string& address)> session_for;
  KvPagePool* pool = nullptr;
  Backend* backend = nullptr;
  Hash128 fingerprint{0, 0};  // the model's
  // Loop thread's: where ac groups decode (LandingSpec.ac_thread); null: on the loop.
  kvcache::AcCodecThread* ac_thread = nullptr;
  // Loop thread's: the xl tracks' codec (LandingSpec.xl); null: refused.
  kvcache::XlPageCodec* xl = nullptr;
};
// A worker's: its engine's pool and model, its loop, SessionFor, its ac thread.
KvLandingTarget TargetOf(WorkerRuntime* rt);

// Allocates the pages of groups [first_group, end_group) (a pool short of
// them gets up to 2 s for other requests to give theirs back) and lands
// them. Errors: the pool's, the session's, the landing's (pages released).
absl::StatusOr<KvLanded> LandKv(const KvLandingTarget& target, const KvRequest& request,
                                const std::function<bool()>& cancelled,
                                const std::function<void()>& tick);

}  // namespace kvcast::worker

#endif  // KVCAST_SERVICES_WORKER_LAND_KV_H_
