// Draft-14 data plane encodings: SUBGROUP_HEADER and FETCH_HEADER stream
// headers, the per-object fields on subgroup and fetch streams, and
// OBJECT_DATAGRAM. The streaming state machine lives in codec.cc.
//
// Thread safety: pure functions.
#ifndef KVCAST_TRANSPORT_MOQT_INTERNAL_DATA_WIRE_H_
#define KVCAST_TRANSPORT_MOQT_INTERNAL_DATA_WIRE_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "transport/moqt/codec.h"
#include "transport/moqt/internal/wire.h"
#include "transport/moqt/messages.h"

namespace kvcast::moqt::internal {

inline constexpr uint64_t kFetchHeaderType = 0x05;

// The stream type (0x10..0x15, 0x18..0x1D) `header` is written with.
uint64_t SubgroupHeaderType(const SubgroupHeader& header);

// First bytes of a unidirectional stream: Type (i) and the header fields.
// An unknown stream type is PROTOCOL_VIOLATION. For kFirstObject headers
// `subgroup` stays 0 (the first object supplies it).
struct StreamHeader {
  bool is_fetch = false;
  uint64_t fetch_request_id = 0;
  SubgroupHeader subgroup;
};
absl::StatusOr<Progress> ParseStreamHeader(Reader* reader, StreamHeader* header);

// The fields before an object's payload on a subgroup stream. `header` gives
// group, priority and (once resolved) subgroup; `previous_object` is the id
// of the previous object on the stream. Limits, Object Status values and
// Object ID overflow are checked as soon as the field is read.
absl::StatusOr<Progress> ParseSubgroupObjectHeader(Reader* reader, const SubgroupHeader& header,
                                                   std::optional<uint64_t> previous_object,
                                                   const CodecLimits& limits, ObjectHeader* object);
// The fields before an object's payload on a fetch stream.
absl::StatusOr<Progress> ParseFetchObjectHeader(Reader* reader, const CodecLimits& limits,
                                                ObjectHeader* object);
// An upper bound on the bytes of any stream or object header under `limits`.
size_t MaxHeaderLength(const CodecLimits& limits);

// Serializers behind the codec.h functions of the same names; on error
// nothing is appended to `out`.
absl::Status WriteSubgroupHeader(const SubgroupHeader& header, std::string* out);
absl::Status WriteSubgroupObject(const SubgroupHeader& header,
                                 std::optional<uint64_t> previous_object,
                                 const ObjectHeader& object, absl::Span<const uint8_t> payload,
                                 std::string* out, bool with_payload = true);
absl::Status WriteFetchHeader(uint64_t request_id, std::string* out);
absl::Status WriteFetchObject(const ObjectHeader& object, absl::Span<const uint8_t> payload,
                              std::string* out, bool with_payload = true);
absl::Status WriteDatagram(const Datagram& datagram, std::string* out);
absl::StatusOr<Datagram> ReadDatagram(absl::Span<const uint8_t> data, const CodecLimits& limits);

}  // namespace kvcast::moqt::internal

#endif  // KVCAST_TRANSPORT_MOQT_INTERNAL_DATA_WIRE_H_
