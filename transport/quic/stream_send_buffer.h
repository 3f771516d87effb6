// StreamSendBuffer: the send side of one QUIC stream. Bytes queued by the
// application are copied in (Append) or referenced (AppendShared) and kept
// until QUIC acknowledges them: ngtcp2 does not copy stream data and
// retransmits lost frames from this memory.
//
//   [front_offset .. acked)      may still be referenced (in flight)
//   [acked .. sent)              handed to QUIC, not yet acknowledged
//   [sent .. queued)             not yet handed to QUIC ("unsent")
//
// Thread safety: none (one connection, one loop thread).
#ifndef KVCAST_TRANSPORT_QUIC_STREAM_SEND_BUFFER_H_
#define KVCAST_TRANSPORT_QUIC_STREAM_SEND_BUFFER_H_

#include <ngtcp2/ngtcp2.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "absl/types/span.h"
#include "transport/quic/shared_bytes.h"

namespace kvcast::quic {

class StreamSendBuffer {
 public:
  // Copies `data` to the end of the queue.
  void Append(absl::Span<const uint8_t> data);
  // Queues `data.bytes` without copying them; `data.owner` is held until
  // they are acknowledged or dropped (the bytes must not change meanwhile).
  void AppendShared(SharedBytes data);
  // Bytes queued and not yet handed to QUIC.
  uint64_t unsent() const { return queued_ - sent_; }
  // Points up to `max` vecs at the unsent bytes, in order; `*covers_all` is
  // set when they cover every unsent byte. Returns the number of vecs.
  size_t PeekUnsent(ngtcp2_vec* vecs, size_t max, bool* covers_all) const;
  // `n` unsent bytes were handed to QUIC.
  void MarkSent(uint64_t n);
  // QUIC acknowledged everything below stream offset `end`; frees chunks.
  void MarkAcked(uint64_t end);
  // Drops unsent bytes (stream reset); in-flight ones stay until acked.
  void DropUnsent();
  // Bytes held in memory (unacknowledged + unsent).
  uint64_t held() const { return queued_ - front_offset_; }

 private:
  static constexpr size_t kCoalesceLimit = 64 << 10;

  // Owned bytes (`owned`), or bytes another object keeps alive (`owner`).
  struct Chunk {
    std::vector<uint8_t> owned;
    std::shared_ptr<const void> owner;
    const uint8_t* data = nullptr;
    size_t size = 0;
  };

  std::deque<Chunk> chunks_;
  uint64_t front_offset_ = 0;  // Stream offset of chunks_.front()[0].
  uint64_t sent_ = 0;
  uint64_t queued_ = 0;
  // Position of `sent_`: chunk index and offset inside it.
  size_t cursor_chunk_ = 0;
  size_t cursor_offset_ = 0;
};

}  // namespace kvcast::quic

#endif  // KVCAST_TRANSPORT_QUIC_STREAM_SEND_BUFFER_H_
