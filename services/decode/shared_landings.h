// SharedLandings: one landing at a time of a prompt's KV on a decode
// worker. Requests that carry the same prompt at once (the n choices of one
// request, a burst of one system prompt) would each subscribe to its track
// and land their own copy into pages of their own; instead the first lands
// and puts the prompt's full chunks in the prefix cache, and the others
// wait for it, then take those chunks from the cache (sharing its pages:
// the sequences only write past them) and land only what is left (the last,
// partial chunk).
//
//   SharedLandings landings;
//   ... per request, keyed by the hash of the prompt's last full chunk:
//   absl::StatusOr<SharedLandings::Turn> turn = landings.Take(key, &wait, kTick, tick);
//   ... (a turn: take what the cache holds, land the rest, Insert its full chunks)
//   ... the Turn's destructor lets the next waiter of the key go
//
// Thread safety: all methods from any thread.
#ifndef KVCAST_SERVICES_DECODE_SHARED_LANDINGS_H_
#define KVCAST_SERVICES_DECODE_SHARED_LANDINGS_H_

#include <functional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/kv/prefix_hash.h"
#include "services/common/call_wait.h"

namespace kvcast::decode {

class SharedLandings {
 public:
  // The right to land a key's prompt; given back when destroyed.
  class Turn {
   public:
    Turn(Turn&& other) noexcept
        : owner_(other.owner_), key_(other.key_), waited_(other.waited_) {
      other.owner_ = nullptr;
    }
    Turn& operator=(Turn&&) = delete;
    ~Turn();
    // Whether the caller waited for another landing of the key first.
    bool waited() const { return waited_; }

   private:
    friend class SharedLandings;
    Turn(SharedLandings* owner, const Hash128& key, bool waited)
        : owner_(owner), key_(key), waited_(waited) {}
    SharedLandings* owner_;  // null once moved from
    Hash128 key_;
    bool waited_ = false;
  };

  // The turn for `key`: at once when nobody holds it, else after the
  // holder (and any waiter before this one) gives it back. While waiting it
  // runs `tick` about every `interval` (a keepalive) and gives up with
  // CANCELLED when `wait`'s call is cancelled. `wait` is the caller's own
  // (it must not be waited on elsewhere meanwhile).
  absl::StatusOr<Turn> Take(const Hash128& key, services::CallWait* wait, absl::Duration interval,
                            const std::function<void()>& tick);

  // Keys held now (tests).
  int held() const;

 private:
  void Give(const Hash128& key);

  mutable absl::Mutex mu_;
  // Held keys and, in order, who waits for each.
  absl::flat_hash_map<Hash128, std::vector<services::CallWait*>> held_ ABSL_GUARDED_BY(mu_);
  // Turns handed from a releasing holder to a waiter not yet awake.
  absl::flat_hash_map<services::CallWait*, Hash128> handed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvcast::decode

#endif  // KVCAST_SERVICES_DECODE_SHARED_LANDINGS_H_
