// Per-tenant admission limits of the scheduler: requests in flight, and
// prompt tokens per minute (a token bucket holding one minute's worth,
// refilled continuously). A tenant over a limit is refused with
// RESOURCE_EXHAUSTED and a retry-after, without taking room from other
// tenants: one tenant's flood cannot starve another's requests. No tenant
// ("") is a tenant like the others. A zero limit is off.
//
// A prompt larger than a minute's budget is admitted when the bucket is
// full (it then owes the difference), so no request is refused for ever.
//
// Thread safety: all methods may be called concurrently.
#ifndef KVCAST_SERVICES_SCHEDULER_TENANT_LIMITS_H_
#define KVCAST_SERVICES_SCHEDULER_TENANT_LIMITS_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace kvcast::scheduler {

struct TenantLimitOptions {
  int max_in_flight = 0;                  // per tenant; 0: no limit
  int64_t prompt_tokens_per_minute = 0;   // per tenant; 0: no limit
};

class TenantLimits {
 public:
  explicit TenantLimits(TenantLimitOptions options,
                        std::function<absl::Time()> now = [] { return absl::Now(); });

  // Counts a request of `tenant` with `prompt_tokens` as in flight, or
  // refuses it: RESOURCE_EXHAUSTED naming the limit, `*retry_after` set to
  // when it could pass. Each OK needs one Release.
  absl::Status Admit(const std::string& tenant, int prompt_tokens, absl::Duration* retry_after);
  void Release(const std::string& tenant);

  bool enabled() const { return options_.max_in_flight > 0 || options_.prompt_tokens_per_minute > 0; }

 private:
  struct State {
    int in_flight = 0;
    double tokens = 0;  // bucket level; may go negative (a large prompt's debt)
    absl::Time refilled;
  };
  void Refill(State* s, absl::Time now) const;

  const TenantLimitOptions options_;
  const std::function<absl::Time()> now_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, State> tenants_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvcast::scheduler

#endif  // KVCAST_SERVICES_SCHEDULER_TENANT_LIMITS_H_
