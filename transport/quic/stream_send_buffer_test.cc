#include "transport/quic/stream_send_buffer.h"

#include <memory>
#include <string>

#include "gtest/gtest.h"

namespace kvcast::quic {
namespace {

absl::Span<const uint8_t> Bytes(const std::string& s) {
  return absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()),
                                   s.size());
}

std::string Unsent(const StreamSendBuffer& b) {
  ngtcp2_vec vecs[16];
  bool all = false;
  size_t n = b.PeekUnsent(vecs, 16, &all);
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    out.append(reinterpret_cast<const char*>(vecs[i].base), vecs[i].len);
  }
  EXPECT_TRUE(all);
  return out;
}

TEST(StreamSendBufferTest, SendAckCycleKeepsBytesUntilAcked) {
  StreamSendBuffer b;
  b.Append(Bytes("hello "));
  b.Append(Bytes("world"));  // Coalesced: nothing sent yet.
  EXPECT_EQ(b.unsent(), 11u);
  EXPECT_EQ(Unsent(b), "hello world");
  b.MarkSent(4);
  EXPECT_EQ(Unsent(b), "o world");
  b.Append(Bytes("!"));  // Not coalesced into a partly sent chunk.
  EXPECT_EQ(Unsent(b), "o world!");
  b.MarkSent(8);
  EXPECT_EQ(b.unsent(), 0u);
  EXPECT_EQ(b.held(), 12u);
  b.MarkAcked(11);  // First chunk fully acknowledged.
  EXPECT_EQ(b.held(), 1u);
  b.MarkAcked(12);
  EXPECT_EQ(b.held(), 0u);
}

// A large acknowledged chunk's memory serves the next large append (no
// fresh pages per object), and holds the new bytes, not the old ones.
TEST(StreamSendBufferTest, AcknowledgedLargeChunksAreReused) {
  const std::string first(128 << 10, 'a'), second(100 << 10, 'b');
  StreamSendBuffer b;
  b.Append(Bytes(first));
  ngtcp2_vec vec;
  bool all = false;
  ASSERT_EQ(b.PeekUnsent(&vec, 1, &all), 1u);
  const uint8_t* memory = vec.base;
  b.MarkSent(first.size());
  b.MarkAcked(first.size());
  EXPECT_EQ(b.held(), 0u);
  StreamSendBuffer other;  // another stream on the same thread
  other.Append(Bytes(second));
  ASSERT_EQ(other.PeekUnsent(&vec, 1, &all), 1u);
  EXPECT_EQ(vec.base, memory);
  EXPECT_EQ(Unsent(other), second);
  // Small chunks are not kept: a small append gets its own memory.
  other.Append(Bytes("tail"));
  EXPECT_EQ(Unsent(other), second + "tail");
}

TEST(StreamSendBufferTest, PeekLimitsVecsAndReportsPartial) {
  StreamSendBuffer b;
  std::string big(70 << 10, 'x');  // Each beyond the coalescing limit.
  for (int i = 0; i < 3; ++i) b.Append(Bytes(big));
  ngtcp2_vec vecs[2];
  bool all = true;
  EXPECT_EQ(b.PeekUnsent(vecs, 2, &all), 2u);
  EXPECT_FALSE(all);
  b.MarkSent(big.size() * 2 + 5);
  EXPECT_EQ(b.PeekUnsent(vecs, 2, &all), 1u);
  EXPECT_TRUE(all);
  EXPECT_EQ(vecs[0].len, big.size() - 5);
}

TEST(StreamSendBufferTest, DropUnsentKeepsInFlightBytes) {
  StreamSendBuffer b;
  b.Append(Bytes("abcdef"));
  b.MarkSent(2);
  const uint8_t* in_flight = nullptr;
  {
    ngtcp2_vec v[1];
    bool all;
    b.PeekUnsent(v, 1, &all);
    in_flight = v[0].base - 2;
  }
  b.DropUnsent();
  EXPECT_EQ(b.unsent(), 0u);
  EXPECT_EQ(b.held(), 2u);
  EXPECT_EQ(in_flight[0], 'a');  // Still valid for retransmission.
  b.MarkAcked(2);
  EXPECT_EQ(b.held(), 0u);
}

// Shared bytes go out from their owner's memory, not a copy, between copied
// ones in order; the owner is held exactly until QUIC is done with them.
TEST(StreamSendBufferTest, SharedBytesAreReferencedUntilAcked) {
  auto object = std::make_shared<std::string>(100 << 10, 'k');
  std::weak_ptr<std::string> watch = object;
  StreamSendBuffer b;
  b.Append(Bytes("head"));
  b.AppendShared({object, Bytes(*object)});
  b.Append(Bytes("tail"));  // not coalesced into the shared chunk
  object.reset();
  ASSERT_FALSE(watch.expired());
  ngtcp2_vec vecs[4];
  bool all = false;
  ASSERT_EQ(b.PeekUnsent(vecs, 4, &all), 3u);
  EXPECT_TRUE(all);
  EXPECT_EQ(vecs[1].base, reinterpret_cast<const uint8_t*>(watch.lock()->data()));
  EXPECT_EQ(Unsent(b), "head" + std::string(100 << 10, 'k') + "tail");
  b.MarkSent(b.unsent());
  b.MarkAcked(4 + (100 << 10) - 1);  // one byte of it still unacknowledged
  EXPECT_FALSE(watch.expired());
  b.MarkAcked(4 + (100 << 10));
  EXPECT_TRUE(watch.expired());
  EXPECT_EQ(b.held(), 4u);
}

// A reset drops unsent shared bytes (their owner is let go) but keeps a
// partly sent shared chunk for retransmission.
TEST(StreamSendBufferTest, DropUnsentLetsGoOfUnsentSharedBytes) {
  auto sent = std::make_shared<std::string>("0123456789");
  auto unsent = std::make_shared<std::string>("abcdef");
  std::weak_ptr<std::string> watch_sent = sent, watch_unsent = unsent;
  StreamSendBuffer b;
  b.AppendShared({sent, Bytes(*sent)});
  b.AppendShared({unsent, Bytes(*unsent)});
  sent.reset();
  unsent.reset();
  b.MarkSent(4);
  b.DropUnsent();
  EXPECT_TRUE(watch_unsent.expired());
  EXPECT_FALSE(watch_sent.expired());
  EXPECT_EQ(b.held(), 4u);
  b.MarkAcked(4);
  EXPECT_TRUE(watch_sent.expired());
  EXPECT_EQ(b.held(), 0u);
}

}  // namespace
}  // namespace kvcast::quic
