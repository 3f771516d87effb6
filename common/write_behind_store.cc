#include "common/write_behind_store.h"

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <system_error>
#include <tuple>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace kvcast {
namespace {

namespace fs = std::filesystem;

// Writes `bytes` to `path` through `path`.tmp; false (nothing left behind)
// on any failure.
bool WriteFile(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp";
  bool ok = false;
  if (std::FILE* f = std::fopen(tmp.c_str(), "wb")) {
    ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
    ok = std::fclose(f) == 0 && ok;
  }
  std::error_code ec;
  if (ok) fs::rename(tmp, path, ec);
  if (!ok || ec) fs::remove(tmp, ec);
  return ok && !ec;
}

// The whole file, if it is `size` bytes long (a file that changed size is
// not read: its length is not trusted with an allocation).
std::optional<std::string> ReadFile(const std::string& path, uint64_t size) {
  std::error_code ec;
  if (fs::file_size(path, ec) != size || ec) return std::nullopt;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return std::nullopt;
  std::string out(size, '\0');
  const bool ok = std::fread(out.data(), 1, size, f) == size && std::fgetc(f) == EOF;
  std::fclose(f);
  if (!ok) return std::nullopt;
  return out;
}

}  // namespace

WriteBehindStore::WriteBehindStore(std::string dir, std::string suffix, Names names,
                                   uint64_t budget)
    : dir_(std::move(dir)), suffix_(std::move(suffix)), names_(names), budget_(budget) {}

absl::StatusOr<std::unique_ptr<WriteBehindStore>> WriteBehindStore::Open(
    const std::string& what, const std::string& dir, const std::string& suffix, Names names,
    uint64_t budget_bytes, const Accept& accept) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(absl::StrCat(what, ": cannot create ", dir, ": ",
                                                      ec.message()));
  }
  std::unique_ptr<WriteBehindStore> store(new WriteBehindStore(dir, suffix, names, budget_bytes));
  struct Found {
    fs::file_time_type mtime;
    uint64_t serial;  // the write order among files of one mtime
    std::string path;
    uint64_t size;
  };
  std::vector<Found> found;
  fs::directory_iterator it(dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(absl::StrCat(what, ": cannot read ", dir, ": ",
                                                      ec.message()));
  }
  absl::MutexLock lock(&store->mu_);
  for (const fs::directory_entry& e : it) {
    const std::string name = e.path().filename().string();
    if (absl::EndsWith(name, ".tmp")) {  // a write cut short
      fs::remove(e.path(), ec);
      continue;
    }
    if (!absl::EndsWith(name, suffix)) continue;
    uint64_t serial = UINT64_MAX;
    if (absl::SimpleAtoi(name.substr(0, name.size() - suffix.size()), &serial)) {
      store->serial_ = std::max(store->serial_, serial + 1);
    }
    found.push_back(
        {e.last_write_time(ec), serial, e.path().string(), uint64_t(e.file_size(ec))});
  }
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) {
    return std::tie(a.mtime, a.serial, a.path) < std::tie(b.mtime, b.serial, b.path);
  });
  for (const Found& f : found) {
    std::optional<std::string> key = accept(f.path, f.size);
    if (!key) {
      fs::remove(f.path, ec);
      ++store->stats_.rejected;
      continue;
    }
    if (store->entries_.contains(*key)) store->DropLocked(*key);  // the newer copy stands
    store->AddLocked(*key, f.path, f.size);
  }
  while (store->stats_.bytes > budget_bytes && !store->lru_.empty()) {
    store->DropLocked(store->lru_.front());
    ++store->stats_.evictions;
  }
  store->writer_ = std::thread([s = store.get()] { s->Writer(); });
  return store;
}

WriteBehindStore::~WriteBehindStore() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  writer_.join();
}

WriteBehindStore::Entry& WriteBehindStore::AddLocked(const std::string& key, std::string path,
                                                     uint64_t bytes) {
  Entry& e = entries_[key];
  e.path = std::move(path);
  e.bytes = bytes;
  e.lru = lru_.insert(lru_.end(), key);
  stats_.bytes += bytes;
  ++stats_.files;
  return e;
}

