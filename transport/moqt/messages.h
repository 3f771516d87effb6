// MoQT draft-14 (draft-ietf-moq-transport-14) messages as plain structs.
//
// These types are the contract between the codec (bytes <-> structs, see
// codec.h) and the session (state). Field names follow the draft. Every
// version-specific detail lives in the codec; the session sees only these.
//
// Thread safety: plain values.
#ifndef KVCAST_TRANSPORT_MOQT_MESSAGES_H_
#define KVCAST_TRANSPORT_MOQT_MESSAGES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace kvcast::moqt {

inline constexpr uint64_t kVersionDraft14 = 0xff00000e;

// Tuple of 1..32 byte strings; compared byte-exactly, element by element.
using TrackNamespace = std::vector<std::string>;

struct FullTrackName {
  TrackNamespace ns;
  std::string name;
  bool operator==(const FullTrackName& o) const { return ns == o.ns && name == o.name; }
  bool operator!=(const FullTrackName& o) const { return !(*this == o); }
  bool operator<(const FullTrackName& o) const {
    return ns != o.ns ? ns < o.ns : name < o.name;
  }
};

// True if `prefix` is a tuple-wise prefix of `ns` (equal counts as prefix).
bool IsNamespacePrefix(const TrackNamespace& prefix, const TrackNamespace& ns);
// Human-readable "a/b/c" + ":name" form for logs and errors (escapes
// non-printable bytes).
std::string ToString(const TrackNamespace& ns);
std::string ToString(const FullTrackName& name);

struct Location {
  uint64_t group = 0;
  uint64_t object = 0;
  bool operator==(const Location& o) const { return group == o.group && object == o.object; }
  bool operator!=(const Location& o) const { return !(*this == o); }
  bool operator<(const Location& o) const {
    return group != o.group ? group < o.group : object < o.object;
  }
  bool operator<=(const Location& o) const { return !(o < *this); }
};

// Key-Value-Pair: even type -> varint value; odd type -> bytes (<= 65535).
struct KeyValuePair {
  uint64_t type = 0;
  uint64_t int_value = 0;     // used when type is even
  std::string bytes_value;    // used when type is odd
  bool operator==(const KeyValuePair& o) const {
    return type == o.type && int_value == o.int_value && bytes_value == o.bytes_value;
  }
};
using Parameters = std::vector<KeyValuePair>;

// Setup parameters (constant across versions).
enum SetupParameter : uint64_t {
  kSetupPath = 0x01,
  kSetupMaxRequestId = 0x02,
  kSetupAuthorizationToken = 0x03,
  kSetupMaxAuthTokenCacheSize = 0x04,
  kSetupAuthority = 0x05,
  kSetupMoqtImplementation = 0x07,
};
// Version-specific (draft-14) message parameters.
enum MessageParameter : uint64_t {
  kParamDeliveryTimeout = 0x02,
  kParamAuthorizationToken = 0x03,
  kParamMaxCacheDuration = 0x04,
};

// AUTHORIZATION TOKEN parameter value (draft-14 "AUTHORIZATION TOKEN"):
// Token {Alias Type (i), [Token Alias (i),] [Token Type (i),] [Token Value (..)]}.
enum class AuthAliasType : uint64_t { kDelete = 0x0, kRegister = 0x1, kUseAlias = 0x2, kUseValue = 0x3 };
struct AuthToken {
  AuthAliasType alias_type = AuthAliasType::kUseValue;
  uint64_t alias = 0;       // kDelete, kRegister, kUseAlias
  uint64_t token_type = 0;  // kRegister, kUseValue; 0 = negotiated out of band
  std::string value;        // kRegister, kUseValue
  bool operator==(const AuthToken& o) const {
    return alias_type == o.alias_type && alias == o.alias && token_type == o.token_type &&
           value == o.value;
  }
};

// The first value of `type` in `params`, if present.
std::optional<uint64_t> FindIntParameter(const Parameters& params, uint64_t type);

// Session termination codes (draft-14 section "Session Termination").
enum class TerminationCode : uint64_t {
  kNoError = 0x0,
  kInternalError = 0x1,
  kUnauthorized = 0x2,
  kProtocolViolation = 0x3,
  kInvalidRequestId = 0x4,
  kDuplicateTrackAlias = 0x5,
  kKeyValueFormattingError = 0x6,
  kTooManyRequests = 0x7,
  kInvalidPath = 0x8,
  kMalformedPath = 0x9,
  kGoawayTimeout = 0x10,
  kControlMessageTimeout = 0x11,
  kDataStreamTimeout = 0x12,
  kAuthTokenCacheOverflow = 0x13,
  kDuplicateAuthTokenAlias = 0x14,
  kVersionNegotiationFailed = 0x15,
  kMalformedAuthToken = 0x16,
  kUnknownAuthTokenAlias = 0x17,
  kExpiredAuthToken = 0x18,
  kInvalidAuthority = 0x19,
  kMalformedAuthority = 0x1A,
};

