// WriteBehindStore: a directory of files, one per key, within a byte
// budget, least recently used out first, written by a thread of the
// store's own so the caller never waits for the disk. What the KV disk tier
// (engine/kv/disk_tier.h) and the relay's cache spill
// (transport/moqt/group_spill.h) share; they own their file formats and
// checksums, the store only their bytes.
//
//  - A file is written to NAME.tmp and renamed: a crash never leaves half
//    a file under its name (Open deletes *.tmp).
//  - Until its write is done a file is read back from memory; a write that
//    fails loses that key only.
//  - Open finds what an earlier run left: `accept` reads each file and
//    gives its key, or refuses it (deleted, counted as rejected); files are
//    indexed oldest first by modification time, the oldest dropped to fit
//    the budget.
//  - Files are named by their key ("<key><suffix>", keys then being file
//    names) or by a serial number ("17.kvg", for keys that are not).
//
// Thread safety: all methods may be called from any thread.
#ifndef KVCAST_COMMON_WRITE_BEHIND_STORE_H_
#define KVCAST_COMMON_WRITE_BEHIND_STORE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace kvcast {

class WriteBehindStore {
 public:
  struct Stats {
    uint64_t bytes = 0;      // file bytes held now (on disk or queued)
    uint64_t files = 0;      // keys held now
    uint64_t writes = 0;     // files written
    uint64_t pending = 0;    // files waiting for their write
    uint64_t evictions = 0;  // keys dropped for the budget
    uint64_t rejected = 0;   // files found invalid (at Open, or by a caller's check)
  };
  // At Open, for each file of the store's suffix: its key, or nullopt when
  // it is not a valid file (it is then deleted). `size` is the file's size.
  using Accept = std::function<std::optional<std::string>(const std::string& path, uint64_t size)>;
  enum class Names { kByKey, kBySerial };

  // Opens (creating it if needed) `dir`, whose files end in `suffix` (e.g.
  // ".kvchunk"). Errors: FAILED_PRECONDITION naming `what` and the
  // directory when it cannot be created or read.
  static absl::StatusOr<std::unique_ptr<WriteBehindStore>> Open(const std::string& what,
                                                               const std::string& dir,
                                                               const std::string& suffix,
                                                               Names names,
                                                               uint64_t budget_bytes,
                                                               const Accept& accept);
  ~WriteBehindStore();  // finishes the queued writes
  WriteBehindStore(const WriteBehindStore&) = delete;
  WriteBehindStore& operator=(const WriteBehindStore&) = delete;

  // Holds `file` under `key`, replacing what was there, and queues its
  // write; keys dropped to stay within the budget are appended to
  // `evicted` (when given). False, holding nothing, when the file alone is
  // over the budget.
  bool Put(const std::string& key, std::shared_ptr<const std::string> file,
           std::vector<std::string>* evicted = nullptr);
  // Marks `key` recently used; false when absent.
  bool Touch(const std::string& key);
  bool Contains(const std::string& key) const;
  // The file's bytes (from memory while its write is queued), marked
  // recently used. NotFound; DataLoss when the file cannot be read or its
  // size changed (the key is then dropped).
  absl::StatusOr<std::shared_ptr<const std::string>> Read(const std::string& key);
  // Drops `key` and its file; `rejected`: a caller found it invalid.
  void Remove(const std::string& key, bool rejected = false);
  // Every key held, oldest first.
  std::vector<std::string> Keys() const;
  Stats stats() const;
  // Blocks until every queued write is done (or failed).
  void WaitForWrites();

 private:
  struct Entry {
    std::string path;
    uint64_t bytes = 0;
    std::shared_ptr<const std::string> pending;  // the file until written
    std::list<std::string>::iterator lru;        // in lru_: back = newest
  };
  WriteBehindStore(std::string dir, std::string suffix, Names names, uint64_t budget);
  void DropLocked(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Holds a file (found on disk, or queued) as the newest.
  Entry& AddLocked(const std::string& key, std::string path, uint64_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Writer();

  const std::string dir_, suffix_;
  const Names names_;
  const uint64_t budget_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::list<std::string> lru_ ABSL_GUARDED_BY(mu_);  // oldest first
  // (key, file) to write, in order; a key dropped meanwhile is skipped.
  std::deque<std::pair<std::string, std::shared_ptr<const std::string>>> queue_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t serial_ ABSL_GUARDED_BY(mu_) = 0;
  Stats stats_ ABSL_GUARDED_BY(mu_);
  std::thread writer_;
};

}  // namespace kvcast

#endif  // KVCAST_COMMON_WRITE_BEHIND_STORE_H_
