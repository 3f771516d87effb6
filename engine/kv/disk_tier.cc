// DiskKvTier: see disk_tier.h.
#include "engine/kv/disk_tier.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "xxhash.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "chunk files are little-endian");

namespace kvcast {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'K', 'V', 'C', 'H', 'U', 'N', 'K', '1'};
constexpr char kSuffix[] = ".kvchunk";
constexpr size_t kHeaderBytes = 8 + 16 + 16 + 5 * 4 + 8 + 8;

struct Header {
  Hash128 model;
  Hash128 chunk;
  uint32_t format = 0, chunk_tokens = 0, layers = 0, heads = 0, head_dim = 0;
  uint64_t payload_bytes = 0;
  uint64_t checksum = 0;
};

template <typename T>
void Put(std::vector<uint8_t>* out, T v) {
  const size_t at = out->size();
  out->resize(at + sizeof(T));
  std::memcpy(out->data() + at, &v, sizeof(T));
}

template <typename T>
T Get(const uint8_t** p) {
  T v;
  std::memcpy(&v, *p, sizeof(T));
  *p += sizeof(T);
  return v;
}

std::vector<uint8_t> Encode(const Header& h) {
  std::vector<uint8_t> out(kMagic, kMagic + 8);
  for (const Hash128& x : {h.model, h.chunk}) {
    Put(&out, x.lo);
    Put(&out, x.hi);
  }
  for (uint32_t v : {h.format, h.chunk_tokens, h.layers, h.heads, h.head_dim}) Put(&out, v);
  Put(&out, h.payload_bytes);
  Put(&out, h.checksum);
  return out;
}

bool Decode(const uint8_t* p, Header* h) {
  if (std::memcmp(p, kMagic, 8) != 0) return false;
  p += 8;
  for (Hash128* x : {&h->model, &h->chunk}) {
    x->lo = Get<uint64_t>(&p);
    x->hi = Get<uint64_t>(&p);
  }
  for (uint32_t* v : {&h->format, &h->chunk_tokens, &h->layers, &h->heads, &h->head_dim}) {
    *v = Get<uint32_t>(&p);
  }
  h->payload_bytes = Get<uint64_t>(&p);
  h->checksum = Get<uint64_t>(&p);
  return true;
}

// Reads the header of `path` (and, with `payload`, the rest, which must be
// `payload_bytes` long: the header's own size is not trusted with an
// allocation).
bool ReadFile(const std::string& path, Header* h, std::vector<uint8_t>* payload = nullptr,
              uint64_t payload_bytes = 0) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return false;
  uint8_t head[kHeaderBytes];
  bool ok = std::fread(head, 1, kHeaderBytes, f) == kHeaderBytes && Decode(head, h);
  if (ok && payload != nullptr) ok = h->payload_bytes == payload_bytes;
  if (ok && payload != nullptr) {
    payload->resize(h->payload_bytes);
    ok = std::fread(payload->data(), 1, payload->size(), f) == payload->size() &&
         std::fgetc(f) == EOF;
  }
  std::fclose(f);
  return ok;
}

}  // namespace

DiskKvTier::DiskKvTier(std::string dir, const Shape& shape, uint64_t budget)
    : dir_(std::move(dir)), shape_(shape), budget_(budget) {
  writer_ = std::thread([this] { WriteLoop(); });
}

DiskKvTier::~DiskKvTier() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  writer_.join();
}

void DiskKvTier::WriteLoop() {
  while (true) {
    Hash128 hash;
    std::shared_ptr<const std::vector<uint8_t>> bytes;
    uint64_t checksum = 0;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](DiskKvTier* t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->mu_) {
            return t->stop_ || !t->queue_.empty();
          },
          this));
      if (queue_.empty()) return;  // stopped, every write done
      hash = queue_.front();
      queue_.pop_front();
      auto it = entries_.find(hash);
      if (it == entries_.end() || it->second.pending == nullptr) continue;  // dropped meanwhile
      bytes = it->second.pending;
      checksum = it->second.checksum;
    }
    const bool ok = WriteFile(hash, *bytes, checksum);
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(hash);
    const bool still_wanted = it != entries_.end() && it->second.pending == bytes;
    if (ok && still_wanted) {
      it->second.pending = nullptr;
      --stats_.pending;
      ++stats_.writes;
    } else if (still_wanted) {  // the write failed: the chunk is lost
      Remove(hash);
    } else if (ok) {  // dropped while being written: its file must go too
      std::error_code ec;
      fs::remove(PathOf(hash), ec);
    }
  }
}

bool DiskKvTier::WriteFile(const Hash128& hash, const std::vector<uint8_t>& payload,
                           uint64_t checksum) const {
  Header h;
  h.model = shape_.model_fingerprint;
  h.chunk = hash;
  h.format = uint32_t(shape_.format);
  h.chunk_tokens = uint32_t(shape_.chunk_tokens);
  h.layers = uint32_t(shape_.layout.num_layers);
  h.heads = uint32_t(shape_.layout.num_kv_heads);
  h.head_dim = uint32_t(shape_.layout.head_dim);
  h.payload_bytes = payload.size();
  h.checksum = checksum;
  const std::vector<uint8_t> head = Encode(h);
  const std::string path = PathOf(hash), tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  bool ok = f != nullptr && std::fwrite(head.data(), 1, head.size(), f) == head.size() &&
            std::fwrite(payload.data(), 1, payload.size(), f) == payload.size();
  if (f != nullptr) ok = (std::fclose(f) == 0) && ok;
  std::error_code ec;
  if (ok) fs::rename(tmp, path, ec);
  if (!ok || ec) fs::remove(tmp, ec);
  return ok && !ec;
}

