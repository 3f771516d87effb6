#include "transport/moqt/group_spill.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "absl/strings/numbers.h"
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

std::optional<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

GroupSpill::GroupSpill(std::string dir, uint64_t budget) : dir_(std::move(dir)), budget_(budget) {}

absl::StatusOr<std::unique_ptr<GroupSpill>> GroupSpill::Open(const std::string& dir,
                                                            uint64_t budget_bytes) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat("spill dir ", dir, ": ", ec.message()));
  std::unique_ptr<GroupSpill> spill(new GroupSpill(dir, budget_bytes));
  // What an earlier run left, by serial number (the order it was written).
  std::vector<std::pair<uint64_t, std::string>> files;
  for (const auto& f : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = f.path().filename().string();
    uint64_t serial = 0;
    if (name.size() > 4 && name.substr(name.size() - 4) == ".kvg" &&
        absl::SimpleAtoi(name.substr(0, name.size() - 4), &serial)) {
      files.emplace_back(serial, f.path().string());
    } else if (name.size() > 4 && name.substr(name.size() - 4) == ".tmp") {
      std::filesystem::remove(f.path(), ec);  // a write cut short
    }
  }
  if (ec) return absl::PermissionDeniedError(absl::StrCat("spill dir ", dir, ": ", ec.message()));
  std::sort(files.begin(), files.end());
  absl::MutexLock lock(&spill->mu_);
  for (const auto& [serial, path] : files) {
    spill->serial_ = std::max(spill->serial_, serial + 1);
    std::optional<std::string> bytes = ReadFile(path);
    auto parsed = bytes ? Parse(*bytes) : std::nullopt;
    if (!parsed) {
      std::filesystem::remove(path, ec);
      ++spill->stats_.rejected;
      continue;
    }
    Key key{parsed->first.track, parsed->first.group};
    if (auto old = spill->held_.find(key); old != spill->held_.end()) spill->DropLocked(old);
    while (spill->stats_.bytes + bytes->size() > budget_bytes && !spill->lru_.empty()) {
      spill->DropLocked(spill->held_.find(spill->lru_.front()));
      ++spill->stats_.evictions;
    }
    if (bytes->size() > budget_bytes) {
      std::filesystem::remove(path, ec);
      continue;
    }
    Held& h = spill->held_[key];
    h.entry = std::move(parsed->first);
    h.path = path;
    h.bytes = bytes->size();
    h.lru = spill->lru_.insert(spill->lru_.end(), key);
    spill->stats_.bytes += h.bytes;
    ++spill->stats_.groups;
  }
  spill->writer_ = std::thread([s = spill.get()] { s->Writer(); });
  return spill;
}

GroupSpill::~GroupSpill() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  writer_.join();
}

void GroupSpill::DropLocked(std::map<Key, Held>::iterator it) {
  Held& h = it->second;
  if (h.pending == nullptr) {
    unlink(h.path.c_str());
  } else {
    // Still queued: forget the write. Being written: the writer finds the
    // entry gone and deletes the file.
    auto q = std::find_if(queue_.begin(), queue_.end(),
                          [&](const auto& w) { return w.first == h.path; });
    if (q != queue_.end()) queue_.erase(q);
  }
  stats_.bytes -= h.bytes;
  --stats_.groups;
  lru_.erase(h.lru);
  held_.erase(it);
}

void GroupSpill::Put(const FullTrackName& track, uint64_t group,
                     std::vector<SpilledObject> objects, bool ends_track) {
  auto bytes = std::make_shared<const std::string>(Serialize(track, group, objects, ends_track));
  Entry e{track, group, 0, ends_track};
  for (const SpilledObject& o : objects) e.last_object = std::max(e.last_object, o.header.object);
  absl::MutexLock lock(&mu_);
  Key key{track, group};
  if (auto old = held_.find(key); old != held_.end()) DropLocked(old);
  if (bytes->size() > budget_) return;
  while (stats_.bytes + bytes->size() > budget_ && !lru_.empty()) {
    DropLocked(held_.find(lru_.front()));
    ++stats_.evictions;
  }
  Held& h = held_[key];
  h.entry = std::move(e);
  h.path = absl::StrCat(dir_, "/", serial_++, ".kvg");
  h.bytes = bytes->size();
  h.pending = bytes;
  h.lru = lru_.insert(lru_.end(), key);
  stats_.bytes += h.bytes;
  ++stats_.groups;
  queue_.emplace_back(h.path, bytes);
}

std::optional<std::vector<SpilledObject>> GroupSpill::Take(const FullTrackName& track,
                                                           uint64_t group) {
  absl::MutexLock lock(&mu_);
  auto it = held_.find(Key{track, group});
  if (it == held_.end()) return std::nullopt;
  std::optional<std::string> bytes =
      it->second.pending ? std::optional<std::string>(*it->second.pending)
                         : ReadFile(it->second.path);
  auto parsed = bytes ? Parse(*bytes) : std::nullopt;
  DropLocked(it);
  if (!parsed) {
    ++stats_.rejected;
    return std::nullopt;
  }
  ++stats_.reads;
  return std::move(parsed->second);
}

std::vector<GroupSpill::Entry> GroupSpill::Entries() const {
  absl::MutexLock lock(&mu_);
  std::vector<Entry> out;
  for (const Key& k : lru_) out.push_back(held_.at(k).entry);
  return out;
}

GroupSpill::Stats GroupSpill::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void GroupSpill::WaitForWrites() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](GroupSpill* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
        return s->queue_.empty() && !s->writing_;
      },
      this));
}

void GroupSpill::Writer() {
  // Signals are the owning process's to handle (the relay waits for SIGTERM
  // on a signalfd): never deliver one to this thread.
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  for (;;) {
    std::pair<std::string, std::shared_ptr<const std::string>> job;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](GroupSpill* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
            return s->stop_ || !s->queue_.empty();
          },
          this));
      if (queue_.empty()) return;  // stopping, every write done
      job = std::move(queue_.front());
      queue_.pop_front();
      writing_ = true;
    }
    const std::string tmp = job.first + ".tmp";
    bool ok = false;
    if (FILE* f = std::fopen(tmp.c_str(), "wb")) {
      ok = std::fwrite(job.second->data(), 1, job.second->size(), f) == job.second->size();
      ok = std::fclose(f) == 0 && ok;
    }
    ok = ok && std::rename(tmp.c_str(), job.first.c_str()) == 0;
    absl::MutexLock lock(&mu_);
    writing_ = false;
    auto it = std::find_if(held_.begin(), held_.end(),
                           [&](const auto& kv) { return kv.second.path == job.first; });
    if (it == held_.end() || !ok) {
      unlink(tmp.c_str());
      unlink(job.first.c_str());
      if (it != held_.end()) DropLocked(it);  // could not write: not held
      continue;
    }
    it->second.pending = nullptr;
    ++stats_.writes;
  }
}

}  // namespace kvcast::moqt
