// Framing and streaming for the draft-14 codec. Field layouts live in
// internal/control_wire.cc (control message payloads) and
// internal/data_wire.cc (stream headers, objects, datagrams).
#include "transport/moqt/codec.h"

#include <algorithm>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "transport/moqt/internal/control_wire.h"
#include "transport/moqt/internal/data_wire.h"
#include "transport/moqt/internal/wire.h"

namespace kvcast::moqt {
namespace {

constexpr char kTerminationCodeUrl[] = "kvcast.moqt/termination-code";

absl::Span<const uint8_t> AsBytes(absl::string_view chars) {
  return absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(chars.data()), chars.size());
}

}  // namespace

absl::Status ProtocolError(TerminationCode code, const std::string& message) {
  absl::Status status = absl::InvalidArgumentError(message);
  status.SetPayload(kTerminationCodeUrl, absl::Cord(absl::StrCat(static_cast<uint64_t>(code))));
  return status;
}

TerminationCode TerminationCodeOf(const absl::Status& status) {
  if (status.ok()) return TerminationCode::kNoError;
  auto payload = status.GetPayload(kTerminationCodeUrl);
  uint64_t code = 0;
  if (!payload || !absl::SimpleAtoi(std::string(*payload), &code)) {
    return TerminationCode::kProtocolViolation;
  }
  return static_cast<TerminationCode>(code);
}

// ---- AUTHORIZATION TOKEN parameter -------------------------------------------

absl::StatusOr<AuthToken> ParseAuthToken(absl::string_view bytes) {
  internal::Reader reader(bytes);
  auto malformed = [](const std::string& why) {
    return ProtocolError(TerminationCode::kKeyValueFormattingError,
                         absl::StrCat("AUTHORIZATION TOKEN: ", why));
  };
  uint64_t alias_type = 0;
  if (!reader.ReadVarint(&alias_type)) return malformed("no Alias Type");
  if (alias_type > static_cast<uint64_t>(AuthAliasType::kUseValue)) {
    return malformed(absl::StrCat("unknown Alias Type 0x", absl::Hex(alias_type)));
  }
  AuthToken token;
  token.alias_type = static_cast<AuthAliasType>(alias_type);
  bool has_alias = token.alias_type != AuthAliasType::kUseValue;
  bool has_value = token.alias_type == AuthAliasType::kRegister ||
                   token.alias_type == AuthAliasType::kUseValue;
  if (has_alias && !reader.ReadVarint(&token.alias)) return malformed("no Token Alias");
  if (has_value) {
    if (!reader.ReadVarint(&token.token_type)) return malformed("no Token Type");
    token.value = std::string(reader.ReadRemaining());
  } else if (!reader.empty()) {
    return malformed("bytes after an alias-only token");
  }
  return token;
}

std::string SerializeAuthToken(const AuthToken& token) {
  std::string out;
  internal::Writer writer(&out);
  writer.WriteVarint(static_cast<uint64_t>(token.alias_type));
  if (token.alias_type != AuthAliasType::kUseValue) writer.WriteVarint(token.alias);
  if (token.alias_type == AuthAliasType::kRegister ||
      token.alias_type == AuthAliasType::kUseValue) {
    writer.WriteVarint(token.token_type);
    writer.WriteBytes(token.value);
  }
  return out;
}

// ---- control stream ---------------------------------------------------------

// Every control message, PUBLISH/PUBLISH_OK/PUBLISH_ERROR included, is framed
// with a 16-bit Message Length. (Draft-14's figures for the three PUBLISH
// messages show "Length (i)"; that is a typo: the "Control Messages" section
// defines one framing for every message.)
absl::Status SerializeControlMessage(const ControlMessage& msg, std::string* out) {
  std::string payload;
  RETURN_IF_ERROR(internal::WriteControlPayload(msg, &payload));
  if (payload.size() > internal::kMaxControlPayload) {
    return absl::InvalidArgumentError(absl::StrCat(MessageName(msg), " payload of ",
                                                   payload.size(), " bytes exceeds 65535"));
  }
  internal::Writer writer(out);
  writer.WriteVarint(MessageType(msg));
  writer.WriteUint16(static_cast<uint16_t>(payload.size()));
  writer.WriteBytes(payload);
  return absl::OkStatus();
}

ControlStreamParser::ControlStreamParser(ControlMessageVisitor* visitor) : visitor_(visitor) {}

absl::Status ControlStreamParser::OnIngress(absl::Span<const uint8_t> data, bool fin) {
  if (!failed_.ok()) return failed_;
  absl::Status status = Process(data);
  if (status.ok() && fin) {
    status = ProtocolError(TerminationCode::kProtocolViolation, "FIN on the control stream");
  }
  failed_ = status;
  return status;
}

namespace {

absl::Status CheckControlType(uint64_t type) {
  if (internal::IsKnownControlType(type)) return absl::OkStatus();
  return ProtocolError(TerminationCode::kProtocolViolation,
                       absl::StrCat("unknown control message type 0x", absl::Hex(type)));
}

}  // namespace

