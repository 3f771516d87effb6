#include "services/scheduler/admission.h"

#include "absl/strings/str_cat.h"

namespace kvcast::scheduler {

Admission::Admission(int max_queue, TenantLimitOptions tenant_limits)
    : max_queue_(max_queue), tenants_(tenant_limits) {}

Admission::Ticket::Ticket(Ticket&& other) noexcept
    : admission_(other.admission_), tenant_(std::move(other.tenant_)) {
  other.admission_ = nullptr;
}

Admission::Ticket::~Ticket() {
  if (admission_ == nullptr) return;
  admission_->in_flight_.fetch_sub(1);
  admission_->tenants_.Release(tenant_);
}

absl::StatusOr<Admission::Ticket> Admission::Admit(const std::string& tenant, int prompt_tokens,
                                                   Refusal* refusal) {
  if (absl::Status s = tenants_.Admit(tenant, prompt_tokens, &refusal->retry_after); !s.ok()) {
    refusal->by_tenant = true;
    return s;
  }
  if (in_flight_.fetch_add(1) >= max_queue_) {
    in_flight_.fetch_sub(1);
    tenants_.Release(tenant);
    refusal->by_tenant = false;
    refusal->retry_after = absl::Seconds(1);
    return absl::ResourceExhaustedError(absl::StrCat(
        "the scheduler has ", max_queue_, " requests in flight (--max_queue); retry later"));
  }
  return Ticket(this, tenant);
}

}  // namespace kvcast::scheduler
