// LandKv: see land_kv.h.
#include "services/worker/land_kv.h"

#include <algorithm>
#include <memory>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"

namespace kvcast::worker {

absl::StatusOr<KvLanded> LandKv(WorkerRuntime* rt, const KvRequest& r,
                                const std::function<bool()>& cancelled,
                                const std::function<void()>& tick) {
  Engine& engine = rt->engine();
  const int page_tokens = engine.pool().layout().page_tokens;
  const int tokens =
      std::min(r.end_group * r.chunk_tokens, r.num_tokens) - r.first_group * r.chunk_tokens;
  ASSIGN_OR_RETURN(std::vector<int32_t> fresh,
                   engine.pool().Allocate((tokens + page_tokens - 1) / page_tokens));
  struct State {
    absl::Notification done;
    absl::StatusOr<std::vector<int32_t>> result = absl::UnknownError("pending");
    std::shared_ptr<KvLanding> landing;
  };
  auto state = std::make_shared<State>();
  rt->RunSync([&] {
    auto session = rt->SessionFor(r.address);
    if (!session.ok()) {
      engine.pool().ReleaseAll(fresh).IgnoreError();
      state->result = session.status();
      state->done.Notify();
      return;
    }
    auto landing = KvLanding::Start(
        *session, &engine.pool(), engine.backend(), engine.model().fingerprint(), r.track,
        kvcache::LandingSpec{r.chunk_tokens, r.num_tokens, r.first_group, r.end_group, fresh},
        r.mode, r.auth_token, [state](absl::StatusOr<std::vector<int32_t>> result) {
          state->result = std::move(result);
          state->done.Notify();
        });
    if (landing.ok()) {
      state->landing = *landing;
    } else {
      state->result = landing.status();
      state->done.Notify();
    }
  });
  while (!state->done.WaitForNotificationWithTimeout(absl::Milliseconds(20))) {
    if (tick) tick();
    if (cancelled()) {
      rt->RunSync([&] {
        if (state->landing) state->landing->Abort(absl::CancelledError("request cancelled"));
      });
    }
  }
  KvLanded out;
  rt->RunSync([&] {
    out.done = absl::Now();
    if (state->landing) {
      out.bytes = state->landing->bytes_landed();
      out.first_object = state->landing->first_object_at();
    }
    state->landing.reset();  // ends the request at the publisher
  });
  if (!state->result.ok()) return state->result.status();
  out.pages = *std::move(state->result);
  out.tokens = tokens;
  return out;
}

}  // namespace kvcast::worker