absl::Status ControlStreamParser::Process(absl::Span<const uint8_t> data) {
  while (!data.empty()) {
    if (buffer_.empty()) {
      // Fast path: a whole message in `data` is parsed in place.
      internal::Reader reader(data);
      uint64_t type = 0;
      uint16_t length = 0;
      if (reader.ReadVarint(&type)) {
        RETURN_IF_ERROR(CheckControlType(type));
        absl::string_view payload;
        if (reader.ReadUint16(&length) && reader.ReadBytes(length, &payload)) {
          RETURN_IF_ERROR(Deliver(type, payload));
          data.remove_prefix(reader.offset());
          continue;
        }
      }
      // Less than one message (< 8 + 2 + 65535 bytes): keep it.
      buffer_.assign(reinterpret_cast<const char*>(data.data()), data.size());
      return absl::OkStatus();
    }
    // Complete the buffered message: first Type and Length, then the payload.
    // The buffer only ever holds bytes that arrived.
    const size_t type_length = size_t{1} << (static_cast<uint8_t>(buffer_[0]) >> 6);
    const size_t header_length = type_length + 2;
    auto take = [this, &data](size_t wanted) {
      const size_t n = std::min(wanted - std::min(wanted, buffer_.size()), data.size());
      buffer_.append(reinterpret_cast<const char*>(data.data()), n);
      data.remove_prefix(n);
    };
    take(header_length);
    internal::Reader reader(buffer_);
    uint64_t type = 0;
    uint16_t length = 0;
    if (!reader.ReadVarint(&type)) return absl::OkStatus();
    RETURN_IF_ERROR(CheckControlType(type));
    if (!reader.ReadUint16(&length)) return absl::OkStatus();
    take(header_length + length);
    if (buffer_.size() < header_length + length) return absl::OkStatus();
    const std::string message = std::move(buffer_);
    buffer_.clear();
    RETURN_IF_ERROR(Deliver(type, absl::string_view(message).substr(header_length)));
  }
  return absl::OkStatus();
}

absl::Status ControlStreamParser::Deliver(uint64_t type, absl::string_view payload) {
  ASSIGN_OR_RETURN(ControlMessage msg, internal::ParseControlPayload(type, payload));
  return visitor_->OnControlMessage(std::move(msg));
}

// ---- data streams -------------------------------------------------------------

// The header serializers return an empty string if a field exceeds 2^62-1.
std::string SerializeSubgroupHeader(const SubgroupHeader& header) {
  std::string out;
  if (!internal::WriteSubgroupHeader(header, &out).ok()) out.clear();
  return out;
}

// The object's payload_length, group and (for subgroup streams) subgroup and
// priority fields are not used: the payload's size is written, and the
// stream header carries the rest.
absl::Status SerializeSubgroupObject(const SubgroupHeader& header,
                                     std::optional<uint64_t> previous_object,
                                     const ObjectHeader& object, absl::Span<const uint8_t> payload,
                                     std::string* out) {
  return internal::WriteSubgroupObject(header, previous_object, object, payload, out);
}

absl::Status SerializeSubgroupObjectHeader(const SubgroupHeader& header,
                                           std::optional<uint64_t> previous_object,
                                           const ObjectHeader& object,
                                           absl::Span<const uint8_t> payload, std::string* out) {
  return internal::WriteSubgroupObject(header, previous_object, object, payload, out,
                                       /*with_payload=*/false);
}

std::string SerializeFetchHeader(uint64_t request_id) {
  std::string out;
  if (!internal::WriteFetchHeader(request_id, &out).ok()) out.clear();
  return out;
}

absl::Status SerializeFetchObject(const ObjectHeader& object, absl::Span<const uint8_t> payload,
                                  std::string* out) {
  return internal::WriteFetchObject(object, payload, out);
}

absl::Status SerializeFetchObjectHeader(const ObjectHeader& object,
                                        absl::Span<const uint8_t> payload, std::string* out) {
  return internal::WriteFetchObject(object, payload, out, /*with_payload=*/false);
}

DataStreamParser::DataStreamParser(DataStreamVisitor* visitor, CodecLimits limits)
    : visitor_(visitor), limits_(limits) {}

absl::Status DataStreamParser::OnIngress(absl::Span<const uint8_t> data, bool fin) {
  if (!failed_.ok()) return failed_;
  failed_ = Process(data, fin);
  return failed_;
}

