// Admission: whether a request may start, as a ticket that gives its place
// back when destroyed. A request is admitted by its tenant's limits first
// (tenant_limits.h) and then by the scheduler's bound on requests in flight
// (--max_queue): a request its tenant refuses never holds a queue slot, not
// even briefly, so a flooding tenant cannot crowd the others out.
//
//   Admission::Refusal why;
//   absl::StatusOr<Admission::Ticket> ticket = admission.Admit(tenant, tokens, &why);
//   if (!ticket.ok()) return ...;   // RESOURCE_EXHAUSTED, `why` says which limit
//   ... the request runs; its ticket is released when it goes out of scope.
//
// Thread safety: every method may be called from any thread.
#ifndef KVCAST_SERVICES_SCHEDULER_ADMISSION_H_
#define KVCAST_SERVICES_SCHEDULER_ADMISSION_H_

#include <atomic>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "services/scheduler/tenant_limits.h"

namespace kvcast::scheduler {

class Admission {
 public:
  Admission(int max_queue, TenantLimitOptions tenant_limits);

  // A request's place: its tenant's count and a queue slot, released once
  // by the destructor. Move-only.
  class Ticket {
   public:
    Ticket(Ticket&& other) noexcept;
    Ticket& operator=(Ticket&&) = delete;
    Ticket(const Ticket&) = delete;
    ~Ticket();

   private:
    friend class Admission;
    Ticket(Admission* admission, std::string tenant)
        : admission_(admission), tenant_(std::move(tenant)) {}
    Admission* admission_;  // null once moved from
    std::string tenant_;
  };

  struct Refusal {
    bool by_tenant = false;      // the tenant's limit (else --max_queue)
    absl::Duration retry_after;  // when it could pass
  };
  // A ticket, or RESOURCE_EXHAUSTED naming the limit with `*refusal` set.
  absl::StatusOr<Ticket> Admit(const std::string& tenant, int prompt_tokens, Refusal* refusal);

  // Requests admitted and not finished.
  int in_flight() const { return in_flight_.load(); }

 private:
  const int max_queue_;
  TenantLimits tenants_;
  std::atomic<int> in_flight_{0};
};

}  // namespace kvcast::scheduler

#endif  // KVCAST_SERVICES_SCHEDULER_ADMISSION_H_
