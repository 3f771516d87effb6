#include "transport/moqt/group_spill.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "xxhash.h"

namespace kvcast::moqt {
namespace {

constexpr char kMagic[8] = {'K', 'V', 'R', 'G', 'R', 'P', '0', '1'};
constexpr size_t kHead = sizeof(kMagic) + 8;  // magic, checksum

void PutU64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(char(v >> (8 * i)));
}
void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(char(v >> (8 * i)));
}
void PutBytes(std::string* out, const std::string& s) {
  PutU32(out, uint32_t(s.size()));
  out->append(s);
}

// Reads the format's fields with bounds checks; ok() false once one failed.
class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  bool ok() const { return ok_; }
  bool done() const { return pos_ == in_.size(); }
  uint64_t U(int bytes) {
    if (!Need(bytes)) return 0;
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= uint64_t(uint8_t(in_[pos_ + i])) << (8 * i);
    pos_ += bytes;
    return v;
  }
  std::string Bytes(uint64_t n) {
    if (!Need(n)) return "";
    std::string s(in_.substr(pos_, n));
    pos_ += n;
    return s;
  }

 private:
  bool Need(uint64_t n) {
    if (!ok_ || in_.size() - pos_ < n) ok_ = false;
    return ok_;
  }
  std::string_view in_;
  size_t pos_ = 0;
  bool ok_ = true;
};

std::string Serialize(const FullTrackName& track, uint64_t group,
                      const std::vector<SpilledObject>& objects, bool ends_track) {
  std::string body;
  PutU32(&body, uint32_t(track.ns.size()));
  for (const std::string& e : track.ns) PutBytes(&body, e);
  PutBytes(&body, track.name);
  PutU64(&body, group);
  body.push_back(char(ends_track ? 1 : 0));
  PutU32(&body, uint32_t(objects.size()));
  for (const SpilledObject& o : objects) {
    PutU64(&body, o.header.subgroup);
    PutU64(&body, o.header.object);
    body.push_back(char(o.header.publisher_priority));
    body.push_back(char(uint8_t(o.header.status)));
    PutU32(&body, uint32_t(o.header.extensions.size()));
    for (const KeyValuePair& kv : o.header.extensions) {
      PutU64(&body, kv.type);
      PutU64(&body, kv.int_value);
      PutBytes(&body, kv.bytes_value);
    }
    PutU64(&body, o.payload.size());
    body.append(o.payload);
  }
  std::string file(kMagic, sizeof(kMagic));
  PutU64(&file, XXH3_64bits(body.data(), body.size()));
  return file + body;
}

// Parses a whole file; nullopt if it is not an intact one.
std::optional<std::pair<GroupSpill::Entry, std::vector<SpilledObject>>> Parse(
    std::string_view file) {
  if (file.size() < kHead || std::memcmp(file.data(), kMagic, sizeof(kMagic)) != 0) {
    return std::nullopt;
  }
  Reader head(file.substr(sizeof(kMagic), 8));
  const std::string_view body = file.substr(kHead);
  if (head.U(8) != XXH3_64bits(body.data(), body.size())) return std::nullopt;
  Reader r(body);
  GroupSpill::Entry e;
  for (uint64_t n = r.U(4); n > 0 && r.ok(); --n) e.track.ns.push_back(r.Bytes(r.U(4)));
  e.track.name = r.Bytes(r.U(4));
  e.group = r.U(8);
  e.ends_track = r.U(1) != 0;
  std::vector<SpilledObject> objects;
  for (uint64_t n = r.U(4); n > 0 && r.ok(); --n) {
    SpilledObject o;
    o.header.group = e.group;
    o.header.subgroup = r.U(8);
    o.header.object = r.U(8);
    o.header.publisher_priority = uint8_t(r.U(1));
    o.header.status = ObjectStatus(r.U(1));
    for (uint64_t k = r.U(4); k > 0 && r.ok(); --k) {
      KeyValuePair kv;
      kv.type = r.U(8);
      kv.int_value = r.U(8);
      kv.bytes_value = r.Bytes(r.U(4));
      o.header.extensions.push_back(std::move(kv));
    }
    o.payload = r.Bytes(r.U(8));
    o.header.payload_length = o.payload.size();
    e.last_object = std::max(e.last_object, o.header.object);
    objects.push_back(std::move(o));
  }
  if (!r.ok() || !r.done()) return std::nullopt;
  return std::make_pair(std::move(e), std::move(objects));
}

