#include "transport/moqt/internal/data_wire.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace kvcast::moqt::internal {
namespace {

// SUBGROUP_HEADER type bits (draft-14 "Subgroup Header" table).
constexpr uint64_t kSubgroupBase = 0x10;
constexpr uint64_t kSubgroupExtensions = 0x01;
constexpr uint64_t kSubgroupModeMask = 0x06;  // 0: id 0, 2: first object id, 4: explicit
constexpr uint64_t kSubgroupFirstObject = 0x02;
constexpr uint64_t kSubgroupExplicit = 0x04;
constexpr uint64_t kSubgroupEndOfGroup = 0x08;

// OBJECT_DATAGRAM type bits (draft-14 "Object Datagram" table).
constexpr uint64_t kDatagramExtensions = 0x01;
constexpr uint64_t kDatagramEndOfGroup = 0x02;
constexpr uint64_t kDatagramNoObjectId = 0x04;
constexpr uint64_t kDatagramStatus = 0x20;

absl::Status Violation(const std::string& what) {
  return ProtocolError(TerminationCode::kProtocolViolation, what);
}

bool IsKnownStatus(uint64_t status) {
  return status == 0x0 || status == 0x1 || status == 0x3 || status == 0x4;
}

// Extension Headers Length (i) + Extension headers: checked against the limit
// before the block is waited for.
absl::StatusOr<Progress> ParseExtensions(Reader* reader, const CodecLimits& limits,
                                         Parameters* extensions, uint64_t* length) {
  if (!reader->ReadVarint(length)) return Progress::kNeedMore;
  if (*length > limits.max_extension_bytes) {
    return Violation(absl::StrCat("extension headers of ", *length, " bytes exceed the limit of ",
                                  limits.max_extension_bytes));
  }
  absl::string_view block;
  if (!reader->ReadBytes(*length, &block)) return Progress::kNeedMore;
  RETURN_IF_ERROR(ParseKeyValueBlock(block, extensions));
  return Progress::kDone;
}

// Object Payload Length (i) + [Object Status (i)], shared by subgroup and
// fetch objects.
absl::StatusOr<Progress> ParseLengthAndStatus(Reader* reader, const CodecLimits& limits,
                                              ObjectHeader* object) {
  if (!reader->ReadVarint(&object->payload_length)) return Progress::kNeedMore;
  if (object->payload_length > limits.max_object_payload) {
    return Violation(absl::StrCat("object payload of ", object->payload_length,
                                  " bytes exceeds the limit of ", limits.max_object_payload));
  }
  object->status = ObjectStatus::kNormal;
  if (object->payload_length == 0) {
    uint64_t status = 0;
    if (!reader->ReadVarint(&status)) return Progress::kNeedMore;
    if (!IsKnownStatus(status)) return Violation(absl::StrCat("unknown Object Status ", status));
    object->status = static_cast<ObjectStatus>(status);
  }
  if (object->status == ObjectStatus::kDoesNotExist && !object->extensions.empty()) {
    return Violation("an Object Does Not Exist status carries extension headers");
  }
  return Progress::kDone;
}

// Checks shared by the object serializers.
absl::Status CheckObject(const ObjectHeader& object, absl::Span<const uint8_t> payload) {
  if (!IsKnownStatus(static_cast<uint64_t>(object.status))) {
    return absl::InvalidArgumentError("unknown Object Status");
  }
  if (object.status != ObjectStatus::kNormal && !payload.empty()) {
    return absl::InvalidArgumentError("an object with a status other than Normal has a payload");
  }
  if (object.status == ObjectStatus::kDoesNotExist && !object.extensions.empty()) {
    return absl::InvalidArgumentError("an Object Does Not Exist status carries extensions");
  }
  return absl::OkStatus();
}

// Object Payload Length (i) + [Object Status (i)] + Object Payload (..).
void WriteLengthStatusPayload(const ObjectHeader& object, absl::Span<const uint8_t> payload,
                              Writer* w, bool with_payload = true) {
  w->WriteVarint(payload.size());
  if (payload.empty()) w->WriteVarint(static_cast<uint64_t>(object.status));
  if (!with_payload) return;
  w->WriteBytes(absl::string_view(reinterpret_cast<const char*>(payload.data()), payload.size()));
}

void WriteExtensions(const Parameters& extensions, Writer* w) {
  std::string block;
  Writer block_writer(&block);
  WriteKeyValueBlock(extensions, &block_writer);
  if (!block_writer.status().ok()) w->Fail(std::string(block_writer.status().message()));
  w->WriteLengthPrefixed(block);
}

// Runs `write` appending to `out`; on error cuts `out` back to where it was,
// so nothing is appended. Writes in place: an object's payload is copied
// once, straight into `out`.
template <typename WriteFn>
absl::Status AppendIfValid(std::string* out, WriteFn write) {
  const size_t old_size = out->size();
  Writer writer(out);
  write(&writer);
  if (!writer.status().ok()) {
    out->resize(old_size);
    return writer.status();
  }
  return absl::OkStatus();
}

}  // namespace

