// LandKv: see land_kv.h.
#include "services/worker/land_kv.h"

#include <algorithm>
#include <atomic>
#include <memory>

#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "services/common/call_wait.h"

namespace kvcast::worker {
namespace {

// How often a waiting landing calls `tick` (the callers' keepalives).
constexpr absl::Duration kTick = absl::Milliseconds(250);
// How long a landing waits for pages when the pool is short of them.
constexpr absl::Duration kPageWait = absl::Seconds(2);

// The landing's pages: a pool short of them gets kPageWait for other
// requests to give theirs back (e.g. a retried request's earlier attempt
// on this worker, which is ending), ticking, unless cancelled.
absl::StatusOr<KvPages> AllocatePages(KvPagePool* pool, int n,
                                      const std::function<bool()>& cancelled,
                                      const std::function<void()>& tick) {
  const absl::Time give_up = absl::Now() + kPageWait;
  for (;;) {
    absl::StatusOr<KvPages> pages = pool->AllocateBy(n, std::min(give_up, absl::Now() + kTick));
    if (pages.ok() || !absl::IsResourceExhausted(pages.status()) || n > pool->num_pages() ||
        absl::Now() >= give_up || (cancelled && cancelled())) {
      return pages;
    }
    if (tick) tick();
  }
}

}  // namespace

KvLandingTarget TargetOf(WorkerRuntime* rt) {
  Engine& engine = rt->engine();
  return {[rt](std::function<void()> fn) { rt->RunSync(std::move(fn)); },
          [rt](const std::string& address) { return rt->SessionFor(address); }, &engine.pool(),
          engine.backend(), engine.model().fingerprint(), rt->ac_thread(), rt->xl_codec()};
}

absl::StatusOr<KvLanded> LandKv(const KvLandingTarget& t, const KvRequest& r,
                                const std::function<bool()>& cancelled,
                                const std::function<void()>& tick) {
  const int page_tokens = t.pool->layout().page_tokens;
  const int tokens =
      std::min(r.end_group * r.chunk_tokens, r.num_tokens) - r.first_group * r.chunk_tokens;
  ASSIGN_OR_RETURN(KvPages fresh, AllocatePages(t.pool, (tokens + page_tokens - 1) / page_tokens,
                                                cancelled, tick));
  // Shared with the loop thread, which may hold it last.
  struct State {
    explicit State(std::function<bool()> cancelled) : wait(std::move(cancelled)) {}
    services::CallWait wait;
    std::atomic<bool> done{false};
    absl::StatusOr<KvPages> result = absl::UnknownError("pending");
    std::shared_ptr<KvLanding> landing;
    void Finish(absl::StatusOr<KvPages> r) {
      result = std::move(r);
      done = true;
      wait.Notify();
    }
  };
  auto state = std::make_shared<State>(cancelled);
  t.run_on_loop([&] {
    auto session = t.session_for(r.address);
    if (!session.ok()) {  // `fresh` is released on return
      state->Finish(session.status());
      return;
    }
    kvcache::LandingSpec spec{r.chunk_tokens, r.num_tokens, r.first_group, r.end_group,
                              std::move(fresh), t.ac_thread, r.keep_whole_groups};
    spec.xl = t.xl;
    auto landing = KvLanding::Start(
        *session, t.pool, t.backend, t.fingerprint, r.track, std::move(spec),
        r.mode, r.auth_token,
        [state](absl::StatusOr<KvPages> result) { state->Finish(std::move(result)); });
    if (landing.ok()) {
      state->landing = *landing;
    } else {
      state->Finish(landing.status());
    }
  });
  while (!state->done) {
    if (state->wait.Wait(absl::Now() + kTick) == services::CallWait::kCancelled) {
      t.run_on_loop([&] {
        if (state->landing) state->landing->Abort(absl::CancelledError("request cancelled"));
      });
    }
    if (tick && !state->done) tick();
  }
  KvLanded out;
  t.run_on_loop([&] {
    out.done = absl::Now();
    if (state->landing) {
      out.bytes = state->landing->bytes_landed();
      out.first_object = state->landing->first_object_at();
      out.shortfall = state->landing->shortfall();
    }
    state->landing.reset();  // ends the request at the publisher
  });
  if (!state->result.ok()) return state->result.status();
  out.pages = *std::move(state->result);
  out.tokens = out.shortfall.ok() ? tokens : out.pages.size() * page_tokens;
  return out;
}

}  // namespace kvcast::worker