void WriteBehindStore::DropLocked(const std::string& key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  Entry& e = it->second;
  if (e.pending != nullptr) {
    --stats_.pending;  // the writer skips it, or deletes the file it was writing
  } else {
    std::error_code ec;
    fs::remove(e.path, ec);
  }
  stats_.bytes -= e.bytes;
  --stats_.files;
  lru_.erase(e.lru);
  entries_.erase(it);
}

bool WriteBehindStore::Put(const std::string& key, std::shared_ptr<const std::string> file,
                           std::vector<std::string>* evicted) {
  absl::MutexLock lock(&mu_);
  DropLocked(key);
  if (file->size() > budget_) return false;
  while (stats_.bytes + file->size() > budget_ && !lru_.empty()) {
    if (evicted != nullptr) evicted->push_back(lru_.front());
    DropLocked(lru_.front());
    ++stats_.evictions;
  }
  Entry& e = AddLocked(key,
                       names_ == Names::kByKey ? absl::StrCat(dir_, "/", key, suffix_)
                                               : absl::StrCat(dir_, "/", serial_++, suffix_),
                       file->size());
  e.pending = file;
  ++stats_.pending;
  queue_.emplace_back(key, std::move(file));
  return true;
}

bool WriteBehindStore::Touch(const std::string& key) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return false;
  lru_.splice(lru_.end(), lru_, it->second.lru);
  return true;
}

bool WriteBehindStore::Contains(const std::string& key) const {
  absl::MutexLock lock(&mu_);
  return entries_.contains(key);
}

absl::StatusOr<std::shared_ptr<const std::string>> WriteBehindStore::Read(const std::string& key) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return absl::NotFoundError("not held");
  Entry& e = it->second;
  std::shared_ptr<const std::string> file = e.pending;
  if (file == nullptr) {
    std::optional<std::string> bytes = ReadFile(e.path, e.bytes);
    if (!bytes) {
      const std::string path = e.path;
      DropLocked(key);
      ++stats_.rejected;
      return absl::DataLossError(absl::StrCat(path, " cannot be read or changed size; dropped"));
    }
    file = std::make_shared<const std::string>(*std::move(bytes));
  }
  lru_.splice(lru_.end(), lru_, e.lru);
  return file;
}

void WriteBehindStore::Remove(const std::string& key, bool rejected) {
  absl::MutexLock lock(&mu_);
  if (!entries_.contains(key)) return;
  DropLocked(key);
  if (rejected) ++stats_.rejected;
}

std::vector<std::string> WriteBehindStore::Keys() const {
  absl::MutexLock lock(&mu_);
  return std::vector<std::string>(lru_.begin(), lru_.end());
}

WriteBehindStore::Stats WriteBehindStore::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void WriteBehindStore::WaitForWrites() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](WriteBehindStore* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
        return s->queue_.empty() && !s->writing_;
      },
      this));
}

void WriteBehindStore::Writer() {
  // Signals are the owning process's to handle (e.g. the relay's signalfd):
  // never deliver one to this thread.
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  for (;;) {
    std::string key, path;
    std::shared_ptr<const std::string> file;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](WriteBehindStore* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
            return s->stop_ || !s->queue_.empty();
          },
          this));
      if (queue_.empty()) return;  // stopping, every write done
      std::tie(key, file) = std::move(queue_.front());
      queue_.pop_front();
      auto it = entries_.find(key);
      if (it == entries_.end() || it->second.pending != file) continue;  // dropped meanwhile
      path = it->second.path;
      writing_ = true;
    }
    const bool ok = WriteFile(path, *file);
    absl::MutexLock lock(&mu_);
    writing_ = false;
    auto it = entries_.find(key);
    const bool wanted = it != entries_.end() && it->second.pending == file;
    if (wanted && ok) {
      it->second.pending = nullptr;
      --stats_.pending;
      ++stats_.writes;
    } else if (wanted) {
      DropLocked(key);  // the write failed: that key is lost
    } else if (ok) {
      std::error_code ec;
      fs::remove(path, ec);  // dropped or replaced while being written
    }
  }
}

}  // namespace kvcast
