// TrackCache: objects of many tracks kept in memory within a byte budget,
// keyed by (full track name, group, object), evicted least recently used
// group first.
//
// A cached object never changes: inserting the same key again with a
// different payload is refused (kConflict) and the track is marked
// malformed, as draft-14 requires of relays.
//
// Payloads are shared (quic::SharedBytes): a relay's streams send them
// from the cache's memory, and an evicted payload that a stream still
// holds lives until the stream lets go. An evicted object's memory (from
// kMinSpare bytes) that no stream holds is kept as a spare buffer for the
// next insert, while the cache is within its budget with the spares
// counted: a full cache reuses memory instead of asking the system for
// pages that must be cleared first. A full cache with no spare of the size
// evicts before it inserts, so that the insert reuses what went; the
// budget charges such payloads the capacity of their buffers.
//
// With a spill (group_spill.h), an evicted group that is complete goes to
// disk instead of away, and comes back into memory when a lookup reaches
// it; a spill opened on an earlier run's directory serves its groups.
//
// Thread safety: none (one loop thread).
#ifndef KVCAST_TRANSPORT_MOQT_TRACK_CACHE_H_
#define KVCAST_TRANSPORT_MOQT_TRACK_CACHE_H_

#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "transport/moqt/group_spill.h"
#include "transport/moqt/messages.h"
#include "transport/quic/shared_bytes.h"

namespace kvcast::moqt {

class TrackCache {
 public:
  explicit TrackCache(uint64_t budget_bytes) : budget_(budget_bytes) {}
  // `spill` is borrowed (null: none); set before use. Learns the tracks and
  // groups the spill already holds.
  void SetSpill(GroupSpill* spill);
  GroupSpill* spill() const { return spill_; }

  enum class InsertResult { kInserted, kDuplicate, kConflict, kTooLarge };
  // Stores one object. An kEndOfGroup status completes its group; kEndOfTrack
  // ends the track there. May evict other groups to stay within the budget
  // (never the group being written). On kInserted, `*stored` (if given)
  // is the cache's copy of the payload.
  InsertResult Insert(const FullTrackName& track, const ObjectHeader& header,
                      absl::Span<const uint8_t> payload, quic::SharedBytes* stored = nullptr);
  // Marks groups [first, last] complete: every object of them that exists is
  // cached (e.g. after a fetch of that range finished).
  void MarkComplete(const FullTrackName& track, uint64_t first_group, uint64_t last_group);
  // The track ends after `last` (PUBLISH_DONE "track ended").
  void MarkEnded(const FullTrackName& track, std::optional<Location> last);

  bool Has(const FullTrackName& track) const;
  std::optional<Location> Largest(const FullTrackName& track) const;
  // Location of the end of track, if known.
  std::optional<Location> EndOfTrack(const FullTrackName& track) const;
  bool malformed(const FullTrackName& track) const;
  // True if every object in [start, end] (inclusive, by location) that
  // exists is cached: all groups in range complete, or past the end of track.
  // Brings spilled groups of the range back into memory.
  bool Covers(const FullTrackName& track, Location start, Location end);
  // Calls `fn` for cached objects in [start, end] in ascending order and
  // refreshes their groups in the LRU. `fn` must not modify the cache.
  void ForEach(const FullTrackName& track, Location start, Location end,
               const std::function<void(const ObjectHeader&, const quic::SharedBytes&)>& fn);

  uint64_t bytes() const { return bytes_; }  // cached objects (payloads and headers)
  uint64_t spare_bytes() const { return spare_bytes_; }  // spare buffers, within the budget too
  uint64_t budget() const { return budget_; }
  uint64_t evicted_groups() const { return evicted_groups_; }
  size_t num_tracks() const { return tracks_.size(); }

 private:
  struct Object {
    ObjectHeader header;
    std::shared_ptr<std::string> payload;  // never null
  };
  struct Group {
    std::map<uint64_t, Object> objects;
    bool complete = false;
    uint64_t bytes = 0;
    std::list<std::pair<FullTrackName, uint64_t>>::iterator lru;
  };
  struct Track {
    std::map<uint64_t, Group> groups;
    std::set<uint64_t> spilled;  // complete groups in the spill, not in memory
    std::optional<Location> largest;
    std::optional<Location> end;  // end of track
    bool malformed = false;
  };
  // Smallest payload buffer worth keeping for reuse.
  static constexpr size_t kMinSpare = 4096;
  // Bytes charged to the budget: the payload plus a fixed header estimate.
  static uint64_t Cost(size_t payload) { return payload + 64; }
  // What a cached payload is charged: from kMinSpare bytes, the capacity of
  // the buffer holding it (the memory held).
  static uint64_t Charge(const std::string& held) {
    return Cost(held.size() >= kMinSpare ? held.capacity() : held.size());
  }
  void Touch(Group& group);
  // Frees spares, then evicts least recently used groups other than the
  // kept one, until the objects and the spares fit the budget with
  // `incoming` bytes more.
  void EvictFor(const FullTrackName& keep_track, uint64_t keep_group, uint64_t incoming = 0);
  // An evicted object's payload: its memory becomes a spare unless a
  // stream still holds it.
  void Recycle(std::shared_ptr<std::string> payload);
  // A spare buffer of `size` to 2 `size` bytes' capacity, or an empty string.
  std::string TakeSpare(size_t size);
  // Moves the track's spilled groups in [first, last] back into memory.
  void Restore(const FullTrackName& name, Track& track, uint64_t first, uint64_t last);

  uint64_t budget_;
  GroupSpill* spill_ = nullptr;
  uint64_t bytes_ = 0;
  uint64_t evicted_groups_ = 0;
  std::vector<std::string> spare_;  // evicted payloads' memory, for reuse
  uint64_t spare_bytes_ = 0;        // their capacity
  std::map<FullTrackName, Track> tracks_;
  // Least recently used group first.
  std::list<std::pair<FullTrackName, uint64_t>> lru_;
};

}  // namespace kvcast::moqt

#endif  // KVCAST_TRANSPORT_MOQT_TRACK_CACHE_H_