absl::Status DataStreamParser::Process(absl::Span<const uint8_t> data, bool fin) {
  const size_t max_header = internal::MaxHeaderLength(limits_);
  while (true) {
    if (phase_ == Phase::kFinished) {
      if (!data.empty()) {
        return ProtocolError(TerminationCode::kProtocolViolation, "data after FIN");
      }
      return absl::OkStatus();
    }
    if (phase_ == Phase::kPayload) {
      // Payload bytes go to the visitor straight from `data`, never buffered.
      const size_t n = static_cast<size_t>(std::min<uint64_t>(payload_remaining_, data.size()));
      if (n == 0 && !first_fragment_due_) break;
      first_fragment_due_ = false;
      payload_remaining_ -= n;
      const bool last = payload_remaining_ == 0;
      if (last) phase_ = Phase::kObjectHeader;
      RETURN_IF_ERROR(visitor_->OnObject(current_, data.first(n), last));
      data.remove_prefix(n);
      continue;
    }
    if (data.empty()) break;
    if (header_buffer_.empty()) {
      ASSIGN_OR_RETURN(std::optional<size_t> used, ParseHeader(data));
      if (used) {
        data.remove_prefix(*used);
        continue;
      }
      if (data.size() >= max_header) return absl::InternalError("header parser stalled");
      header_buffer_.assign(reinterpret_cast<const char*>(data.data()), data.size());
      break;
    }
    // A header split across calls: extend the buffered part by at most what
    // one header can take, so a large payload behind it is never copied.
    const size_t buffered = header_buffer_.size();
    const size_t n = std::min(data.size(), max_header - std::min(max_header, buffered));
    header_buffer_.append(reinterpret_cast<const char*>(data.data()), n);
    ASSIGN_OR_RETURN(std::optional<size_t> used, ParseHeader(AsBytes(header_buffer_)));
    if (!used) {
      if (n < data.size()) return absl::InternalError("header parser stalled");
      break;
    }
    // The buffered bytes alone were not a whole header, so used > buffered.
    data.remove_prefix(*used - buffered);
    header_buffer_.clear();
  }
  if (!fin) return absl::OkStatus();
  return OnStreamFin();
}

absl::StatusOr<std::optional<size_t>> DataStreamParser::ParseHeader(
    absl::Span<const uint8_t> bytes) {
  internal::Reader reader(bytes);
  if (phase_ == Phase::kStreamHeader) {
    internal::StreamHeader header;
    ASSIGN_OR_RETURN(internal::Progress progress, internal::ParseStreamHeader(&reader, &header));
    if (progress == internal::Progress::kNeedMore) return std::nullopt;
    phase_ = Phase::kObjectHeader;
    is_fetch_ = header.is_fetch;
    if (is_fetch_) {
      RETURN_IF_ERROR(visitor_->OnFetchHeader(header.fetch_request_id));
    } else {
      subgroup_ = header.subgroup;
      // A first-object-id subgroup is reported once its first object's id
      // is known (see ReportSubgroupHeader).
      if (subgroup_.subgroup_mode != SubgroupHeader::SubgroupIdMode::kFirstObject) {
        RETURN_IF_ERROR(ReportSubgroupHeader());
      }
    }
    return reader.offset();
  }

  ObjectHeader object;
  internal::Progress progress;
  if (is_fetch_) {
    ASSIGN_OR_RETURN(progress, internal::ParseFetchObjectHeader(&reader, limits_, &object));
  } else {
    if (group_ended_) {
      return ProtocolError(TerminationCode::kProtocolViolation,
                           "object after an End of Group or End of Track object");
    }
    ASSIGN_OR_RETURN(progress, internal::ParseSubgroupObjectHeader(&reader, subgroup_,
                                                                   previous_object_, limits_,
                                                                   &object));
  }
  if (progress == internal::Progress::kNeedMore) return std::nullopt;
  if (!is_fetch_) {
    if (!subgroup_reported_) {
      subgroup_.subgroup = object.subgroup;
      RETURN_IF_ERROR(ReportSubgroupHeader());
    }
    previous_object_ = object.object;
    group_ended_ = object.status == ObjectStatus::kEndOfGroup ||
                   object.status == ObjectStatus::kEndOfTrack;
  }
  current_ = std::move(object);
  if (current_.payload_length == 0) {
    RETURN_IF_ERROR(visitor_->OnObject(current_, {}, /*last=*/true));
  } else {
    phase_ = Phase::kPayload;
    payload_remaining_ = current_.payload_length;
    first_fragment_due_ = true;
  }
  return reader.offset();
}

absl::Status DataStreamParser::ReportSubgroupHeader() {
  subgroup_reported_ = true;
  return visitor_->OnSubgroupHeader(subgroup_);
}

absl::Status DataStreamParser::OnStreamFin() {
  if (phase_ == Phase::kStreamHeader) {
    return ProtocolError(TerminationCode::kProtocolViolation, "FIN inside the stream header");
  }
  if (phase_ == Phase::kPayload || !header_buffer_.empty()) {
    return ProtocolError(TerminationCode::kProtocolViolation, "FIN in the middle of an object");
  }
  phase_ = Phase::kFinished;
  // A first-object-id subgroup that ends with no object has no knowable id;
  // it is reported with subgroup 0 so the visitor still sees the header.
  if (!is_fetch_ && !subgroup_reported_) RETURN_IF_ERROR(ReportSubgroupHeader());
  return visitor_->OnStreamEnd();
}

// ---- datagrams ----------------------------------------------------------------

absl::Status SerializeDatagram(const Datagram& datagram, std::string* out) {
  return internal::WriteDatagram(datagram, out);
}

absl::StatusOr<Datagram> ParseDatagram(absl::Span<const uint8_t> data, const CodecLimits& limits) {
  return internal::ReadDatagram(data, limits);
}

}  // namespace kvcast::moqt
