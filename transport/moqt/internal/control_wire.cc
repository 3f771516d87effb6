#include "transport/moqt/internal/control_wire.h"

#include <bitset>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "transport/moqt/codec.h"
#include "transport/moqt/internal/wire.h"

namespace kvcast::moqt::internal {
namespace {

// ---- parameters ---------------------------------------------------------------

// The known parameters a message type may carry (draft-14 "Version Specific
// Parameters" and "Setup Parameters"); a known parameter in a message that
// does not list it is ignored, as the draft requires.
struct ParameterRules {
  bool setup = false;
  bool authorization_token = false;
  bool delivery_timeout = false;
  bool max_cache_duration = false;
};

ParameterRules RulesFor(uint64_t type) {
  switch (type) {
    case kTypeClientSetup:
    case kTypeServerSetup:
      return {true, true, false, false};
    case kTypeSubscribe:
    case kTypeTrackStatus:
    case kTypeSubscribeUpdate:
      return {false, true, true, false};
    case kTypePublish:
      return {false, true, true, true};
    case kTypeSubscribeOk:
    case kTypeTrackStatusOk:
      return {false, false, true, true};
    case kTypePublishOk:
      return {false, false, true, false};
    case kTypeFetch:
    case kTypeSubscribeNamespace:
    case kTypePublishNamespace:
      return {false, true, false, false};
    case kTypeFetchOk:
      return {false, false, false, true};
    default:
      return {};
  }
}

// The Token structure of an AUTHORIZATION TOKEN parameter. One that cannot be
// decoded is KEY_VALUE_FORMATTING_ERROR (draft-14 "AUTHORIZATION TOKEN").
absl::Status ValidateToken(absl::string_view token) {
  auto malformed = [](const std::string& why) {
    return ProtocolError(TerminationCode::kKeyValueFormattingError,
                         "AUTHORIZATION TOKEN: " + why);
  };
  Reader reader(token);
  uint64_t alias_type = 0, alias = 0, token_type = 0;
  if (!reader.ReadVarint(&alias_type)) return malformed("missing Alias Type");
  switch (alias_type) {
    case 0x0:  // DELETE: Alias only
    case 0x2:  // USE_ALIAS: Alias only
      if (!reader.ReadVarint(&alias)) return malformed("missing Token Alias");
      if (!reader.empty()) return malformed("trailing bytes after Token Alias");
      return absl::OkStatus();
    case 0x1:  // REGISTER: Alias, Type, Value
      if (!reader.ReadVarint(&alias)) return malformed("missing Token Alias");
      if (!reader.ReadVarint(&token_type)) return malformed("missing Token Type");
      return absl::OkStatus();
    case 0x3:  // USE_VALUE: Type, Value
      if (!reader.ReadVarint(&token_type)) return malformed("missing Token Type");
      return absl::OkStatus();
    default:
      return malformed(absl::StrCat("unknown Alias Type ", alias_type));
  }
}

// Checks the known parameters of a message of `type`: Token structure, and no
// duplicates of a parameter the draft does not allow to repeat
// (PROTOCOL_VIOLATION, draft-14 "Parameters").
absl::Status ValidateParameters(uint64_t type, const Parameters& params) {
  const ParameterRules rules = RulesFor(type);
  std::bitset<8> seen;
  for (const KeyValuePair& kvp : params) {
    bool single = false;
    if (kvp.type == kSetupAuthorizationToken && rules.authorization_token) {
      // Same code point (0x03) in the setup and the version-specific space.
      RETURN_IF_ERROR(ValidateToken(kvp.bytes_value));
    } else if (rules.setup) {
      single = kvp.type == kSetupPath || kvp.type == kSetupMaxRequestId ||
               kvp.type == kSetupMaxAuthTokenCacheSize || kvp.type == kSetupAuthority ||
               kvp.type == kSetupMoqtImplementation;
    } else {
      single = (kvp.type == kParamDeliveryTimeout && rules.delivery_timeout) ||
               (kvp.type == kParamMaxCacheDuration && rules.max_cache_duration);
    }
    if (!single) continue;
    if (seen[kvp.type]) {
      return ProtocolError(TerminationCode::kProtocolViolation,
                           absl::StrCat("parameter ", kvp.type, " repeated"));
    }
    seen[kvp.type] = true;
  }
  return absl::OkStatus();
}

// ---- reading ------------------------------------------------------------------

// Reads the fields of one complete payload; running out of bytes means the
// Message Length did not match the fields (PROTOCOL_VIOLATION).
class FieldReader {
 public:
  FieldReader(uint64_t type, const char* name, absl::string_view payload)
      : type_(type), name_(name), reader_(payload) {}

