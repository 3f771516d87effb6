#include "services/scheduler/tenant_limits.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace kvcast::scheduler {
namespace {

constexpr size_t kPruneAbove = 10000;  // idle tenants forgotten past this many

std::string Name(const std::string& tenant) {
  return tenant.empty() ? "the default tenant" : absl::StrCat("tenant \"", tenant, "\"");
}

}  // namespace

TenantLimits::TenantLimits(TenantLimitOptions options, std::function<absl::Time()> now)
    : options_(options), now_(std::move(now)) {}

void TenantLimits::Refill(State* s, absl::Time now) const {
  const double cap = double(options_.prompt_tokens_per_minute);
  s->tokens = std::min(cap, s->tokens + cap * absl::ToDoubleSeconds(now - s->refilled) / 60.0);
  s->refilled = now;
}

absl::Status TenantLimits::Admit(const std::string& tenant, int prompt_tokens,
                                 absl::Duration* retry_after) {
  if (!enabled()) return absl::OkStatus();
  const absl::Time now = now_();
  absl::MutexLock l(&mu_);
  if (tenants_.size() > kPruneAbove) {
    const double cap = double(options_.prompt_tokens_per_minute);
    for (auto it = tenants_.begin(); it != tenants_.end();) {
      Refill(&it->second, now);
      if (it->second.in_flight == 0 && it->second.tokens >= cap) {
        tenants_.erase(it++);
      } else {
        ++it;
      }
    }
  }
  auto [it, fresh] = tenants_.try_emplace(tenant);
  State& s = it->second;
  if (fresh) {
    s.tokens = double(options_.prompt_tokens_per_minute);
    s.refilled = now;
  }
  if (options_.max_in_flight > 0 && s.in_flight >= options_.max_in_flight) {
    *retry_after = absl::Seconds(1);
    return absl::ResourceExhaustedError(
        absl::StrCat(Name(tenant), " has ", s.in_flight,
                     " requests in flight, its limit (--tenant_max_in_flight); retry later"));
  }
  if (options_.prompt_tokens_per_minute > 0) {
    Refill(&s, now);
    const double cap = double(options_.prompt_tokens_per_minute);
    if (s.tokens < prompt_tokens && s.tokens < cap) {
      const double need = std::min<double>(prompt_tokens, cap) - s.tokens;
      *retry_after = absl::Seconds(std::ceil(need * 60.0 / cap));
      return absl::ResourceExhaustedError(absl::StrCat(
          Name(tenant), " is over its ", options_.prompt_tokens_per_minute,
          " prompt tokens per minute (--tenant_prompt_tokens_per_minute); retry in ",
          absl::FormatDuration(*retry_after)));
    }
    s.tokens -= prompt_tokens;
  }
  ++s.in_flight;
  return absl::OkStatus();
}

void TenantLimits::Release(const std::string& tenant) {
  if (!enabled()) return;
  absl::MutexLock l(&mu_);
  auto it = tenants_.find(tenant);
  if (it != tenants_.end() && it->second.in_flight > 0) --it->second.in_flight;
}

}  // namespace kvcast::scheduler
