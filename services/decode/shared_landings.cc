// SharedLandings: see shared_landings.h.
#include "services/decode/shared_landings.h"

#include <algorithm>

namespace kvcast::decode {

SharedLandings::Turn::~Turn() {
  if (owner_ != nullptr) owner_->Give(key_);
}

absl::StatusOr<SharedLandings::Turn> SharedLandings::Take(const Hash128& key,
                                                          services::CallWait* wait,
                                                          absl::Duration interval,
                                                          const std::function<void()>& tick) {
  {
    absl::MutexLock lock(&mu_);
    auto [it, fresh] = held_.try_emplace(key);
    if (fresh) return Turn(this, key, /*waited=*/false);
    it->second.push_back(wait);
  }
  for (;;) {
    const services::CallWait::Woke woke = wait->Wait(absl::Now() + interval);
    {
      absl::MutexLock lock(&mu_);
      if (handed_.erase(wait) > 0) return Turn(this, key, /*waited=*/true);
      if (woke == services::CallWait::kCancelled) {
        auto& waiters = held_[key];
        waiters.erase(std::remove(waiters.begin(), waiters.end(), wait), waiters.end());
        return absl::CancelledError("the call was cancelled while another landed its prompt");
      }
    }
    if (tick) tick();
  }
}

void SharedLandings::Give(const Hash128& key) {
  services::CallWait* next = nullptr;
  {
    absl::MutexLock lock(&mu_);
    auto it = held_.find(key);
    if (it == held_.end()) return;
    if (it->second.empty()) {
      held_.erase(it);
      return;
    }
    // The key stays held: the first waiter has it now.
    next = it->second.front();
    it->second.erase(it->second.begin());
    handed_[next] = key;
  }
  next->Notify();
}

int SharedLandings::held() const {
  absl::MutexLock lock(&mu_);
  return int(held_.size());
}

}  // namespace kvcast::decode