  absl::Status Varint(uint64_t* value) { return Check(reader_.ReadVarint(value)); }
  absl::Status Byte(uint8_t* value) { return Check(reader_.ReadUint8(value)); }
  absl::Status Loc(Location* location) { return Check(ReadLocation(&reader_, location)); }

  // A (8) field that must be 0 or 1.
  absl::Status Flag(const char* field, bool* value) {
    uint8_t byte = 0;
    RETURN_IF_ERROR(Byte(&byte));
    if (byte > 1) return Violation(absl::StrCat(field, " is ", byte, " (0 or 1 allowed)"));
    *value = byte == 1;
    return absl::OkStatus();
  }

  // Group Order (8): 0x0 (publisher's choice) only where `allow_default`.
  absl::Status Order(bool allow_default, GroupOrder* order) {
    uint8_t byte = 0;
    RETURN_IF_ERROR(Byte(&byte));
    if (byte > 2 || (byte == 0 && !allow_default)) {
      return Violation(absl::StrCat("Group Order ", byte, " not allowed"));
    }
    *order = static_cast<GroupOrder>(byte);
    return absl::OkStatus();
  }

  absl::Status Namespace(TrackNamespace* ns) { return Done(ParseNamespace(&reader_, ns)); }
  absl::Status TrackName(FullTrackName* name) { return Done(ParseFullTrackName(&reader_, name)); }
  absl::Status Reason(std::string* reason) { return Done(ParseReasonPhrase(&reader_, reason)); }

  // Filter Type (i), [Start Location], [End Group (i)].
  absl::Status Filter(FilterType* type, std::optional<Location>* start,
                      std::optional<uint64_t>* end_group) {
    uint64_t code = 0;
    RETURN_IF_ERROR(Varint(&code));
    if (code < 1 || code > 4) return Violation(absl::StrCat("unknown Filter Type ", code));
    *type = static_cast<FilterType>(code);
    start->reset();
    end_group->reset();
    if (*type == FilterType::kAbsoluteStart || *type == FilterType::kAbsoluteRange) {
      RETURN_IF_ERROR(Loc(&start->emplace()));
    }
    if (*type == FilterType::kAbsoluteRange) RETURN_IF_ERROR(Varint(&end_group->emplace()));
    return absl::OkStatus();
  }

  // Number of Parameters (i) + Key-Value-Pairs. Nothing is reserved from the
  // count: each pair read consumes at least two payload bytes.
  absl::Status Params(Parameters* params) {
    uint64_t count = 0;
    RETURN_IF_ERROR(Varint(&count));
    params->clear();
    for (uint64_t i = 0; i < count; ++i) {
      KeyValuePair kvp;
      RETURN_IF_ERROR(Done(ParseKeyValuePair(&reader_, &kvp)));
      params->push_back(std::move(kvp));
    }
    absl::Status status = ValidateParameters(type_, *params);
    return status.ok() ? status : Annotate(status);
  }

  // `n` raw bytes; checked against the payload before anything is copied.
  absl::Status Bytes(uint64_t n, std::string* out) {
    absl::string_view bytes;
    RETURN_IF_ERROR(Check(reader_.ReadBytes(n, &bytes)));
    *out = std::string(bytes);
    return absl::OkStatus();
  }