// Request error codes shared by SUBSCRIBE_ERROR, FETCH_ERROR, ... (values per
// the draft's IANA tables; each message type uses its own subset).
enum RequestErrorCode : uint64_t {
  kErrInternal = 0x0,
  kErrUnauthorized = 0x1,
  kErrTimeout = 0x2,
  kErrNotSupported = 0x3,
  kErrTrackDoesNotExist = 0x4,   // SUBSCRIBE/FETCH: track does not exist
  kErrInvalidRange = 0x5,
  kErrNoObjects = 0x6,           // FETCH_ERROR only
  kErrInvalidJoiningRequestId = 0x7,  // FETCH_ERROR only
  kErrMalformedAuthToken = 0x10,
  kErrExpiredAuthToken = 0x12,
};

// PUBLISH_DONE status codes.
enum PublishDoneCode : uint64_t {
  kDoneInternalError = 0x0,
  kDoneUnauthorized = 0x1,
  kDoneTrackEnded = 0x2,
  kDoneSubscriptionEnded = 0x3,
  kDoneGoingAway = 0x4,
  kDoneExpired = 0x5,
  kDoneTooFarBehind = 0x6,
  kDoneMalformedTrack = 0x7,
};

enum class FilterType : uint64_t {
  kNextGroupStart = 0x1,
  kLargestObject = 0x2,
  kAbsoluteStart = 0x3,
  kAbsoluteRange = 0x4,
};

// Group Order: 0x0 = publisher's choice (only in requests), 0x1 ascending,
// 0x2 descending.
enum class GroupOrder : uint8_t { kPublisherDefault = 0, kAscending = 1, kDescending = 2 };

enum class ObjectStatus : uint64_t {
  kNormal = 0x0,
  kDoesNotExist = 0x1,
  kEndOfGroup = 0x3,
  kEndOfTrack = 0x4,
};

enum class FetchType : uint64_t { kStandalone = 1, kRelativeJoining = 2, kAbsoluteJoining = 3 };

// ---- control messages -----------------------------------------------------

struct ClientSetup {
  std::vector<uint64_t> supported_versions;
  Parameters parameters;
};
struct ServerSetup {
  uint64_t selected_version = kVersionDraft14;
  Parameters parameters;
};
struct Goaway {
  std::string new_session_uri;
};
struct MaxRequestId {
  uint64_t request_id = 0;
};
struct RequestsBlocked {
  uint64_t maximum_request_id = 0;
};
struct Subscribe {
  uint64_t request_id = 0;
  FullTrackName track;
  uint8_t subscriber_priority = 128;
  GroupOrder group_order = GroupOrder::kPublisherDefault;
  bool forward = true;
  FilterType filter_type = FilterType::kLargestObject;
  std::optional<Location> start;    // AbsoluteStart, AbsoluteRange
  std::optional<uint64_t> end_group;  // AbsoluteRange (inclusive)
  Parameters parameters;
};
struct SubscribeOk {
  uint64_t request_id = 0;
  uint64_t track_alias = 0;
  uint64_t expires = 0;  // ms, 0 = never
  GroupOrder group_order = GroupOrder::kAscending;
  std::optional<Location> largest;  // present iff content exists
  Parameters parameters;
};
struct SubscribeError {
  uint64_t request_id = 0;
  uint64_t error_code = 0;
  std::string reason;
};
struct SubscribeUpdate {
  uint64_t request_id = 0;
  uint64_t subscription_request_id = 0;
  Location start;
  uint64_t end_group = 0;  // 0 = open-ended, else last group + 1
  uint8_t subscriber_priority = 128;
  bool forward = true;
  Parameters parameters;
};
struct Unsubscribe {
  uint64_t request_id = 0;
};
struct PublishDone {
  uint64_t request_id = 0;
  uint64_t status_code = 0;
  uint64_t stream_count = 0;
  std::string reason;
};
struct Publish {
  uint64_t request_id = 0;
  FullTrackName track;
  uint64_t track_alias = 0;
  GroupOrder group_order = GroupOrder::kAscending;
  std::optional<Location> largest;  // present iff content exists
  bool forward = true;
  Parameters parameters;
};
struct PublishOk {
  uint64_t request_id = 0;
  bool forward = true;
  uint8_t subscriber_priority = 128;
  GroupOrder group_order = GroupOrder::kAscending;
  FilterType filter_type = FilterType::kLargestObject;
  std::optional<Location> start;
  std::optional<uint64_t> end_group;
  Parameters parameters;
};
struct PublishError {
  uint64_t request_id = 0;
  uint64_t error_code = 0;
  std::string reason;
};
struct Fetch {
  uint64_t request_id = 0;
  uint8_t subscriber_priority = 128;
  GroupOrder group_order = GroupOrder::kPublisherDefault;
  FetchType fetch_type = FetchType::kStandalone;
  // Standalone.
  FullTrackName track;
  Location start;
  Location end;  // per draft-14: end object 0 = whole end group, else last object + 1
  // Joining (relative or absolute).
  uint64_t joining_request_id = 0;
  uint64_t joining_start = 0;
  Parameters parameters;
};
struct FetchOk {
  uint64_t request_id = 0;
  GroupOrder group_order = GroupOrder::kAscending;
  bool end_of_track = false;
  Location end;
  Parameters parameters;
};
struct FetchError {
  uint64_t request_id = 0;
  uint64_t error_code = 0;
  std::string reason;
};
struct FetchCancel {
  uint64_t request_id = 0;
};
// TRACK_STATUS* share the wire formats of SUBSCRIBE/SUBSCRIBE_OK/_ERROR.
struct TrackStatus {
  Subscribe request;
};
struct TrackStatusOk {
  SubscribeOk reply;
};
struct TrackStatusError {
  SubscribeError reply;
};
struct PublishNamespace {
  uint64_t request_id = 0;
  TrackNamespace ns;
  Parameters parameters;
};
struct PublishNamespaceOk {
  uint64_t request_id = 0;
};
struct PublishNamespaceError {
  uint64_t request_id = 0;
  uint64_t error_code = 0;
  std::string reason;
};
struct PublishNamespaceDone {
  TrackNamespace ns;
};
struct PublishNamespaceCancel {
  TrackNamespace ns;
  uint64_t error_code = 0;
  std::string reason;
};
struct SubscribeNamespace {
  uint64_t request_id = 0;
  TrackNamespace prefix;
  Parameters parameters;
};
struct SubscribeNamespaceOk {
  uint64_t request_id = 0;
};
struct SubscribeNamespaceError {
  uint64_t request_id = 0;
  uint64_t error_code = 0;
  std::string reason;
};
struct UnsubscribeNamespace {
  TrackNamespace prefix;
};

