#include "transport/moqt/internal/wire.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "transport/moqt/codec.h"

namespace kvcast::moqt::internal {

size_t VarintLength(uint64_t v) {
  if (v < (1ull << 6)) return 1;
  if (v < (1ull << 14)) return 2;
  if (v < (1ull << 30)) return 4;
  return 8;
}

bool Reader::ReadVarint(uint64_t* value) {
  if (empty()) return false;
  const size_t length = size_t{1} << (data_[offset_] >> 6);
  if (remaining() < length) return false;
  uint64_t v = data_[offset_] & 0x3f;
  for (size_t i = 1; i < length; ++i) v = (v << 8) | data_[offset_ + i];
  offset_ += length;
  *value = v;
  return true;
}

bool Reader::ReadUint8(uint8_t* value) {
  if (empty()) return false;
  *value = data_[offset_++];
  return true;
}

bool Reader::ReadUint16(uint16_t* value) {
  if (remaining() < 2) return false;
  *value = static_cast<uint16_t>((data_[offset_] << 8) | data_[offset_ + 1]);
  offset_ += 2;
  return true;
}

bool Reader::ReadBytes(uint64_t n, absl::string_view* out) {
  if (remaining() < n) return false;
  *out = absl::string_view(reinterpret_cast<const char*>(data_.data()) + offset_,
                           static_cast<size_t>(n));
  offset_ += static_cast<size_t>(n);
  return true;
}

absl::string_view Reader::ReadRemaining() {
  absl::string_view rest;
  ReadBytes(remaining(), &rest);
  return rest;
}

void Writer::WriteVarint(uint64_t value) {
  if (value > kMaxVarint) {
    Fail(absl::StrCat("value ", value, " does not fit a varint"));
    return;
  }
  const size_t length = VarintLength(value);
  const uint8_t prefix = length == 1 ? 0x00 : length == 2 ? 0x40 : length == 4 ? 0x80 : 0xc0;
  for (size_t i = 0; i < length; ++i) {
    uint8_t byte = static_cast<uint8_t>(value >> (8 * (length - 1 - i)));
    if (i == 0) byte |= prefix;
    out_->push_back(static_cast<char>(byte));
  }
}

void Writer::WriteUint8(uint8_t value) { out_->push_back(static_cast<char>(value)); }

void Writer::WriteUint16(uint16_t value) {
  out_->push_back(static_cast<char>(value >> 8));
  out_->push_back(static_cast<char>(value & 0xff));
}

void Writer::WriteBytes(absl::string_view bytes) { out_->append(bytes.data(), bytes.size()); }

void Writer::WriteLengthPrefixed(absl::string_view bytes) {
  WriteVarint(bytes.size());
  WriteBytes(bytes);
}

void Writer::Fail(const std::string& message) {
  if (status_.ok()) status_ = absl::InvalidArgumentError(message);
}

// ---- composite fields --------------------------------------------------------

absl::StatusOr<Progress> ParseKeyValuePair(Reader* reader, KeyValuePair* kvp) {
  uint64_t type = 0;
  if (!reader->ReadVarint(&type)) return Progress::kNeedMore;
  kvp->type = type;
  kvp->int_value = 0;
  kvp->bytes_value.clear();
  if (type % 2 == 0) {
    if (!reader->ReadVarint(&kvp->int_value)) return Progress::kNeedMore;
    return Progress::kDone;
  }
  uint64_t length = 0;
  if (!reader->ReadVarint(&length)) return Progress::kNeedMore;
  if (length > kMaxKvpValueLength) {
    return ProtocolError(TerminationCode::kProtocolViolation,
                         absl::StrCat("Key-Value-Pair type ", type, " length ", length,
                                      " exceeds 65535"));
  }
  absl::string_view value;
  if (!reader->ReadBytes(length, &value)) return Progress::kNeedMore;
  kvp->bytes_value = std::string(value);
  return Progress::kDone;
}

void WriteKeyValuePair(const KeyValuePair& kvp, Writer* writer) {
  writer->WriteVarint(kvp.type);
  if (kvp.type % 2 == 0) {
    if (!kvp.bytes_value.empty()) {
      writer->Fail(absl::StrCat("even Key-Value-Pair type ", kvp.type, " carries bytes"));
    }
    writer->WriteVarint(kvp.int_value);
    return;
  }
  if (kvp.int_value != 0) {
    writer->Fail(absl::StrCat("odd Key-Value-Pair type ", kvp.type, " carries an integer"));
  }
  if (kvp.bytes_value.size() > kMaxKvpValueLength) {
    writer->Fail(absl::StrCat("Key-Value-Pair type ", kvp.type, " value of ",
                              kvp.bytes_value.size(), " bytes exceeds 65535"));
  }
  writer->WriteLengthPrefixed(kvp.bytes_value);
}

namespace {

// Sums the lengths of the namespace's elements into *total, checking the
// 4096-byte Full Track Name limit as it goes.
absl::StatusOr<Progress> ParseNamespaceCounting(Reader* reader, TrackNamespace* ns,
                                                uint64_t* total) {
  uint64_t count = 0;
  if (!reader->ReadVarint(&count)) return Progress::kNeedMore;
  if (count == 0 || count > kMaxNamespaceElements) {
    return ProtocolError(TerminationCode::kProtocolViolation,
                         absl::StrCat("track namespace has ", count, " elements (1..32 allowed)"));
  }
  ns->clear();
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t length = 0;
    if (!reader->ReadVarint(&length)) return Progress::kNeedMore;
    *total += length;  // no overflow: length <= 2^62-1 and *total <= 4096
    if (*total > kMaxFullTrackNameLength) {
      return ProtocolError(TerminationCode::kProtocolViolation,
                           "track namespace exceeds 4096 bytes");
    }
    absl::string_view element;
    if (!reader->ReadBytes(length, &element)) return Progress::kNeedMore;
    ns->emplace_back(element);
  }
  return Progress::kDone;
}

uint64_t NamespaceBytes(const TrackNamespace& ns) {
  uint64_t total = 0;
  for (const std::string& element : ns) total += element.size();
  return total;
}

}  // namespace