  absl::Status Finish() {
    if (!reader_.empty()) {
      return Violation(absl::StrCat("Message Length exceeds the fields by ", reader_.remaining(),
                                    " bytes"));
    }
    return absl::OkStatus();
  }

 private:
  absl::Status Violation(const std::string& what) {
    return ProtocolError(TerminationCode::kProtocolViolation, absl::StrCat(name_, ": ", what));
  }
  absl::Status Check(bool complete) {
    return complete ? absl::OkStatus() : Violation("Message Length shorter than the fields");
  }
  absl::Status Done(absl::StatusOr<Progress> progress) {
    if (!progress.ok()) return Annotate(progress.status());
    return Check(*progress == Progress::kDone);
  }
  absl::Status Annotate(const absl::Status& status) {
    // Keep the termination code payload; prefix the message name.
    absl::Status annotated(status.code(), absl::StrCat(name_, ": ", status.message()));
    status.ForEachPayload([&annotated](absl::string_view url, const absl::Cord& payload) {
      annotated.SetPayload(url, payload);
    });
    return annotated;
  }

  uint64_t type_;
  const char* name_;
  Reader reader_;
};

absl::Status Parse(FieldReader* r, ClientSetup* m) {
  uint64_t count = 0;
  RETURN_IF_ERROR(r->Varint(&count));
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t version = 0;
    RETURN_IF_ERROR(r->Varint(&version));
    m->supported_versions.push_back(version);
  }
  return r->Params(&m->parameters);
}
absl::Status Parse(FieldReader* r, ServerSetup* m) {
  RETURN_IF_ERROR(r->Varint(&m->selected_version));
  return r->Params(&m->parameters);
}
absl::Status Parse(FieldReader* r, Goaway* m) {
  uint64_t length = 0;
  RETURN_IF_ERROR(r->Varint(&length));
  if (length > kMaxGoawayUriLength) {
    return ProtocolError(TerminationCode::kProtocolViolation,
                         absl::StrCat("GOAWAY: New Session URI of ", length,
                                      " bytes exceeds 8192"));
  }
  return r->Bytes(length, &m->new_session_uri);
}
absl::Status Parse(FieldReader* r, MaxRequestId* m) { return r->Varint(&m->request_id); }
absl::Status Parse(FieldReader* r, RequestsBlocked* m) {
  return r->Varint(&m->maximum_request_id);
}
absl::Status Parse(FieldReader* r, Subscribe* m) {
  RETURN_IF_ERROR(r->Varint(&m->request_id));
  RETURN_IF_ERROR(r->TrackName(&m->track));
  RETURN_IF_ERROR(r->Byte(&m->subscriber_priority));
  RETURN_IF_ERROR(r->Order(/*allow_default=*/true, &m->group_order));
  RETURN_IF_ERROR(r->Flag("Forward", &m->forward));
  RETURN_IF_ERROR(r->Filter(&m->filter_type, &m->start, &m->end_group));
  return r->Params(&m->parameters);
}
absl::Status Parse(FieldReader* r, SubscribeOk* m) {
  RETURN_IF_ERROR(r->Varint(&m->request_id));
  RETURN_IF_ERROR(r->Varint(&m->track_alias));
  RETURN_IF_ERROR(r->Varint(&m->expires));
  RETURN_IF_ERROR(r->Order(/*allow_default=*/false, &m->group_order));
  bool content_exists = false;
  RETURN_IF_ERROR(r->Flag("Content Exists", &content_exists));
  m->largest.reset();
  if (content_exists) RETURN_IF_ERROR(r->Loc(&m->largest.emplace()));
  return r->Params(&m->parameters);
}
// SUBSCRIBE_ERROR, PUBLISH_ERROR, FETCH_ERROR, PUBLISH_NAMESPACE_ERROR and
// SUBSCRIBE_NAMESPACE_ERROR share one layout.
template <typename ErrorMessage>
absl::Status ParseRequestError(FieldReader* r, ErrorMessage* m) {
  RETURN_IF_ERROR(r->Varint(&m->request_id));
  RETURN_IF_ERROR(r->Varint(&m->error_code));
  return r->Reason(&m->reason);
}
absl::Status Parse(FieldReader* r, SubscribeError* m) { return ParseRequestError(r, m); }
absl::Status Parse(FieldReader* r, PublishError* m) { return ParseRequestError(r, m); }
absl::Status Parse(FieldReader* r, FetchError* m) { return ParseRequestError(r, m); }
absl::Status Parse(FieldReader* r, PublishNamespaceError* m) { return ParseRequestError(r, m); }
absl::Status Parse(FieldReader* r, SubscribeNamespaceError* m) {
  return ParseRequestError(r, m);
}
absl::Status Parse(FieldReader* r, SubscribeUpdate* m) {
  RETURN_IF_ERROR(r->Varint(&m->request_id));
  RETURN_IF_ERROR(r->Varint(&m->subscription_request_id));
  RETURN_IF_ERROR(r->Loc(&m->start));
  RETURN_IF_ERROR(r->Varint(&m->end_group));
  RETURN_IF_ERROR(r->Byte(&m->subscriber_priority));
  RETURN_IF_ERROR(r->Flag("Forward", &m->forward));
  return r->Params(&m->parameters);
}
absl::Status Parse(FieldReader* r, Unsubscribe* m) { return r->Varint(&m->request_id); }
absl::Status Parse(FieldReader* r, PublishDone* m) {
  RETURN_IF_ERROR(r->Varint(&m->request_id));
  RETURN_IF_ERROR(r->Varint(&m->status_code));
  RETURN_IF_ERROR(r->Varint(&m->stream_count));
  return r->Reason(&m->reason);
}
absl::Status Parse(FieldReader* r, Publish* m) {
  RETURN_IF_ERROR(r->Varint(&m->request_id));
  RETURN_IF_ERROR(r->TrackName(&m->track));
  RETURN_IF_ERROR(r->Varint(&m->track_alias));
  RETURN_IF_ERROR(r->Order(/*allow_default=*/false, &m->group_order));
  bool content_exists = false;
  RETURN_IF_ERROR(r->Flag("Content Exists", &content_exists));
  m->largest.reset();
  if (content_exists) RETURN_IF_ERROR(r->Loc(&m->largest.emplace()));
  RETURN_IF_ERROR(r->Flag("Forward", &m->forward));
  return r->Params(&m->parameters);
}
absl::Status Parse(FieldReader* r, PublishOk* m) {
  RETURN_IF_ERROR(r->Varint(&m->request_id));
  RETURN_IF_ERROR(r->Flag("Forward", &m->forward));
  RETURN_IF_ERROR(r->Byte(&m->subscriber_priority));
  RETURN_IF_ERROR(r->Order(/*allow_default=*/false, &m->group_order));
  RETURN_IF_ERROR(r->Filter(&m->filter_type, &m->start, &m->end_group));
  return r->Params(&m->parameters);
}
absl::Status Parse(FieldReader* r, Fetch* m) {
  RETURN_IF_ERROR(r->Varint(&m->request_id));
  RETURN_IF_ERROR(r->Byte(&m->subscriber_priority));
  RETURN_IF_ERROR(r->Order(/*allow_default=*/true, &m->group_order));
  uint64_t fetch_type = 0;
  RETURN_IF_ERROR(r->Varint(&fetch_type));
  if (fetch_type < 1 || fetch_type > 3) {
    return ProtocolError(TerminationCode::kProtocolViolation,
                         absl::StrCat("FETCH: unknown Fetch Type ", fetch_type));
  }
  m->fetch_type = static_cast<FetchType>(fetch_type);
  if (m->fetch_type == FetchType::kStandalone) {
    RETURN_IF_ERROR(r->TrackName(&m->track));
    RETURN_IF_ERROR(r->Loc(&m->start));
    RETURN_IF_ERROR(r->Loc(&m->end));
  } else {
    RETURN_IF_ERROR(r->Varint(&m->joining_request_id));
    RETURN_IF_ERROR(r->Varint(&m->joining_start));
  }
  return r->Params(&m->parameters);
}
absl::Status Parse(FieldReader* r, FetchOk* m) {
  RETURN_IF_ERROR(r->Varint(&m->request_id));
  RETURN_IF_ERROR(r->Order(/*allow_default=*/false, &m->group_order));
  RETURN_IF_ERROR(r->Flag("End Of Track", &m->end_of_track));
  RETURN_IF_ERROR(r->Loc(&m->end));
  return r->Params(&m->parameters);
}
absl::Status Parse(FieldReader* r, FetchCancel* m) { return r->Varint(&m->request_id); }
absl::Status Parse(FieldReader* r, TrackStatus* m) { return Parse(r, &m->request); }
absl::Status Parse(FieldReader* r, TrackStatusOk* m) { return Parse(r, &m->reply); }
absl::Status Parse(FieldReader* r, TrackStatusError* m) { return Parse(r, &m->reply); }
absl::Status Parse(FieldReader* r, PublishNamespace* m) {
  RETURN_IF_ERROR(r->Varint(&m->request_id));
  RETURN_IF_ERROR(r->Namespace(&m->ns));
  return r->Params(&m->parameters);
}
absl::Status Parse(FieldReader* r, PublishNamespaceOk* m) { return r->Varint(&m->request_id); }
absl::Status Parse(FieldReader* r, PublishNamespaceDone* m) { return r->Namespace(&m->ns); }
absl::Status Parse(FieldReader* r, PublishNamespaceCancel* m) {
  RETURN_IF_ERROR(r->Namespace(&m->ns));
  RETURN_IF_ERROR(r->Varint(&m->error_code));
  return r->Reason(&m->reason);
}
absl::Status Parse(FieldReader* r, SubscribeNamespace* m) {
  RETURN_IF_ERROR(r->Varint(&m->request_id));
  RETURN_IF_ERROR(r->Namespace(&m->prefix));
  return r->Params(&m->parameters);
}
absl::Status Parse(FieldReader* r, SubscribeNamespaceOk* m) {
  return r->Varint(&m->request_id);
}
absl::Status Parse(FieldReader* r, UnsubscribeNamespace* m) { return r->Namespace(&m->prefix); }

template <typename Message>
absl::StatusOr<ControlMessage> ParseAs(uint64_t type, absl::string_view payload) {
  ControlMessage msg{Message{}};
  FieldReader reader(type, MessageName(msg), payload);
  RETURN_IF_ERROR(Parse(&reader, &std::get<Message>(msg)));
  RETURN_IF_ERROR(reader.Finish());
  return msg;
}

// ---- writing ------------------------------------------------------------------

void WriteOrder(GroupOrder order, bool allow_default, Writer* w) {
  const auto value = static_cast<uint8_t>(order);
  if (value > 2 || (value == 0 && !allow_default)) {
    w->Fail(absl::StrCat("Group Order ", value, " not allowed here"));
  }
  w->WriteUint8(value);
}
void WriteFlag(bool value, Writer* w) { w->WriteUint8(value ? 1 : 0); }

void WriteFilter(FilterType type, const std::optional<Location>& start,
                 const std::optional<uint64_t>& end_group, Writer* w) {
  const auto code = static_cast<uint64_t>(type);
  if (code < 1 || code > 4) w->Fail(absl::StrCat("unknown Filter Type ", code));
  const bool wants_start = type == FilterType::kAbsoluteStart || type == FilterType::kAbsoluteRange;
  const bool wants_end = type == FilterType::kAbsoluteRange;
  if (start.has_value() != wants_start) {
    w->Fail(wants_start ? "filter needs a Start Location" : "filter carries no Start Location");
  }
  if (end_group.has_value() != wants_end) {
    w->Fail(wants_end ? "AbsoluteRange needs an End Group" : "filter carries no End Group");
  }
  w->WriteVarint(code);
  if (start) WriteLocation(*start, w);
  if (end_group) w->WriteVarint(*end_group);
}

void WriteParams(const Parameters& params, Writer* w) {
  w->WriteVarint(params.size());
  for (const KeyValuePair& kvp : params) WriteKeyValuePair(kvp, w);
}

void Write(const ClientSetup& m, Writer* w) {
  w->WriteVarint(m.supported_versions.size());
  for (uint64_t version : m.supported_versions) w->WriteVarint(version);
  WriteParams(m.parameters, w);
}
void Write(const ServerSetup& m, Writer* w) {
  w->WriteVarint(m.selected_version);
  WriteParams(m.parameters, w);
}
void Write(const Goaway& m, Writer* w) {
  if (m.new_session_uri.size() > kMaxGoawayUriLength) {
    w->Fail("GOAWAY New Session URI exceeds 8192 bytes");
  }
  w->WriteLengthPrefixed(m.new_session_uri);
}
void Write(const MaxRequestId& m, Writer* w) { w->WriteVarint(m.request_id); }
void Write(const RequestsBlocked& m, Writer* w) { w->WriteVarint(m.maximum_request_id); }
void Write(const Subscribe& m, Writer* w) {
  w->WriteVarint(m.request_id);
  WriteFullTrackName(m.track, w);
  w->WriteUint8(m.subscriber_priority);
  WriteOrder(m.group_order, /*allow_default=*/true, w);
  WriteFlag(m.forward, w);
  WriteFilter(m.filter_type, m.start, m.end_group, w);
  WriteParams(m.parameters, w);
}
void Write(const SubscribeOk& m, Writer* w) {
  w->WriteVarint(m.request_id);
  w->WriteVarint(m.track_alias);
  w->WriteVarint(m.expires);
  WriteOrder(m.group_order, /*allow_default=*/false, w);
  WriteFlag(m.largest.has_value(), w);
  if (m.largest) WriteLocation(*m.largest, w);
  WriteParams(m.parameters, w);
}
template <typename ErrorMessage>
void WriteRequestError(const ErrorMessage& m, Writer* w) {
  w->WriteVarint(m.request_id);
  w->WriteVarint(m.error_code);
  WriteReasonPhrase(m.reason, w);
}
void Write(const SubscribeError& m, Writer* w) { WriteRequestError(m, w); }
void Write(const PublishError& m, Writer* w) { WriteRequestError(m, w); }
void Write(const FetchError& m, Writer* w) { WriteRequestError(m, w); }
void Write(const PublishNamespaceError& m, Writer* w) { WriteRequestError(m, w); }
void Write(const SubscribeNamespaceError& m, Writer* w) { WriteRequestError(m, w); }
void Write(const SubscribeUpdate& m, Writer* w) {
  w->WriteVarint(m.request_id);
  w->WriteVarint(m.subscription_request_id);
  WriteLocation(m.start, w);
  w->WriteVarint(m.end_group);
  w->WriteUint8(m.subscriber_priority);
  WriteFlag(m.forward, w);
  WriteParams(m.parameters, w);
}
void Write(const Unsubscribe& m, Writer* w) { w->WriteVarint(m.request_id); }
void Write(const PublishDone& m, Writer* w) {
  w->WriteVarint(m.request_id);
  w->WriteVarint(m.status_code);
  w->WriteVarint(m.stream_count);
  WriteReasonPhrase(m.reason, w);
}
void Write(const Publish& m, Writer* w) {
  w->WriteVarint(m.request_id);
  WriteFullTrackName(m.track, w);
  w->WriteVarint(m.track_alias);
  WriteOrder(m.group_order, /*allow_default=*/false, w);
  WriteFlag(m.largest.has_value(), w);
  if (m.largest) WriteLocation(*m.largest, w);
  WriteFlag(m.forward, w);
  WriteParams(m.parameters, w);
}
void Write(const PublishOk& m, Writer* w) {
  w->WriteVarint(m.request_id);
  WriteFlag(m.forward, w);
  w->WriteUint8(m.subscriber_priority);
  WriteOrder(m.group_order, /*allow_default=*/false, w);
  WriteFilter(m.filter_type, m.start, m.end_group, w);
  WriteParams(m.parameters, w);
}
void Write(const Fetch& m, Writer* w) {
  w->WriteVarint(m.request_id);
  w->WriteUint8(m.subscriber_priority);
  WriteOrder(m.group_order, /*allow_default=*/true, w);
  const auto fetch_type = static_cast<uint64_t>(m.fetch_type);
  if (fetch_type < 1 || fetch_type > 3) w->Fail(absl::StrCat("unknown Fetch Type ", fetch_type));
  w->WriteVarint(fetch_type);
  // Fields of the other fetch types are not written (and parse as defaults).
  if (m.fetch_type == FetchType::kStandalone) {
    WriteFullTrackName(m.track, w);
    WriteLocation(m.start, w);
    WriteLocation(m.end, w);
  } else {
    w->WriteVarint(m.joining_request_id);
    w->WriteVarint(m.joining_start);
  }
  WriteParams(m.parameters, w);
}
void Write(const FetchOk& m, Writer* w) {
  w->WriteVarint(m.request_id);
  WriteOrder(m.group_order, /*allow_default=*/false, w);
  WriteFlag(m.end_of_track, w);
  WriteLocation(m.end, w);
  WriteParams(m.parameters, w);
}
void Write(const FetchCancel& m, Writer* w) { w->WriteVarint(m.request_id); }
void Write(const TrackStatus& m, Writer* w) { Write(m.request, w); }
void Write(const TrackStatusOk& m, Writer* w) { Write(m.reply, w); }
void Write(const TrackStatusError& m, Writer* w) { Write(m.reply, w); }
void Write(const PublishNamespace& m, Writer* w) {
  w->WriteVarint(m.request_id);
  WriteNamespace(m.ns, w);
  WriteParams(m.parameters, w);
}
void Write(const PublishNamespaceOk& m, Writer* w) { w->WriteVarint(m.request_id); }
void Write(const PublishNamespaceDone& m, Writer* w) { WriteNamespace(m.ns, w); }
void Write(const PublishNamespaceCancel& m, Writer* w) {
  WriteNamespace(m.ns, w);
  w->WriteVarint(m.error_code);
  WriteReasonPhrase(m.reason, w);
}
void Write(const SubscribeNamespace& m, Writer* w) {
  w->WriteVarint(m.request_id);
  WriteNamespace(m.prefix, w);
  WriteParams(m.parameters, w);
}
void Write(const SubscribeNamespaceOk& m, Writer* w) { w->WriteVarint(m.request_id); }
void Write(const UnsubscribeNamespace& m, Writer* w) { WriteNamespace(m.prefix, w); }

// The parameters of `msg`, if its type has any.
const Parameters* ParametersOf(const ControlMessage& msg) {
  return std::visit(
      [](const auto& m) -> const Parameters* {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, TrackStatus>) {
          return &m.request.parameters;
        } else if constexpr (std::is_same_v<T, TrackStatusOk>) {
          return &m.reply.parameters;
        } else if constexpr (std::is_same_v<T, ClientSetup> || std::is_same_v<T, ServerSetup> ||
                             std::is_same_v<T, Subscribe> || std::is_same_v<T, SubscribeOk> ||
                             std::is_same_v<T, SubscribeUpdate> || std::is_same_v<T, Publish> ||
                             std::is_same_v<T, PublishOk> || std::is_same_v<T, Fetch> ||
                             std::is_same_v<T, FetchOk> || std::is_same_v<T, PublishNamespace> ||
                             std::is_same_v<T, SubscribeNamespace>) {
          return &m.parameters;
        } else {
          return nullptr;
        }
      },
      msg);
}

}  // namespace