using ControlMessage = std::variant<
    ClientSetup, ServerSetup, Goaway, MaxRequestId, RequestsBlocked, Subscribe,
    SubscribeOk, SubscribeError, SubscribeUpdate, Unsubscribe, PublishDone,
    Publish, PublishOk, PublishError, Fetch, FetchOk, FetchError, FetchCancel,
    TrackStatus, TrackStatusOk, TrackStatusError, PublishNamespace,
    PublishNamespaceOk, PublishNamespaceError, PublishNamespaceDone,
    PublishNamespaceCancel, SubscribeNamespace, SubscribeNamespaceOk,
    SubscribeNamespaceError, UnsubscribeNamespace>;

// Draft-14 wire type of a message (e.g. 0x3 for Subscribe).
uint64_t MessageType(const ControlMessage& msg);
// Name for logs ("SUBSCRIBE").
const char* MessageName(const ControlMessage& msg);

// ---- data plane -------------------------------------------------------------

// Header of a subgroup stream. The codec picks the wire type (0x10..0x1D)
// from these fields when writing and fills them when reading.
struct SubgroupHeader {
  uint64_t track_alias = 0;
  uint64_t group = 0;
  // Wire form of the subgroup id: explicit, zero, or "first object id".
  enum class SubgroupIdMode { kZero, kFirstObject, kExplicit };
  SubgroupIdMode subgroup_mode = SubgroupIdMode::kExplicit;
  uint64_t subgroup = 0;  // resolved value (kFirstObject: set once known)
  uint8_t publisher_priority = 128;
  bool has_extensions = false;  // objects carry an extension length field
  bool end_of_group = false;    // the stream contains the end of the group
};

// One object as seen on any data path (subgroup stream, fetch stream,
// datagram). `extensions` holds raw Key-Value-Pairs.
struct ObjectHeader {
  uint64_t group = 0;
  uint64_t subgroup = 0;
  uint64_t object = 0;
  uint8_t publisher_priority = 128;
  Parameters extensions;
  ObjectStatus status = ObjectStatus::kNormal;
  uint64_t payload_length = 0;
};

struct Datagram {
  uint64_t track_alias = 0;
  ObjectHeader object;  // subgroup is always 0 for datagrams
  bool end_of_group = false;  // datagram types 0x02/0x03/0x06/0x07 (draft-14)
  std::string payload;
};

}  // namespace kvcast::moqt

#endif  // KVCAST_TRANSPORT_MOQT_MESSAGES_H_