std::string DiskKvTier::PathOf(const Hash128& hash) const {
  return absl::StrCat(dir_, "/", hash.ToHex(), kSuffix);
}

absl::StatusOr<std::unique_ptr<DiskKvTier>> DiskKvTier::Open(const std::string& dir,
                                                             const Shape& shape,
                                                             uint64_t budget_bytes) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("disk KV tier: cannot create ", dir, ": ", ec.message()));
  }
  std::unique_ptr<DiskKvTier> tier(new DiskKvTier(dir, shape, budget_bytes));
  struct Found {
    Hash128 hash;
    uint64_t bytes;
    fs::file_time_type mtime;
  };
  std::vector<Found> found;
  fs::directory_iterator it(dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("disk KV tier: cannot read ", dir, ": ", ec.message()));
  }
  absl::MutexLock lock(&tier->mu_);
  for (const fs::directory_entry& e : it) {
    const std::string name = e.path().filename().string();
    if (absl::EndsWith(name, ".tmp")) {  // a write cut short
      fs::remove(e.path(), ec);
      continue;
    }
    if (!absl::EndsWith(name, kSuffix)) continue;
    Header h;
    const bool valid = ReadFile(e.path().string(), &h) &&
                       h.model == shape.model_fingerprint &&
                       h.format == uint32_t(shape.format) &&
                       h.chunk_tokens == uint32_t(shape.chunk_tokens) &&
                       h.layers == uint32_t(shape.layout.num_layers) &&
                       h.heads == uint32_t(shape.layout.num_kv_heads) &&
                       h.head_dim == uint32_t(shape.layout.head_dim) &&
                       h.payload_bytes == shape.chunk_bytes &&
                       name == h.chunk.ToHex() + kSuffix &&
                       e.file_size(ec) == kHeaderBytes + h.payload_bytes;
    if (!valid) {
      fs::remove(e.path(), ec);
      ++tier->stats_.rejected;
      continue;
    }
    found.push_back({h.chunk, h.payload_bytes, e.last_write_time(ec)});
  }
  std::sort(found.begin(), found.end(),
            [](const Found& a, const Found& b) { return a.mtime < b.mtime; });
  for (const Found& f : found) {
    tier->lru_.push_front(f.hash);
    tier->entries_.emplace(f.hash, Entry{f.bytes, tier->lru_.begin()});
    tier->stats_.bytes += f.bytes;
    ++tier->stats_.chunks;
  }
  while (tier->stats_.bytes > budget_bytes && !tier->lru_.empty()) {
    tier->Remove(tier->lru_.back());
    ++tier->stats_.evictions;
  }
  return tier;
}

void DiskKvTier::Put(const Hash128& hash, const std::vector<uint8_t>& payload,
                     uint64_t checksum, std::vector<Hash128>* dropped) {
  absl::MutexLock lock(&mu_);
  if (auto it = entries_.find(hash); it != entries_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second.lru);
    return;
  }
  if (payload.size() != shape_.chunk_bytes || payload.size() > budget_) return;
  while (stats_.bytes + payload.size() > budget_ && !lru_.empty()) {
    const Hash128 oldest = lru_.back();
    Remove(oldest);
    ++stats_.evictions;
    dropped->push_back(oldest);
  }
  lru_.push_front(hash);
  entries_.emplace(hash, Entry{payload.size(), lru_.begin(),
                               std::make_shared<const std::vector<uint8_t>>(payload), checksum});
  stats_.bytes += payload.size();
  ++stats_.chunks;
  ++stats_.pending;
  queue_.push_back(hash);
}

void DiskKvTier::WaitForWrites() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](DiskKvTier* t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->mu_) { return t->stats_.pending == 0; },
      this));
}

bool DiskKvTier::Contains(const Hash128& hash) const {
  absl::MutexLock lock(&mu_);
  return entries_.contains(hash);
}

absl::StatusOr<std::vector<uint8_t>> DiskKvTier::Get(const Hash128& hash) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(hash);
  if (it == entries_.end()) return absl::NotFoundError("chunk not in the disk tier");
  if (const auto& bytes = it->second.pending) {  // not written yet
    if (XXH3_64bits(bytes->data(), bytes->size()) != it->second.checksum) {
      Remove(hash);
      ++stats_.rejected;
      return absl::DataLossError("disk KV tier: a queued chunk no longer matches its checksum");
    }
    lru_.splice(lru_.begin(), lru_, it->second.lru);
    ++stats_.hits;
    return *bytes;
  }
  Header h;
  std::vector<uint8_t> payload;
  if (!ReadFile(PathOf(hash), &h, &payload, shape_.chunk_bytes) || h.chunk != hash ||
      XXH3_64bits(payload.data(), payload.size()) != h.checksum) {
    Remove(hash);
    ++stats_.rejected;
    return absl::DataLossError(
        absl::StrCat("disk KV tier: ", PathOf(hash), " changed on disk; dropped"));
  }
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  ++stats_.hits;
  return payload;
}

std::vector<Hash128> DiskKvTier::Chunks() const {
  absl::MutexLock lock(&mu_);
  return std::vector<Hash128>(lru_.begin(), lru_.end());
}

DiskKvTier::Stats DiskKvTier::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void DiskKvTier::Remove(const Hash128& hash) {
  auto it = entries_.find(hash);
  if (it == entries_.end()) return;
  if (it->second.pending != nullptr) {
    --stats_.pending;  // the writer skips it (or deletes the file it was writing)
  } else {
    std::error_code ec;
    fs::remove(PathOf(hash), ec);
  }
  stats_.bytes -= it->second.bytes;
  --stats_.chunks;
  lru_.erase(it->second.lru);
  entries_.erase(it);
}

}  // namespace kvcast
