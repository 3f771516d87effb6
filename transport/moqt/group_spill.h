// GroupSpill: the relay cache's disk tier. Complete groups the in-memory
// TrackCache evicts are written here, one file per group, within a byte
// budget (oldest first out), and read back when a subscriber or fetch asks
// for them again. The directory outlives the relay: a restarted relay
// reopens it and serves what is there.
//
// File (little-endian): "KVRGRP01", u64 XXH3-64 of the rest, the track
// (u32 namespace elements, each u32 length + bytes; u32 length + name), u64
// group, u8 flags (1: the group ends the track), u32 objects; per object
// u64 subgroup, u64 object, u8 publisher priority, u8 status, u32
// extensions (each u64 type, u64 integer, u32 length + bytes), u64 payload
// length + payload. Written to NAME.tmp and renamed. Open deletes files
// that are truncated, fail their checksum or are not this format.
//
// The files are kept by a WriteBehindStore (common/write_behind_store.h):
// writes run on a thread of their own, so the relay's loop never waits for
// the disk; a group queued for writing is read back from memory.
//
// Thread safety: all methods may be called from any thread.
#ifndef KVCAST_TRANSPORT_MOQT_GROUP_SPILL_H_
#define KVCAST_TRANSPORT_MOQT_GROUP_SPILL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/write_behind_store.h"
#include "transport/moqt/messages.h"

namespace kvcast::moqt {

struct SpilledObject {
  ObjectHeader header;  // header.group is the group's
  std::string payload;
};

class GroupSpill {
 public:
  static absl::StatusOr<std::unique_ptr<GroupSpill>> Open(const std::string& dir,
                                                         uint64_t budget_bytes);
  ~GroupSpill() = default;  // the store finishes the queued writes

  // Stores a complete group (replacing one already there).
  void Put(const FullTrackName& track, uint64_t group, std::vector<SpilledObject> objects,
           bool ends_track);
  // The group's objects, removed from the spill (the caller caches them
  // again); nullopt when absent or unreadable (the file is then deleted).
  std::optional<std::vector<SpilledObject>> Take(const FullTrackName& track, uint64_t group);

  struct Entry {
    FullTrackName track;
    uint64_t group = 0;
    uint64_t last_object = 0;
    bool ends_track = false;
  };
  // Every group held, oldest first (what a reopened spill found, then puts).
  std::vector<Entry> Entries() const;

  struct Stats {
    uint64_t bytes = 0, groups = 0, writes = 0, reads = 0, evictions = 0, rejected = 0;
  };
  Stats stats() const;
  // Blocks until every queued write is on disk (tests).
  void WaitForWrites() { store_->WaitForWrites(); }

 private:
  explicit GroupSpill(std::unique_ptr<WriteBehindStore> store) : store_(std::move(store)) {}

  std::unique_ptr<WriteBehindStore> store_;
  mutable absl::Mutex mu_;
  // What each held file is, by its store key (a key the store dropped by
  // itself, for a failed write, is ignored: Entries lists the store's keys).
  absl::flat_hash_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  uint64_t reads_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kvcast::moqt

#endif  // KVCAST_TRANSPORT_MOQT_GROUP_SPILL_H_