uint64_t SubgroupHeaderType(const SubgroupHeader& header) {
  uint64_t type = kSubgroupBase;
  if (header.has_extensions) type |= kSubgroupExtensions;
  if (header.end_of_group) type |= kSubgroupEndOfGroup;
  switch (header.subgroup_mode) {
    case SubgroupHeader::SubgroupIdMode::kZero:
      break;
    case SubgroupHeader::SubgroupIdMode::kFirstObject:
      type |= kSubgroupFirstObject;
      break;
    case SubgroupHeader::SubgroupIdMode::kExplicit:
      type |= kSubgroupExplicit;
      break;
  }
  return type;
}

absl::StatusOr<Progress> ParseStreamHeader(Reader* reader, StreamHeader* header) {
  uint64_t type = 0;
  if (!reader->ReadVarint(&type)) return Progress::kNeedMore;
  if (type == kFetchHeaderType) {
    header->is_fetch = true;
    if (!reader->ReadVarint(&header->fetch_request_id)) return Progress::kNeedMore;
    return Progress::kDone;
  }
  const uint64_t mode = type & kSubgroupModeMask;
  if ((type & ~(kSubgroupExtensions | kSubgroupModeMask | kSubgroupEndOfGroup)) != kSubgroupBase ||
      mode == kSubgroupModeMask) {
    return Violation(absl::StrCat("unknown stream type 0x", absl::Hex(type)));
  }
  SubgroupHeader& sub = header->subgroup;
  header->is_fetch = false;
  sub.has_extensions = (type & kSubgroupExtensions) != 0;
  sub.end_of_group = (type & kSubgroupEndOfGroup) != 0;
  sub.subgroup_mode = mode == 0                      ? SubgroupHeader::SubgroupIdMode::kZero
                      : mode == kSubgroupFirstObject ? SubgroupHeader::SubgroupIdMode::kFirstObject
                                                     : SubgroupHeader::SubgroupIdMode::kExplicit;
  sub.subgroup = 0;
  if (!reader->ReadVarint(&sub.track_alias) || !reader->ReadVarint(&sub.group)) {
    return Progress::kNeedMore;
  }
  if (mode == kSubgroupExplicit && !reader->ReadVarint(&sub.subgroup)) return Progress::kNeedMore;
  if (!reader->ReadUint8(&sub.publisher_priority)) return Progress::kNeedMore;
  return Progress::kDone;
}

absl::StatusOr<Progress> ParseSubgroupObjectHeader(Reader* reader, const SubgroupHeader& header,
                                                   std::optional<uint64_t> previous_object,
                                                   const CodecLimits& limits, ObjectHeader* object) {
  uint64_t delta = 0;
  if (!reader->ReadVarint(&delta)) return Progress::kNeedMore;
  uint64_t id = delta;
  if (previous_object) {
    // previous + delta + 1 must still be a varint value.
    if (delta >= kMaxVarint - *previous_object) return Violation("Object ID overflows 2^62-1");
    id = *previous_object + delta + 1;
  }
  object->group = header.group;
  object->object = id;
  object->publisher_priority = header.publisher_priority;
  object->subgroup =
      header.subgroup_mode == SubgroupHeader::SubgroupIdMode::kFirstObject && !previous_object
          ? id
          : header.subgroup;
  object->extensions.clear();
  if (header.has_extensions) {
    uint64_t length = 0;
    ASSIGN_OR_RETURN(Progress progress,
                     ParseExtensions(reader, limits, &object->extensions, &length));
    if (progress == Progress::kNeedMore) return progress;
  }
  return ParseLengthAndStatus(reader, limits, object);
}

