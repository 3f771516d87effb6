// Primitive MoQT draft-14 field encodings: QUIC varints (RFC 9000 section
// 16), fixed-width integers, length-prefixed byte strings, Key-Value-Pairs,
// tuples, Locations and Reason Phrases.
//
// Reader never allocates more than the bytes it has been given: a count or
// length read from the wire is checked against what is actually there before
// anything is copied. A Reader method returns false when the input ends
// before the field does ("need more bytes"); what that means is up to the
// caller (a length mismatch inside a control message, a partial header on a
// data stream). Validation failures are Status errors built with
// ProtocolError() and carry the termination code the draft prescribes.
//
// Writer appends to a borrowed string and remembers the first out-of-range
// value (a varint above 2^62-1, ...) in status(); it writes minimal varints.
//
// Thread safety: plain values, one thread at a time.
#ifndef KVCAST_TRANSPORT_MOQT_INTERNAL_WIRE_H_
#define KVCAST_TRANSPORT_MOQT_INTERNAL_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "transport/moqt/messages.h"

namespace kvcast::moqt::internal {

inline constexpr uint64_t kMaxVarint = (1ull << 62) - 1;
inline constexpr size_t kMaxVarintLength = 8;
// Draft-14 limits, by the section of draft-ietf-moq-transport-14 that sets them.
inline constexpr uint64_t kMaxKvpValueLength = 65535;      // Key-Value-Pair Structure
inline constexpr uint64_t kMaxReasonPhraseLength = 1024;   // Reason Phrase Structure
inline constexpr uint64_t kMaxNamespaceElements = 32;      // Track Naming
inline constexpr uint64_t kMaxFullTrackNameLength = 4096;  // Track Naming
inline constexpr uint64_t kMaxGoawayUriLength = 8192;      // GOAWAY
inline constexpr uint64_t kMaxControlPayload = 65535;      // Control Messages: Length (16)

// Bytes a minimal varint encoding of `v` takes (v <= kMaxVarint).
size_t VarintLength(uint64_t v);

class Reader {
 public:
  explicit Reader(absl::Span<const uint8_t> data) : data_(data) {}
  explicit Reader(absl::string_view data)
      : data_(reinterpret_cast<const uint8_t*>(data.data()), data.size()) {}

  size_t offset() const { return offset_; }
  size_t remaining() const { return data_.size() - offset_; }
  bool empty() const { return remaining() == 0; }

  // Each returns false, consuming nothing, if the field is not complete.
  bool ReadVarint(uint64_t* value);
  bool ReadUint8(uint8_t* value);
  bool ReadUint16(uint16_t* value);  // network byte order
  // A view of the next `n` bytes (valid as long as the input is).
  bool ReadBytes(uint64_t n, absl::string_view* out);
  // The rest of the input.
  absl::string_view ReadRemaining();

 private:
  absl::Span<const uint8_t> data_;
  size_t offset_ = 0;
};

class Writer {
 public:
  explicit Writer(std::string* out) : out_(out) {}  // borrowed, must outlive

  void WriteVarint(uint64_t value);
  void WriteUint8(uint8_t value);
  void WriteUint16(uint16_t value);
  void WriteBytes(absl::string_view bytes);
  // Length (i) followed by the bytes.
  void WriteLengthPrefixed(absl::string_view bytes);
  // Records an out-of-range field; the first one wins.
  void Fail(const std::string& message);
  const absl::Status& status() const { return status_; }

 private:
  std::string* out_;
  absl::Status status_;
};

// ---- composite fields --------------------------------------------------------
//
// The Parse* functions take a Reader positioned at the field and return
// kDone after consuming the whole field, kNeedMore if the input ended first
// (the reader position is then unspecified), or a protocol-violation Status.
enum class Progress { kDone, kNeedMore };

// Key-Value-Pair. An odd type's Length above 65535 is PROTOCOL_VIOLATION.
absl::StatusOr<Progress> ParseKeyValuePair(Reader* reader, KeyValuePair* kvp);
void WriteKeyValuePair(const KeyValuePair& kvp, Writer* writer);

// Track Namespace (tuple): 1..32 elements whose lengths sum to <= 4096 bytes.
absl::StatusOr<Progress> ParseNamespace(Reader* reader, TrackNamespace* ns);
void WriteNamespace(const TrackNamespace& ns, Writer* writer);

// Track Namespace + Track Name Length (i) + Track Name (..), <= 4096 bytes.
absl::StatusOr<Progress> ParseFullTrackName(Reader* reader, FullTrackName* name);
void WriteFullTrackName(const FullTrackName& name, Writer* writer);

// Reason Phrase: Length (i) <= 1024 + bytes.
absl::StatusOr<Progress> ParseReasonPhrase(Reader* reader, std::string* reason);
void WriteReasonPhrase(const std::string& reason, Writer* writer);

// Location {Group (i), Object (i)}; false if incomplete.
bool ReadLocation(Reader* reader, Location* location);
void WriteLocation(const Location& location, Writer* writer);

// Object extension headers: a block of Key-Value-Pairs back to back. A pair
// running past the block, or an odd Length above 65535, is
// PROTOCOL_VIOLATION.
absl::Status ParseKeyValueBlock(absl::string_view block, Parameters* out);
void WriteKeyValueBlock(const Parameters& kvps, Writer* writer);

}  // namespace kvcast::moqt::internal

#endif  // KVCAST_TRANSPORT_MOQT_INTERNAL_WIRE_H_