bool IsKnownControlType(uint64_t type) {
  return (type >= kTypeSubscribeUpdate && type <= kTypeRequestsBlocked) ||
         (type >= kTypePublish && type <= kTypeServerSetup);
}

absl::Status WriteControlPayload(const ControlMessage& msg, std::string* out) {
  Writer writer(out);
  std::visit([&writer](const auto& m) { Write(m, &writer); }, msg);
  if (!writer.status().ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(MessageName(msg), ": ", writer.status().message()));
  }
  if (const Parameters* params = ParametersOf(msg)) {
    absl::Status status = ValidateParameters(MessageType(msg), *params);
    if (!status.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(MessageName(msg), ": ", status.message()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ControlMessage> ParseControlPayload(uint64_t type, absl::string_view payload) {
  switch (type) {
    case kTypeClientSetup: return ParseAs<ClientSetup>(type, payload);
    case kTypeServerSetup: return ParseAs<ServerSetup>(type, payload);
    case kTypeGoaway: return ParseAs<Goaway>(type, payload);
    case kTypeMaxRequestId: return ParseAs<MaxRequestId>(type, payload);
    case kTypeRequestsBlocked: return ParseAs<RequestsBlocked>(type, payload);
    case kTypeSubscribe: return ParseAs<Subscribe>(type, payload);
    case kTypeSubscribeOk: return ParseAs<SubscribeOk>(type, payload);
    case kTypeSubscribeError: return ParseAs<SubscribeError>(type, payload);
    case kTypeSubscribeUpdate: return ParseAs<SubscribeUpdate>(type, payload);
    case kTypeUnsubscribe: return ParseAs<Unsubscribe>(type, payload);
    case kTypePublishDone: return ParseAs<PublishDone>(type, payload);
    case kTypePublish: return ParseAs<Publish>(type, payload);
    case kTypePublishOk: return ParseAs<PublishOk>(type, payload);
    case kTypePublishError: return ParseAs<PublishError>(type, payload);
    case kTypeFetch: return ParseAs<Fetch>(type, payload);
    case kTypeFetchOk: return ParseAs<FetchOk>(type, payload);
    case kTypeFetchError: return ParseAs<FetchError>(type, payload);
    case kTypeFetchCancel: return ParseAs<FetchCancel>(type, payload);
    case kTypeTrackStatus: return ParseAs<TrackStatus>(type, payload);
    case kTypeTrackStatusOk: return ParseAs<TrackStatusOk>(type, payload);
    case kTypeTrackStatusError: return ParseAs<TrackStatusError>(type, payload);
    case kTypePublishNamespace: return ParseAs<PublishNamespace>(type, payload);
    case kTypePublishNamespaceOk: return ParseAs<PublishNamespaceOk>(type, payload);
    case kTypePublishNamespaceError: return ParseAs<PublishNamespaceError>(type, payload);
    case kTypePublishNamespaceDone: return ParseAs<PublishNamespaceDone>(type, payload);
    case kTypePublishNamespaceCancel: return ParseAs<PublishNamespaceCancel>(type, payload);
    case kTypeSubscribeNamespace: return ParseAs<SubscribeNamespace>(type, payload);
    case kTypeSubscribeNamespaceOk: return ParseAs<SubscribeNamespaceOk>(type, payload);
    case kTypeSubscribeNamespaceError: return ParseAs<SubscribeNamespaceError>(type, payload);
    case kTypeUnsubscribeNamespace: return ParseAs<UnsubscribeNamespace>(type, payload);
    default:
      return ProtocolError(TerminationCode::kProtocolViolation,
                           absl::StrCat("unknown control message type 0x", absl::Hex(type)));
  }
}

}  // namespace kvcast::moqt::internal