absl::StatusOr<Progress> ParseNamespace(Reader* reader, TrackNamespace* ns) {
  uint64_t total = 0;
  return ParseNamespaceCounting(reader, ns, &total);
}

void WriteNamespace(const TrackNamespace& ns, Writer* writer) {
  if (ns.empty() || ns.size() > kMaxNamespaceElements) {
    writer->Fail(absl::StrCat("track namespace has ", ns.size(), " elements (1..32 allowed)"));
  }
  if (NamespaceBytes(ns) > kMaxFullTrackNameLength) {
    writer->Fail("track namespace exceeds 4096 bytes");
  }
  writer->WriteVarint(ns.size());
  for (const std::string& element : ns) writer->WriteLengthPrefixed(element);
}

absl::StatusOr<Progress> ParseFullTrackName(Reader* reader, FullTrackName* name) {
  uint64_t total = 0;
  ASSIGN_OR_RETURN(Progress progress, ParseNamespaceCounting(reader, &name->ns, &total));
  if (progress == Progress::kNeedMore) return progress;
  uint64_t length = 0;
  if (!reader->ReadVarint(&length)) return Progress::kNeedMore;
  if (length > kMaxFullTrackNameLength - total) {
    return ProtocolError(TerminationCode::kProtocolViolation, "full track name exceeds 4096 bytes");
  }
  absl::string_view track;
  if (!reader->ReadBytes(length, &track)) return Progress::kNeedMore;
  name->name = std::string(track);
  return Progress::kDone;
}

void WriteFullTrackName(const FullTrackName& name, Writer* writer) {
  if (NamespaceBytes(name.ns) + name.name.size() > kMaxFullTrackNameLength) {
    writer->Fail("full track name exceeds 4096 bytes");
  }
  WriteNamespace(name.ns, writer);
  writer->WriteLengthPrefixed(name.name);
}

absl::StatusOr<Progress> ParseReasonPhrase(Reader* reader, std::string* reason) {
  uint64_t length = 0;
  if (!reader->ReadVarint(&length)) return Progress::kNeedMore;
  if (length > kMaxReasonPhraseLength) {
    return ProtocolError(TerminationCode::kProtocolViolation,
                         absl::StrCat("reason phrase of ", length, " bytes exceeds 1024"));
  }
  absl::string_view value;
  if (!reader->ReadBytes(length, &value)) return Progress::kNeedMore;
  *reason = std::string(value);
  return Progress::kDone;
}

void WriteReasonPhrase(const std::string& reason, Writer* writer) {
  if (reason.size() > kMaxReasonPhraseLength) {
    writer->Fail(absl::StrCat("reason phrase of ", reason.size(), " bytes exceeds 1024"));
  }
  writer->WriteLengthPrefixed(reason);
}

bool ReadLocation(Reader* reader, Location* location) {
  return reader->ReadVarint(&location->group) && reader->ReadVarint(&location->object);
}

void WriteLocation(const Location& location, Writer* writer) {
  writer->WriteVarint(location.group);
  writer->WriteVarint(location.object);
}

absl::Status ParseKeyValueBlock(absl::string_view block, Parameters* out) {
  Reader reader(block);
  out->clear();
  while (!reader.empty()) {
    KeyValuePair kvp;
    ASSIGN_OR_RETURN(Progress progress, ParseKeyValuePair(&reader, &kvp));
    if (progress == Progress::kNeedMore) {
      return ProtocolError(TerminationCode::kProtocolViolation,
                           "extension header runs past the extension headers length");
    }
    out->push_back(std::move(kvp));
  }
  return absl::OkStatus();
}

void WriteKeyValueBlock(const Parameters& kvps, Writer* writer) {
  for (const KeyValuePair& kvp : kvps) WriteKeyValuePair(kvp, writer);
}

}  // namespace kvcast::moqt::internal
