#include "transport/quic/stream_send_buffer.h"

#include <algorithm>

namespace kvcast::quic {
namespace {

// Acknowledged chunks of at least kRecycleMin bytes wait here, up to
// kRecycleMax bytes per thread, for the next large Append on the same
// thread. Without it every large object (a 128 KiB token of KV) got fresh
// memory from the allocator, which hands blocks this size back to the
// kernel: each append then paid page faults and page clearing (10% of a
// relay's time in kv_path_bench).
constexpr size_t kRecycleMin = 16 << 10, kRecycleMax = 32 << 20;
struct ChunkPool {
  std::vector<std::vector<uint8_t>> free;
  size_t bytes = 0;
};
thread_local ChunkPool chunk_pool;

std::vector<uint8_t> TakeChunk(absl::Span<const uint8_t> data) {
  std::vector<uint8_t> c;
  if (data.size() >= kRecycleMin) {
    auto& free = chunk_pool.free;
    // The most recently returned that fits (a few tries from the back).
    for (size_t i = free.size(), tries = 0; i > 0 && tries < 8; --i, ++tries) {
      if (free[i - 1].capacity() >= data.size()) {
        c = std::move(free[i - 1]);
        free.erase(free.begin() + (i - 1));
        chunk_pool.bytes -= c.capacity();
        break;
      }
    }
  }
  c.assign(data.begin(), data.end());
  return c;
}

void GiveBack(std::vector<uint8_t>&& c) {
  if (c.capacity() < kRecycleMin || chunk_pool.bytes + c.capacity() > kRecycleMax) return;
  c.clear();
  chunk_pool.bytes += c.capacity();
  chunk_pool.free.push_back(std::move(c));
}

}  // namespace

void StreamSendBuffer::Append(absl::Span<const uint8_t> data) {
  if (data.empty()) return;
  // Small writes join the last chunk while QUIC holds no pointer into it
  // (it is wholly unsent), so vectors can grow without dangling pointers.
  if (!chunks_.empty() && chunks_.back().owner == nullptr) {
    size_t last = chunks_.size() - 1;
    Chunk& tail = chunks_.back();
    bool untouched = cursor_chunk_ < last ||
                     (cursor_chunk_ == last && cursor_offset_ == 0);
    if (untouched && tail.size + data.size() <= kCoalesceLimit) {
      tail.owned.insert(tail.owned.end(), data.begin(), data.end());
      tail.data = tail.owned.data();
      tail.size = tail.owned.size();
      queued_ += data.size();
      return;
    }
  }
  Chunk c;
  c.owned = TakeChunk(data);
  c.data = c.owned.data();
  c.size = c.owned.size();
  chunks_.push_back(std::move(c));
  queued_ += data.size();
}

void StreamSendBuffer::AppendShared(SharedBytes data) {
  if (data.bytes.empty()) return;
  queued_ += data.bytes.size();
  Chunk c;
  c.owner = std::move(data.owner);
  c.data = data.bytes.data();
  c.size = data.bytes.size();
  chunks_.push_back(std::move(c));
}

size_t StreamSendBuffer::PeekUnsent(ngtcp2_vec* vecs, size_t max,
                                    bool* covers_all) const {
  size_t count = 0;
  size_t chunk = cursor_chunk_;
  size_t offset = cursor_offset_;
  while (count < max && chunk < chunks_.size()) {
    const Chunk& c = chunks_[chunk];
    vecs[count].base = const_cast<uint8_t*>(c.data + offset);
    vecs[count].len = c.size - offset;
    ++count;
    ++chunk;
    offset = 0;
  }
  *covers_all = chunk >= chunks_.size();
  return count;
}

void StreamSendBuffer::MarkSent(uint64_t n) {
  sent_ += n;
  while (n > 0 && cursor_chunk_ < chunks_.size()) {
    size_t left = chunks_[cursor_chunk_].size - cursor_offset_;
    size_t take = static_cast<size_t>(std::min<uint64_t>(n, left));
    cursor_offset_ += take;
    n -= take;
    if (cursor_offset_ == chunks_[cursor_chunk_].size) {
      ++cursor_chunk_;
      cursor_offset_ = 0;
    }
  }
}

void StreamSendBuffer::MarkAcked(uint64_t end) {
  while (!chunks_.empty() && cursor_chunk_ > 0 &&
         front_offset_ + chunks_.front().size <= end) {
    front_offset_ += chunks_.front().size;
    GiveBack(std::move(chunks_.front().owned));
    chunks_.pop_front();
    --cursor_chunk_;
  }
}

void StreamSendBuffer::DropUnsent() {
  if (cursor_chunk_ < chunks_.size()) {
    if (cursor_offset_ > 0) {
      // Keep the sent prefix of the current chunk in place (no realloc).
      chunks_[cursor_chunk_].size = cursor_offset_;
      ++cursor_chunk_;
      cursor_offset_ = 0;
    }
    chunks_.erase(chunks_.begin() + cursor_chunk_, chunks_.end());
  }
  queued_ = sent_;
}

}  // namespace kvcast::quic
