// MoQT draft-14 codec: bytes <-> messages.h structs. Knows nothing of
// sockets or sessions.
//
// Parsers are push style: feed whatever bytes arrived with OnIngress(); they
// report complete messages (and object payload fragments as they arrive) to a
// visitor and buffer at most one bounded partial element. Any malformed,
// oversized or truncated-at-FIN input is a protocol violation: OnIngress
// returns a non-OK Status whose termination code (TerminationCodeOf) is the
// one the session must close with; the parser then stays failed.
//
// Thread safety: a parser is used by one thread at a time. Serializers are
// pure functions.
#ifndef KVCAST_TRANSPORT_MOQT_CODEC_H_
#define KVCAST_TRANSPORT_MOQT_CODEC_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "transport/moqt/messages.h"

namespace kvcast::moqt {

// Limits a parser enforces; exceeding one is a protocol violation.
struct CodecLimits {
  uint64_t max_object_payload = 64ull << 20;
  uint64_t max_extension_bytes = 4096;
};

// A protocol-violation Status carrying `code` (INVALID_ARGUMENT with a
// payload); TerminationCodeOf returns kProtocolViolation for a Status made
// elsewhere and kNoError for OK.
absl::Status ProtocolError(TerminationCode code, const std::string& message);
TerminationCode TerminationCodeOf(const absl::Status& status);

// ---- control stream ---------------------------------------------------------

// Appends Type (i) + Length (16) + payload. INVALID_ARGUMENT if the payload
// would exceed 65535 bytes or a field is out of range (namespace of 0 or >32
// elements, full track name > 4096 bytes, odd KVP longer than 65535 ...).
absl::Status SerializeControlMessage(const ControlMessage& msg, std::string* out);

class ControlMessageVisitor {
 public:
  virtual ~ControlMessageVisitor() = default;
  // A returned error stops parsing and is returned from OnIngress.
  virtual absl::Status OnControlMessage(ControlMessage msg) = 0;
};

class ControlStreamParser {
 public:
  explicit ControlStreamParser(ControlMessageVisitor* visitor);  // borrowed
  // FIN on the control stream is itself a protocol violation.
  absl::Status OnIngress(absl::Span<const uint8_t> data, bool fin);

 private:
  absl::Status Process(absl::Span<const uint8_t> data);
  absl::Status Deliver(uint64_t type, absl::string_view payload);

  ControlMessageVisitor* visitor_;
  std::string buffer_;  // one partial message: Type, Length and payload so far
  absl::Status failed_;
};

// ---- AUTHORIZATION TOKEN parameter -------------------------------------------

// The Token structure of an AUTHORIZATION TOKEN parameter's bytes. A value
// that cannot be decoded (unknown Alias Type, truncated, trailing bytes after
// an alias-only form) is KEY_VALUE_FORMATTING_ERROR, as the draft requires.
absl::StatusOr<AuthToken> ParseAuthToken(absl::string_view bytes);
std::string SerializeAuthToken(const AuthToken& token);

// ---- data streams (subgroup and fetch) ---------------------------------------

std::string SerializeSubgroupHeader(const SubgroupHeader& header);
// One object on a subgroup stream. `previous_object` is the id of the
// previous object on the stream (nullopt for the first one); object ids on a
// stream must increase. Normal objects carry `payload`; a zero-length
// payload with status != kNormal writes the status instead.
absl::Status SerializeSubgroupObject(const SubgroupHeader& header,
                                     std::optional<uint64_t> previous_object,
                                     const ObjectHeader& object,
                                     absl::Span<const uint8_t> payload,
                                     std::string* out);
// The same bytes up to the payload (which the caller sends after them, so
// a large payload is not copied into `out`).
absl::Status SerializeSubgroupObjectHeader(const SubgroupHeader& header,
                                           std::optional<uint64_t> previous_object,
                                           const ObjectHeader& object,
                                           absl::Span<const uint8_t> payload, std::string* out);
std::string SerializeFetchHeader(uint64_t request_id);
absl::Status SerializeFetchObject(const ObjectHeader& object,
                                  absl::Span<const uint8_t> payload,
                                  std::string* out);
// The fetched object without its payload bytes (which the caller sends
// right after), as SerializeSubgroupObjectHeader.
absl::Status SerializeFetchObjectHeader(const ObjectHeader& object,
                                        absl::Span<const uint8_t> payload, std::string* out);

class DataStreamVisitor {
 public:
  virtual ~DataStreamVisitor() = default;
  virtual absl::Status OnSubgroupHeader(const SubgroupHeader& header) = 0;
  virtual absl::Status OnFetchHeader(uint64_t request_id) = 0;
  // Called one or more times per object: first with the header and the first
  // payload fragment (possibly empty), `last` true on the call that
  // completes the payload. Status objects arrive as one call with an empty
  // payload and last = true. Fragments are only valid during the call.
  virtual absl::Status OnObject(const ObjectHeader& header,
                                absl::Span<const uint8_t> fragment, bool last) = 0;
  // The stream ended cleanly (FIN at an object boundary).
  virtual absl::Status OnStreamEnd() = 0;
};

class DataStreamParser {
 public:
  DataStreamParser(DataStreamVisitor* visitor, CodecLimits limits = {});
  absl::Status OnIngress(absl::Span<const uint8_t> data, bool fin);

 private:
  enum class Phase { kStreamHeader, kObjectHeader, kPayload, kFinished };
  absl::Status Process(absl::Span<const uint8_t> data, bool fin);
  // Parses the header `phase_` expects from the front of `bytes` and reports
  // it; returns the bytes it took, or nullopt if `bytes` ends inside it.
  absl::StatusOr<std::optional<size_t>> ParseHeader(absl::Span<const uint8_t> bytes);
  absl::Status ReportSubgroupHeader();
  absl::Status OnStreamFin();

  DataStreamVisitor* visitor_;
  CodecLimits limits_;
  Phase phase_ = Phase::kStreamHeader;
  std::string header_buffer_;  // a partial stream or object header (bounded)
  bool is_fetch_ = false;
  SubgroupHeader subgroup_;
  bool subgroup_reported_ = false;  // OnSubgroupHeader called
  bool group_ended_ = false;        // an End of Group/Track object was read
  std::optional<uint64_t> previous_object_;
  ObjectHeader current_;
  uint64_t payload_remaining_ = 0;
  bool first_fragment_due_ = false;  // current_'s first OnObject call is owed
  absl::Status failed_;
};

// ---- datagrams --------------------------------------------------------------

absl::Status SerializeDatagram(const Datagram& datagram, std::string* out);
absl::StatusOr<Datagram> ParseDatagram(absl::Span<const uint8_t> data,
                                       const CodecLimits& limits = {});

}  // namespace kvcast::moqt

#endif  // KVCAST_TRANSPORT_MOQT_CODEC_H_
