// LandKv: a gRPC handler thread lands KV over MoQT and waits for it. The
// landing (KvLanding) runs on the runtime's loop thread over the session
// SessionFor picks for the publisher's address (the relay while it is up,
// else the publisher's own port); this thread waits, calling `tick` about
// every 20 ms (keepalives) and aborting the landing once `cancelled()`.
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
#include "services/worker/kv_landing.h"
#include "services/worker/worker_runtime.h"

namespace kvcast::worker {

struct KvLanded {
  std::vector<int32_t> pages;  // the groups' tokens, first at slot 0 of pages[0]
  int tokens = 0;
  uint64_t bytes = 0;
  absl::Time first_object = absl::InfiniteFuture();  // arrived
  absl::Time done = absl::InfinitePast();            // the last one landed
};

struct KvRequest {
  std::string address;  // the publisher's MoQT endpoint (KvSource.moqt_address)
  moqt::FullTrackName track;
  std::string auth_token;
  int chunk_tokens = 0;
  int num_tokens = 0;  // of the whole sequence
  int first_group = 0;
  int end_group = 0;
  KvLanding::Mode mode = KvLanding::Mode::kSubscribe;
};

// Allocates the pages of groups [first_group, end_group) and lands them.
// Errors: the pool's, the session's, the landing's (pages released).
absl::StatusOr<KvLanded> LandKv(WorkerRuntime* rt, const KvRequest& request,
                                const std::function<bool()>& cancelled,
                                const std::function<void()>& tick);

}  // namespace kvcast::worker

#endif  // KVCAST_SERVICES_WORKER_LAND_KV_H_