// The store's key of a group: its track and number, length-prefixed.
std::string KeyOf(const FullTrackName& track, uint64_t group) {
  std::string key;
  PutU32(&key, uint32_t(track.ns.size()));
  for (const std::string& e : track.ns) PutBytes(&key, e);
  PutBytes(&key, track.name);
  PutU64(&key, group);
  return key;
}

std::optional<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

absl::StatusOr<std::unique_ptr<GroupSpill>> GroupSpill::Open(const std::string& dir,
                                                            uint64_t budget_bytes) {
  absl::flat_hash_map<std::string, Entry> found;
  auto accept = [&found](const std::string& path, uint64_t) -> std::optional<std::string> {
    std::optional<std::string> bytes = ReadFile(path);
    auto parsed = bytes ? Parse(*bytes) : std::nullopt;
    if (!parsed) return std::nullopt;
    std::string key = KeyOf(parsed->first.track, parsed->first.group);
    found[key] = std::move(parsed->first);
    return key;
  };
  absl::StatusOr<std::unique_ptr<WriteBehindStore>> store = WriteBehindStore::Open(
      "relay spill", dir, ".kvg", WriteBehindStore::Names::kBySerial, budget_bytes, accept);
  if (!store.ok()) return absl::PermissionDeniedError(store.status().message());
  std::unique_ptr<GroupSpill> spill(new GroupSpill(*std::move(store)));
  absl::MutexLock lock(&spill->mu_);
  spill->entries_ = std::move(found);
  return spill;
}

void GroupSpill::Put(const FullTrackName& track, uint64_t group,
                     std::vector<SpilledObject> objects, bool ends_track) {
  auto file = std::make_shared<const std::string>(Serialize(track, group, objects, ends_track));
  Entry e{track, group, 0, ends_track};
  for (const SpilledObject& o : objects) e.last_object = std::max(e.last_object, o.header.object);
  const std::string key = KeyOf(track, group);
  absl::MutexLock lock(&mu_);
  std::vector<std::string> evicted;
  const bool held = store_->Put(key, std::move(file), &evicted);
  for (const std::string& k : evicted) entries_.erase(k);
  if (held) {
    entries_[key] = std::move(e);
  } else {
    entries_.erase(key);
  }
}

std::optional<std::vector<SpilledObject>> GroupSpill::Take(const FullTrackName& track,
                                                           uint64_t group) {
  const std::string key = KeyOf(track, group);
  absl::MutexLock lock(&mu_);
  absl::StatusOr<std::shared_ptr<const std::string>> file = store_->Read(key);
  entries_.erase(key);
  if (!file.ok()) return std::nullopt;  // absent, or unreadable (dropped)
  auto parsed = Parse(**file);
  store_->Remove(key, /*rejected=*/!parsed.has_value());
  if (!parsed) return std::nullopt;
  ++reads_;
  return std::move(parsed->second);
}

std::vector<GroupSpill::Entry> GroupSpill::Entries() const {
  absl::MutexLock lock(&mu_);
  std::vector<Entry> out;
  for (const std::string& k : store_->Keys()) {
    if (auto it = entries_.find(k); it != entries_.end()) out.push_back(it->second);
  }
  return out;
}

GroupSpill::Stats GroupSpill::stats() const {
  const WriteBehindStore::Stats s = store_->stats();
  absl::MutexLock lock(&mu_);
  Stats out;
  out.bytes = s.bytes;
  out.groups = s.files;
  out.writes = s.writes;
  out.reads = reads_;
  out.evictions = s.evictions;
  out.rejected = s.rejected;
  return out;
}

}  // namespace kvcast::moqt
