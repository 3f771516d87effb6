// DiskKvTier: tier 2 of a worker's KV cache, below the host tier: chunks
// the host tier drops are written to files in a directory (an SSD), one
// file per chunk, within a byte budget, least recently used first out, and
// found again by a worker restarted on the same directory.
//
// File <dir>/<chunk hash hex>.kvchunk, little-endian:
//   magic "KVCHUNK1" (8 bytes), model fingerprint (16), chunk hash (16),
//   KvFormat (u32), chunk tokens, layers, KV heads, head_dim (u32 each),
//   payload bytes (u64), XXH3-64 of the payload (u64), then the payload
//   (the chunk in the format, TokenCodec's layout).
// Opening the directory reads every header: a file of another model, shape
// or format, a truncated one, or one named for another hash is deleted,
// never used. The payload's checksum is checked on every read; a mismatch
// deletes the file and reads as DataLoss. Files are written to a temporary
// name and renamed, so a crash never leaves a half-written chunk.
//
// The files are kept by a WriteBehindStore (common/write_behind_store.h):
// writes happen on a thread of its own, so the thread that evicts never
// waits for the disk; a chunk is held (and read back) from memory until its
// file is written; destruction finishes the queued writes. The budget
// counts payload bytes (a whole number of chunks).
//
// Thread safety: all methods may be called from any thread.
#ifndef KVCAST_ENGINE_KV_DISK_TIER_H_
#define KVCAST_ENGINE_KV_DISK_TIER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/write_behind_store.h"
#include "engine/kv/kv_page_pool.h"
#include "engine/kv/prefix_hash.h"
#include "kernels/kv_codec.h"

namespace kvcast {

class DiskKvTier {
 public:
  struct Stats {
    uint64_t bytes = 0;      // payload bytes on disk now
    uint64_t chunks = 0;     // files now
    uint64_t hits = 0;       // reads that returned a chunk
    uint64_t writes = 0;     // chunk files written
    uint64_t pending = 0;    // chunks waiting for their write
    uint64_t evictions = 0;  // files deleted for the budget
    uint64_t rejected = 0;   // files deleted as stale, foreign or corrupt
  };
  // What a chunk file must match.
  struct Shape {
    Hash128 model_fingerprint;
    KvFormat format = KvFormat::kFp16;
    int chunk_tokens = 0;
    KvLayout layout;
    uint64_t chunk_bytes = 0;  // a chunk's payload in `format`
  };

  // Opens (creating it if needed) `dir` and indexes the valid chunk files
  // in it, oldest modification first out; files over `budget_bytes` are
  // deleted oldest first. Errors: the directory cannot be created or read.
  static absl::StatusOr<std::unique_ptr<DiskKvTier>> Open(const std::string& dir,
                                                          const Shape& shape,
                                                          uint64_t budget_bytes);

  // Queues a chunk's payload (with its checksum) for writing unless
  // present; chunks deleted to stay within the budget are appended to
  // `dropped`. A write that fails (disk full, I/O error) loses only that
  // chunk.
  void Put(const Hash128& hash, const std::vector<uint8_t>& payload, uint64_t checksum,
           std::vector<Hash128>* dropped);
  // Returns once every queued chunk is on disk (or failed).
  void WaitForWrites() { store_->WaitForWrites(); }
  bool Contains(const Hash128& hash) const { return store_->Contains(hash.ToHex()); }
  // Bytes before a chunk file's payload (its header).
  static constexpr size_t kHeaderBytes = 8 + 16 + 16 + 5 * 4 + 8 + 8;
  // A chunk's payload, in the file read from disk (or queued), not copied.
  struct Chunk {
    std::shared_ptr<const std::string> file;
    const uint8_t* data() const {
      return reinterpret_cast<const uint8_t*>(file->data()) + kHeaderBytes;
    }
    size_t size() const { return file->size() - kHeaderBytes; }
  };
  // The chunk's payload, its checksum verified. NotFound; DataLoss for a
  // file that changed (deleted).
  absl::StatusOr<Chunk> Get(const Hash128& hash);
  // Every chunk held (for the worker's registration snapshot).
  std::vector<Hash128> Chunks() const;
  Stats stats() const;

 private:
  DiskKvTier(const Shape& shape, std::unique_ptr<WriteBehindStore> store);

  const Shape shape_;
  std::unique_ptr<WriteBehindStore> store_;
  std::atomic<uint64_t> hits_{0};
};

}  // namespace kvcast

#endif  // KVCAST_ENGINE_KV_DISK_TIER_H_
