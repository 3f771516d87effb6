#include "transport/moqt/track_cache.h"

#include <cstring>
#include <utility>
#include <vector>

namespace kvcast::moqt {

void TrackCache::Touch(Group& group) { lru_.splice(lru_.end(), lru_, group.lru); }

void TrackCache::Recycle(std::shared_ptr<std::string> payload) {
  if (payload.use_count() != 1 || payload->capacity() < kMinSpare) return;
  spare_bytes_ += payload->capacity();
  spare_.push_back(std::move(*payload));
}

void TrackCache::SetSpill(GroupSpill* spill) {
  spill_ = spill;
  if (spill_ == nullptr) return;
  for (const GroupSpill::Entry& e : spill_->Entries()) {
    Track& track = tracks_[e.track];
    track.spilled.insert(e.group);
    const Location last{e.group, e.last_object};
    if (!track.largest || *track.largest < last) track.largest = last;
    if (e.ends_track) track.end = last;
  }
}

void TrackCache::EvictFor(const FullTrackName& keep_track, uint64_t keep_group,
                          uint64_t incoming) {
  auto it = lru_.begin();
  while (bytes_ + spare_bytes_ + incoming > budget_) {
    if (!spare_.empty()) {  // spare buffers go first
      spare_bytes_ -= spare_.back().capacity();
      spare_.pop_back();
      continue;
    }
    if (it == lru_.end()) break;
    if (it->second == keep_group && it->first == keep_track) {
      ++it;
      continue;
    }
    auto track = tracks_.find(it->first);
    auto group = track->second.groups.find(it->second);
    bytes_ -= group->second.bytes;
    if (spill_ != nullptr && group->second.complete) {
      std::vector<SpilledObject> objects;
      for (auto& [id, obj] : group->second.objects) {
        // A payload a stream still holds is copied; the stream keeps its own.
        objects.push_back(SpilledObject{obj.header, obj.payload.use_count() == 1
                                                        ? std::move(*obj.payload)
                                                        : *obj.payload});
      }
      const auto& end = track->second.end;
      spill_->Put(it->first, it->second, std::move(objects), end && end->group == it->second);
      track->second.spilled.insert(it->second);
    } else {
      for (auto& [id, obj] : group->second.objects) Recycle(std::move(obj.payload));
    }
    track->second.groups.erase(group);
    ++evicted_groups_;
    it = lru_.erase(it);
    if (track->second.groups.empty() && track->second.spilled.empty() && !track->second.end) {
      tracks_.erase(track);
    }
  }
}

std::string TrackCache::TakeSpare(size_t size) {
  // Objects of a track are alike in size: the newest few spares will do.
  // Not one more than twice the size: the budget charges the capacity, so a
  // larger one would cache fewer objects in the same memory.
  for (size_t i = 0; i < spare_.size() && i < 4; ++i) {
    std::string& s = spare_[spare_.size() - 1 - i];
    if (s.capacity() < size || s.capacity() > 2 * size) continue;
    std::string out = std::move(s);
    if (&s != &spare_.back()) s = std::move(spare_.back());
    spare_.pop_back();
    spare_bytes_ -= out.capacity();
    return out;
  }
  return {};
}

void TrackCache::Restore(const FullTrackName& name, Track& track, uint64_t first,
                         uint64_t last) {
  if (spill_ == nullptr) return;
  for (auto g = track.spilled.lower_bound(first); g != track.spilled.end() && *g <= last;) {
    const uint64_t id = *g;
    g = track.spilled.erase(g);
    std::optional<std::vector<SpilledObject>> objects = spill_->Take(name, id);
    if (!objects) continue;  // unreadable: gone (a later request fetches it upstream)
    Group& group = track.groups[id];
    group.lru = lru_.insert(lru_.end(), {name, id});
    group.complete = true;
    for (SpilledObject& o : *objects) {
      Object& obj = group.objects[o.header.object];
      obj.header = std::move(o.header);
      obj.payload = std::make_shared<std::string>(std::move(o.payload));
      const uint64_t cost = Charge(*obj.payload);
      group.bytes += cost;
      bytes_ += cost;
    }
    EvictFor(name, id);
  }
}

TrackCache::InsertResult TrackCache::Insert(const FullTrackName& name,
                                            const ObjectHeader& header,
                                            absl::Span<const uint8_t> payload,
                                            quic::SharedBytes* stored) {
  uint64_t cost = Cost(payload.size());
  if (cost > budget_) return InsertResult::kTooLarge;
  Track& track = tracks_[name];
  if (track.spilled.count(header.group)) Restore(name, track, header.group, header.group);
  auto [git, new_group] = track.groups.try_emplace(header.group);
  Group& group = git->second;
  if (new_group) group.lru = lru_.insert(lru_.end(), {name, header.group});
  auto existing = group.objects.find(header.object);
  if (existing != group.objects.end()) {
    const Object& old = existing->second;
    bool same = old.header.status == header.status &&
                old.payload->size() == payload.size() &&
                (payload.empty() ||
                 std::memcmp(old.payload->data(), payload.data(), payload.size()) == 0);
    if (same) return InsertResult::kDuplicate;
    track.malformed = true;
    return InsertResult::kConflict;
  }
  std::string buffer;
  if (payload.size() >= kMinSpare) {
    buffer = TakeSpare(payload.size());
    if (buffer.capacity() < payload.size() && bytes_ + spare_bytes_ + cost > budget_) {
      // Full: what must go anyway goes first, and its memory takes this
      // payload; memory new to the process would be cleared by the kernel
      // first (a third of a relay's forwarding while its cache filled).
      EvictFor(name, header.group, cost);
      buffer = TakeSpare(payload.size());
    }
  }
  Object& obj = group.objects[header.object];
  obj.header = header;
  obj.header.payload_length = payload.size();
  obj.payload = std::make_shared<std::string>(std::move(buffer));
  obj.payload->assign(reinterpret_cast<const char*>(payload.data()), payload.size());
  if (stored != nullptr) *stored = quic::ShareString(obj.payload);
  cost = Charge(*obj.payload);
  group.bytes += cost;
  bytes_ += cost;
  Location loc{header.group, header.object};
  if (!track.largest || *track.largest < loc) track.largest = loc;
  if (header.status == ObjectStatus::kEndOfGroup) group.complete = true;
  if (header.status == ObjectStatus::kEndOfTrack) {
    group.complete = true;
    track.end = loc;
  }
  Touch(group);
  EvictFor(name, header.group);
  return InsertResult::kInserted;
}

void TrackCache::MarkComplete(const FullTrackName& name, uint64_t first, uint64_t last) {
  auto track = tracks_.find(name);
  if (track == tracks_.end()) return;
  for (auto it = track->second.groups.lower_bound(first);
       it != track->second.groups.end() && it->first <= last; ++it) {
    it->second.complete = true;
  }
}

void TrackCache::MarkEnded(const FullTrackName& name, std::optional<Location> last) {
  Track& track = tracks_[name];
  Location end = last ? *last : track.largest.value_or(Location{});
  if (!track.end || *track.end < end) track.end = end;
  // Every group before the last one is as complete as it will ever be only
  // if it was seen whole; the last group ends with the track.
  auto it = track.groups.find(end.group);
  if (it != track.groups.end()) it->second.complete = true;
}

bool TrackCache::Has(const FullTrackName& name) const { return tracks_.count(name) > 0; }

std::optional<Location> TrackCache::Largest(const FullTrackName& name) const {
  auto it = tracks_.find(name);
  return it == tracks_.end() ? std::nullopt : it->second.largest;
}

std::optional<Location> TrackCache::EndOfTrack(const FullTrackName& name) const {
  auto it = tracks_.find(name);
  return it == tracks_.end() ? std::nullopt : it->second.end;
}

bool TrackCache::malformed(const FullTrackName& name) const {
  auto it = tracks_.find(name);
  return it != tracks_.end() && it->second.malformed;
}

bool TrackCache::Covers(const FullTrackName& name, Location start, Location end) {
  auto it = tracks_.find(name);
  if (it == tracks_.end()) return false;
  Track& track = it->second;
  uint64_t last = end.group;
  if (track.end) {
    if (start.group > track.end->group) return true;  // nothing exists there
    last = std::min(last, track.end->group);
  }
  Restore(name, track, start.group, last);
  for (uint64_t g = start.group; g <= last; ++g) {
    auto group = track.groups.find(g);
    if (group == track.groups.end()) return false;
    if (group->second.complete) continue;
    // An incomplete group still covers a range that ends at an object it has
    // and every object in between is present.
    uint64_t from = g == start.group ? start.object : 0;
    if (g != end.group) return false;
    for (uint64_t o = from; o <= end.object; ++o) {
      if (!group->second.objects.count(o)) return false;
    }
  }
  return true;
}

void TrackCache::ForEach(
    const FullTrackName& name, Location start, Location end,
    const std::function<void(const ObjectHeader&, const quic::SharedBytes&)>& fn) {
  auto it = tracks_.find(name);
  if (it == tracks_.end()) return;
  Track& track = it->second;
  Restore(name, track, start.group, end.group);
  for (auto g = track.groups.lower_bound(start.group);
       g != track.groups.end() && g->first <= end.group; ++g) {
    Touch(g->second);
    for (auto& [id, obj] : g->second.objects) {
      Location loc{g->first, id};
      if (loc < start || end < loc) continue;
      fn(obj.header, quic::ShareString(obj.payload));
    }
  }
}

}  // namespace kvcast::moqt
