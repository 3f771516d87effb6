// KvLanded: what a landing of KV groups produced (pages holding them, and
// when and how much arrived), as LandKv and the adaptive-bitrate driver
// pass it around.
#ifndef KVCAST_SERVICES_WORKER_KV_LANDED_H_
#define KVCAST_SERVICES_WORKER_KV_LANDED_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "engine/kv/kv_pages.h"

namespace kvcast::worker {

struct KvLanded {
  KvPages pages;  // the groups' tokens, first at slot 0 of pages[0]
  int tokens = 0;
  // OK, or why only `tokens` of the request's tokens landed (a
  // KvRequest::keep_whole_groups landing cut short: its leading whole groups).
  absl::Status shortfall;
  uint64_t bytes = 0;
  absl::Time first_object = absl::InfiniteFuture();  // arrived
  absl::Time done = absl::InfinitePast();            // the last one landed
};

}  // namespace kvcast::worker

#endif  // KVCAST_SERVICES_WORKER_KV_LANDED_H_