absl::StatusOr<Progress> ParseFetchObjectHeader(Reader* reader, const CodecLimits& limits,
                                                ObjectHeader* object) {
  if (!reader->ReadVarint(&object->group) || !reader->ReadVarint(&object->subgroup) ||
      !reader->ReadVarint(&object->object) || !reader->ReadUint8(&object->publisher_priority)) {
    return Progress::kNeedMore;
  }
  uint64_t length = 0;
  object->extensions.clear();
  ASSIGN_OR_RETURN(Progress progress, ParseExtensions(reader, limits, &object->extensions, &length));
  if (progress == Progress::kNeedMore) return progress;
  return ParseLengthAndStatus(reader, limits, object);
}

size_t MaxHeaderLength(const CodecLimits& limits) {
  // Fetch object: 6 varints + priority byte + extensions; stream headers are
  // shorter (at most 4 varints + priority byte).
  constexpr size_t kFixed = 6 * kMaxVarintLength + 1;
  constexpr uint64_t kMaxExtensions = std::numeric_limits<size_t>::max() - kFixed;
  return kFixed + static_cast<size_t>(std::min<uint64_t>(limits.max_extension_bytes,
                                                         kMaxExtensions));
}

absl::Status WriteSubgroupHeader(const SubgroupHeader& header, std::string* out) {
  return AppendIfValid(out, [&header](Writer* w) {
    w->WriteVarint(SubgroupHeaderType(header));
    w->WriteVarint(header.track_alias);
    w->WriteVarint(header.group);
    if (header.subgroup_mode == SubgroupHeader::SubgroupIdMode::kExplicit) {
      w->WriteVarint(header.subgroup);
    }
    w->WriteUint8(header.publisher_priority);
  });
}

absl::Status WriteSubgroupObject(const SubgroupHeader& header,
                                 std::optional<uint64_t> previous_object,
                                 const ObjectHeader& object, absl::Span<const uint8_t> payload,
                                 std::string* out, bool with_payload) {
  RETURN_IF_ERROR(CheckObject(object, payload));
  if (previous_object && object.object <= *previous_object) {
    return absl::InvalidArgumentError(absl::StrCat("object ", object.object,
                                                   " does not follow object ", *previous_object));
  }
  if (!header.has_extensions && !object.extensions.empty()) {
    return absl::InvalidArgumentError("extensions on a subgroup stream whose type has none");
  }
  if (header.subgroup_mode == SubgroupHeader::SubgroupIdMode::kFirstObject && !previous_object &&
      header.subgroup != object.object) {
    return absl::InvalidArgumentError(
        "the first object's id must equal the subgroup id of a first-object-id stream");
  }
  return AppendIfValid(out, [&](Writer* w) {
    w->WriteVarint(previous_object ? object.object - *previous_object - 1 : object.object);
    if (header.has_extensions) WriteExtensions(object.extensions, w);
    WriteLengthStatusPayload(object, payload, w, with_payload);
  });
}

absl::Status WriteFetchHeader(uint64_t request_id, std::string* out) {
  return AppendIfValid(out, [request_id](Writer* w) {
    w->WriteVarint(kFetchHeaderType);
    w->WriteVarint(request_id);
  });
}

absl::Status WriteFetchObject(const ObjectHeader& object, absl::Span<const uint8_t> payload,
                              std::string* out, bool with_payload) {
  RETURN_IF_ERROR(CheckObject(object, payload));
  return AppendIfValid(out, [&](Writer* w) {
    w->WriteVarint(object.group);
    w->WriteVarint(object.subgroup);
    w->WriteVarint(object.object);
    w->WriteUint8(object.publisher_priority);
    WriteExtensions(object.extensions, w);
    WriteLengthStatusPayload(object, payload, w, with_payload);
  });
}

absl::Status WriteDatagram(const Datagram& datagram, std::string* out) {
  const ObjectHeader& object = datagram.object;
  const auto payload = absl::MakeConstSpan(
      reinterpret_cast<const uint8_t*>(datagram.payload.data()), datagram.payload.size());
  RETURN_IF_ERROR(CheckObject(object, payload));
  const bool with_status = object.status != ObjectStatus::kNormal;
  if (with_status && datagram.end_of_group) {
    return absl::InvalidArgumentError("no datagram type carries a status and End of Group");
  }
  uint64_t type = with_status ? kDatagramStatus : 0;
  if (!object.extensions.empty()) type |= kDatagramExtensions;
  if (!with_status && datagram.end_of_group) type |= kDatagramEndOfGroup;
  if (!with_status && object.object == 0) type |= kDatagramNoObjectId;
  return AppendIfValid(out, [&](Writer* w) {
    w->WriteVarint(type);
    w->WriteVarint(datagram.track_alias);
    w->WriteVarint(object.group);
    if ((type & kDatagramNoObjectId) == 0) w->WriteVarint(object.object);
    w->WriteUint8(object.publisher_priority);
    if (type & kDatagramExtensions) WriteExtensions(object.extensions, w);
    if (with_status) {
      w->WriteVarint(static_cast<uint64_t>(object.status));
    } else {
      w->WriteBytes(datagram.payload);
    }
  });
}

absl::StatusOr<Datagram> ReadDatagram(absl::Span<const uint8_t> data, const CodecLimits& limits) {
  Reader reader(data);
  auto truncated = [] { return Violation("datagram ends inside its header"); };
  uint64_t type = 0;
  if (!reader.ReadVarint(&type)) return truncated();
  const bool with_status = (type & kDatagramStatus) != 0;
  if (type > 0x07 && type != kDatagramStatus && type != (kDatagramStatus | kDatagramExtensions)) {
    return Violation(absl::StrCat("unknown datagram type 0x", absl::Hex(type)));
  }
  Datagram datagram;
  ObjectHeader& object = datagram.object;
  datagram.end_of_group = (type & kDatagramEndOfGroup) != 0;
  if (!reader.ReadVarint(&datagram.track_alias) || !reader.ReadVarint(&object.group)) {
    return truncated();
  }
  if ((type & kDatagramNoObjectId) == 0 && !reader.ReadVarint(&object.object)) return truncated();
  if (!reader.ReadUint8(&object.publisher_priority)) return truncated();
  if (type & kDatagramExtensions) {
    uint64_t length = 0;
    ASSIGN_OR_RETURN(Progress progress,
                     ParseExtensions(&reader, limits, &object.extensions, &length));
    if (progress == Progress::kNeedMore) return truncated();
    if (length == 0) return Violation("datagram with Extensions Present has no extensions");
  }
  if (with_status) {
    uint64_t status = 0;
    if (!reader.ReadVarint(&status)) return truncated();
    if (!IsKnownStatus(status)) return Violation(absl::StrCat("unknown Object Status ", status));
    object.status = static_cast<ObjectStatus>(status);
    if (!reader.empty()) return Violation("bytes after a datagram's Object Status");
    if (object.status == ObjectStatus::kDoesNotExist && !object.extensions.empty()) {
      return Violation("an Object Does Not Exist status carries extension headers");
    }
  } else {
    if (reader.remaining() > limits.max_object_payload) {
      return Violation(absl::StrCat("datagram payload of ", reader.remaining(),
                                    " bytes exceeds the limit of ", limits.max_object_payload));
    }
    datagram.payload = std::string(reader.ReadRemaining());
    object.payload_length = datagram.payload.size();
  }
  return datagram;
}

}  // namespace kvcast::moqt::internal
