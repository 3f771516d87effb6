#include "transport/moqt/codec.h"

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <ostream>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"

namespace kvcast::moqt {

// Field-wise equality for the round-trip checks (messages.h defines it for
// few of its structs). Found by ADL from std::variant's operator==.
#define KVCAST_FIELDS_EQ(Type, ...)                                  \
  inline bool operator==(const Type& a, const Type& b) {             \
    auto fields = [](const Type& m) { return std::tie(__VA_ARGS__); }; \
    return fields(a) == fields(b);                                   \
  }
KVCAST_FIELDS_EQ(ClientSetup, m.supported_versions, m.parameters)
KVCAST_FIELDS_EQ(ServerSetup, m.selected_version, m.parameters)
KVCAST_FIELDS_EQ(Goaway, m.new_session_uri)
KVCAST_FIELDS_EQ(MaxRequestId, m.request_id)
KVCAST_FIELDS_EQ(RequestsBlocked, m.maximum_request_id)
KVCAST_FIELDS_EQ(Subscribe, m.request_id, m.track, m.subscriber_priority, m.group_order,
                 m.forward, m.filter_type, m.start, m.end_group, m.parameters)
KVCAST_FIELDS_EQ(SubscribeOk, m.request_id, m.track_alias, m.expires, m.group_order, m.largest,
                 m.parameters)
KVCAST_FIELDS_EQ(SubscribeError, m.request_id, m.error_code, m.reason)
KVCAST_FIELDS_EQ(SubscribeUpdate, m.request_id, m.subscription_request_id, m.start, m.end_group,
                 m.subscriber_priority, m.forward, m.parameters)
KVCAST_FIELDS_EQ(Unsubscribe, m.request_id)
KVCAST_FIELDS_EQ(PublishDone, m.request_id, m.status_code, m.stream_count, m.reason)
KVCAST_FIELDS_EQ(Publish, m.request_id, m.track, m.track_alias, m.group_order, m.largest,
                 m.forward, m.parameters)
KVCAST_FIELDS_EQ(PublishOk, m.request_id, m.forward, m.subscriber_priority, m.group_order,
                 m.filter_type, m.start, m.end_group, m.parameters)
KVCAST_FIELDS_EQ(PublishError, m.request_id, m.error_code, m.reason)
KVCAST_FIELDS_EQ(Fetch, m.request_id, m.subscriber_priority, m.group_order, m.fetch_type,
                 m.track, m.start, m.end, m.joining_request_id, m.joining_start, m.parameters)
KVCAST_FIELDS_EQ(FetchOk, m.request_id, m.group_order, m.end_of_track, m.end, m.parameters)
KVCAST_FIELDS_EQ(FetchError, m.request_id, m.error_code, m.reason)
KVCAST_FIELDS_EQ(FetchCancel, m.request_id)
KVCAST_FIELDS_EQ(TrackStatus, m.request)
KVCAST_FIELDS_EQ(TrackStatusOk, m.reply)
KVCAST_FIELDS_EQ(TrackStatusError, m.reply)
KVCAST_FIELDS_EQ(PublishNamespace, m.request_id, m.ns, m.parameters)
KVCAST_FIELDS_EQ(PublishNamespaceOk, m.request_id)
KVCAST_FIELDS_EQ(PublishNamespaceError, m.request_id, m.error_code, m.reason)
KVCAST_FIELDS_EQ(PublishNamespaceDone, m.ns)
KVCAST_FIELDS_EQ(PublishNamespaceCancel, m.ns, m.error_code, m.reason)
KVCAST_FIELDS_EQ(SubscribeNamespace, m.request_id, m.prefix, m.parameters)
KVCAST_FIELDS_EQ(SubscribeNamespaceOk, m.request_id)
KVCAST_FIELDS_EQ(SubscribeNamespaceError, m.request_id, m.error_code, m.reason)
KVCAST_FIELDS_EQ(UnsubscribeNamespace, m.prefix)
KVCAST_FIELDS_EQ(SubgroupHeader, m.track_alias, m.group, m.subgroup_mode, m.subgroup,
                 m.publisher_priority, m.has_extensions, m.end_of_group)
KVCAST_FIELDS_EQ(ObjectHeader, m.group, m.subgroup, m.object, m.publisher_priority,
                 m.extensions, m.status, m.payload_length)
KVCAST_FIELDS_EQ(Datagram, m.track_alias, m.object, m.end_of_group, m.payload)
#undef KVCAST_FIELDS_EQ

inline void PrintTo(const ControlMessage& msg, std::ostream* os) { *os << MessageName(msg); }
inline void PrintTo(const ObjectHeader& o, std::ostream* os) {
  *os << "{g=" << o.group << " sg=" << o.subgroup << " o=" << o.object
      << " prio=" << int{o.publisher_priority} << " ext=" << o.extensions.size()
      << " status=" << static_cast<uint64_t>(o.status) << " len=" << o.payload_length << "}";
}

namespace {

constexpr uint64_t kMaxVarint = (1ull << 62) - 1;

std::string B(std::initializer_list<int> bytes) {
  std::string out;
  for (int b : bytes) out.push_back(static_cast<char>(b));
  return out;
}

absl::Span<const uint8_t> S(const std::string& s) {
  return absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

// ---- control helpers ------------------------------------------------------------

class ControlCollector : public ControlMessageVisitor {
 public:
  absl::Status OnControlMessage(ControlMessage msg) override {
    messages.push_back(std::move(msg));
    return reply;
  }
  std::vector<ControlMessage> messages;
  absl::Status reply;
};

// Feeds `bytes` in chunks of `chunk` bytes; returns the first error.
absl::Status FeedControl(const std::string& bytes, std::vector<ControlMessage>* out,
                         size_t chunk = std::numeric_limits<size_t>::max(), bool fin = false) {
  ControlCollector collector;
  ControlStreamParser parser(&collector);
  absl::Status status;
  size_t pos = 0;
  do {
    const size_t n = std::min(chunk, bytes.size() - pos);
    const bool last = pos + n == bytes.size();
    status = parser.OnIngress(S(bytes).subspan(pos, n), fin && last);
    pos += n;
  } while (status.ok() && pos < bytes.size());
  *out = std::move(collector.messages);
  return status;
}

std::string Serialize(const ControlMessage& msg) {
  std::string out;
  absl::Status status = SerializeControlMessage(msg, &out);
  EXPECT_TRUE(status.ok()) << MessageName(msg) << ": " << status;
  return out;
}

// Parses bytes that must hold exactly one message.
ControlMessage ParseOne(const std::string& bytes) {
  std::vector<ControlMessage> messages;
  absl::Status status = FeedControl(bytes, &messages);
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(messages.size(), 1u);
  return messages.empty() ? ControlMessage{} : messages.front();
}

// Status of parsing one message of `type` whose payload is `payload`.
absl::Status ParsePayload(uint64_t type, const std::string& payload) {
  std::string bytes;
  if (type < 64) {
    bytes.push_back(static_cast<char>(type));
  } else {
    bytes += B({0x40 | static_cast<int>(type >> 8), static_cast<int>(type & 0xff)});
  }
  bytes += B({static_cast<int>(payload.size() >> 8), static_cast<int>(payload.size() & 0xff)});
  bytes += payload;
  std::vector<ControlMessage> messages;
  return FeedControl(bytes, &messages);
}

const FullTrackName kTrack{{"kvcast", "model-a"}, "layer/3"};
// Token structures: REGISTER alias 5, type 2, value "tok"; USE_VALUE type 1.
const std::string kRegisterToken = B({0x01, 0x05, 0x02}) + "tok";
const std::string kUseValueToken = B({0x03, 0x01}) + "secret";

Subscribe SampleSubscribe(FilterType filter) {
  Subscribe s;
  s.request_id = 6;
  s.track = kTrack;
  s.subscriber_priority = 7;
  s.group_order = GroupOrder::kDescending;
  s.forward = false;
  s.filter_type = filter;
  if (filter == FilterType::kAbsoluteStart || filter == FilterType::kAbsoluteRange) {
    s.start = Location{10, 2};
  }
  if (filter == FilterType::kAbsoluteRange) s.end_group = 20;
  s.parameters = {{kParamDeliveryTimeout, 250, ""}, {kParamAuthorizationToken, 0, kRegisterToken}};
  return s;
}

SubscribeOk SampleSubscribeOk(bool content) {
  SubscribeOk ok;
  ok.request_id = 6;
  ok.track_alias = 9;
  ok.expires = 30000;
  ok.group_order = GroupOrder::kDescending;
  if (content) ok.largest = Location{12, 4};
  ok.parameters = {{kParamMaxCacheDuration, 60000, ""}, {0x3f, 0, "unknown odd"}};
  return ok;
}

Fetch SampleFetch(FetchType type) {
  Fetch f;
  f.request_id = 10;
  f.subscriber_priority = 1;
  f.group_order = GroupOrder::kAscending;
  f.fetch_type = type;
  if (type == FetchType::kStandalone) {
    f.track = kTrack;
    f.start = {1, 0};
    f.end = {5, 3};
  } else {
    f.joining_request_id = 6;
    f.joining_start = type == FetchType::kRelativeJoining ? 3 : 100;
  }
  f.parameters = {{kParamAuthorizationToken, 0, kUseValueToken}};
  return f;
}

// Every message type with non-default field values, several forms of the
// messages whose layout varies.
std::vector<ControlMessage> AllMessages() {
  std::vector<ControlMessage> all;
  all.push_back(ClientSetup{{kVersionDraft14, 0xff00000d},
                            {{kSetupPath, 0, "/moq?x=1"},
                             {kSetupMaxRequestId, 100, ""},
                             {kSetupAuthorizationToken, 0, kUseValueToken},
                             {kSetupMoqtImplementation, 0, "kvcast"},
                             {0x3e, 7, ""}}});
  all.push_back(ServerSetup{kVersionDraft14,
                            {{kSetupMaxRequestId, 64, ""}, {kSetupMaxAuthTokenCacheSize, 4096, ""}}});
  all.push_back(Goaway{"moqt://relay.example/next"});
  all.push_back(MaxRequestId{kMaxVarint});
  all.push_back(RequestsBlocked{16384});
  for (FilterType f : {FilterType::kNextGroupStart, FilterType::kLargestObject,
                       FilterType::kAbsoluteStart, FilterType::kAbsoluteRange}) {
    all.push_back(SampleSubscribe(f));
  }
  all.push_back(SampleSubscribeOk(true));
  all.push_back(SampleSubscribeOk(false));
  all.push_back(SubscribeError{6, kErrTrackDoesNotExist, "no such track"});
  all.push_back(SubscribeUpdate{8, 6, {11, 1}, 21, 3, false, {{kParamDeliveryTimeout, 100, ""}}});
  all.push_back(Unsubscribe{6});
  all.push_back(PublishDone{6, kDoneTrackEnded, 3, "done"});
  {
    Publish p;
    p.request_id = 5;
    p.track = kTrack;
    p.track_alias = 11;
    p.group_order = GroupOrder::kDescending;
    p.largest = Location{3, 9};
    p.forward = false;
    p.parameters = {{kParamMaxCacheDuration, 5, ""}, {kParamDeliveryTimeout, 6, ""}};
    all.push_back(p);
    p.largest.reset();
    p.forward = true;
    all.push_back(p);
  }
  {
    PublishOk ok;
    ok.request_id = 5;
    ok.forward = false;
    ok.subscriber_priority = 9;
    ok.group_order = GroupOrder::kDescending;
    ok.filter_type = FilterType::kAbsoluteStart;
    ok.start = Location{4, 0};
    ok.parameters = {{kParamDeliveryTimeout, 77, ""}};
    all.push_back(ok);
    ok.filter_type = FilterType::kAbsoluteRange;
    ok.end_group = 8;
    all.push_back(ok);
  }
  all.push_back(PublishError{5, 4, "uninterested"});
  all.push_back(SampleFetch(FetchType::kStandalone));
  all.push_back(SampleFetch(FetchType::kRelativeJoining));
  all.push_back(SampleFetch(FetchType::kAbsoluteJoining));
  all.push_back(FetchOk{10, GroupOrder::kDescending, true, {5, 3}, {{kParamMaxCacheDuration, 10, ""}}});
  all.push_back(FetchError{10, kErrNoObjects, "none"});
  all.push_back(FetchCancel{10});
  all.push_back(TrackStatus{SampleSubscribe(FilterType::kLargestObject)});
  {
    SubscribeOk reply = SampleSubscribeOk(true);
    reply.track_alias = 0;
    all.push_back(TrackStatusOk{reply});
  }
  all.push_back(TrackStatusError{SubscribeError{6, kErrUnauthorized, "nope"}});
  all.push_back(PublishNamespace{16, {"kvcast", "model-a"}, {{kParamAuthorizationToken, 0, kRegisterToken}}});
  all.push_back(PublishNamespaceOk{16});
  all.push_back(PublishNamespaceError{16, kErrMalformedAuthToken, "bad token"});
  all.push_back(PublishNamespaceDone{{"kvcast", "model-a"}});
  all.push_back(PublishNamespaceCancel{{"kvcast"}, kErrTimeout, "timeout"});
  all.push_back(SubscribeNamespace{18, {"kvcast"}, {{0x40, 1, ""}, {0x40, 2, ""}}});
  all.push_back(SubscribeNamespaceOk{18});
  all.push_back(SubscribeNamespaceError{18, 5, "overlap"});
  all.push_back(UnsubscribeNamespace{{"kvcast", std::string("\0\xff", 2)}});
  return all;
}

std::string AllMessagesBytes() {
  std::string bytes;
  for (const ControlMessage& msg : AllMessages()) bytes += Serialize(msg);
  return bytes;
}

// ---- control: round trips -------------------------------------------------------

TEST(ControlCodecTest, RoundTripsEveryMessageType) {
  std::set<uint64_t> types;
  for (const ControlMessage& msg : AllMessages()) {
    SCOPED_TRACE(MessageName(msg));
    const std::string bytes = Serialize(msg);
    ASSERT_FALSE(bytes.empty());
    EXPECT_EQ(static_cast<uint8_t>(bytes[0]), MessageType(msg));  // all types < 64
    EXPECT_EQ(ParseOne(bytes), msg);
    types.insert(MessageType(msg));
  }
  EXPECT_EQ(types.size(), std::variant_size_v<ControlMessage>);
}

TEST(ControlCodecTest, ChunkingDoesNotChangeTheMessages) {
  const std::string bytes = AllMessagesBytes();
  const std::vector<ControlMessage> want = AllMessages();
  for (size_t chunk : {size_t{1}, size_t{2}, size_t{3}, size_t{7}, size_t{64}, bytes.size()}) {
    SCOPED_TRACE(chunk);
    std::vector<ControlMessage> got;
    ASSERT_TRUE(FeedControl(bytes, &got, chunk).ok());
    EXPECT_EQ(got, want);
  }
  // Random split points.
  std::mt19937 rng(7);
  for (int round = 0; round < 50; ++round) {
    ControlCollector collector;
    ControlStreamParser parser(&collector);
    size_t pos = 0;
    while (pos < bytes.size()) {
      const size_t n = std::min<size_t>(bytes.size() - pos, rng() % 40);
      ASSERT_TRUE(parser.OnIngress(S(bytes).subspan(pos, n), false).ok());
      pos += n;
    }
    EXPECT_EQ(collector.messages, want);
  }
}

// ---- control: byte vectors from the draft ---------------------------------------

TEST(ControlCodecTest, ClientSetupBytes) {
  const std::string wire = B({0x20, 0x00, 0x0d,                                 // type, length 13
                              0x01,                                             // 1 version
                              0xc0, 0x00, 0x00, 0x00, 0xff, 0x00, 0x00, 0x0e,  // 0xff00000e
                              0x01,                                             // 1 parameter
                              0x02, 0x40, 0x64});                               // MAX_REQUEST_ID=100
  const ClientSetup setup{{0xff00000e}, {{kSetupMaxRequestId, 100, ""}}};
  EXPECT_EQ(Serialize(setup), wire);
  EXPECT_EQ(ParseOne(wire), ControlMessage(setup));
}

TEST(ControlCodecTest, SubscribeAbsoluteRangeBytes) {
  const std::string wire = B({0x03, 0x00, 0x1b,                      // SUBSCRIBE, length 27
                              0x02,                                  // Request ID
                              0x02, 0x03, 'f', 'o', 'o', 0x03, 'b', 'a', 'r',  // namespace
                              0x05, 't', 'r', 'a', 'c', 'k',         // track name
                              0x80,                                  // Subscriber Priority
                              0x01,                                  // Group Order ascending
                              0x01,                                  // Forward
                              0x04,                                  // AbsoluteRange
                              0x05, 0x01,                            // Start {5, 1}
                              0x09,                                  // End Group
                              0x01, 0x02, 0x43, 0xe8});              // DELIVERY_TIMEOUT=1000
  Subscribe s;
  s.request_id = 2;
  s.track = {{"foo", "bar"}, "track"};
  s.subscriber_priority = 0x80;
  s.group_order = GroupOrder::kAscending;
  s.forward = true;
  s.filter_type = FilterType::kAbsoluteRange;
  s.start = Location{5, 1};
  s.end_group = 9;
  s.parameters = {{kParamDeliveryTimeout, 1000, ""}};
  EXPECT_EQ(Serialize(s), wire);
  EXPECT_EQ(ParseOne(wire), ControlMessage(s));
}

TEST(ControlCodecTest, PublishUsesSixteenBitLength) {
  // PUBLISH's figure says "Length (i)" (a draft typo); the 16-bit framing is
  // used as for every other control message.
  const std::string bytes = Serialize(PublishError{1, 0, ""});
  EXPECT_EQ(bytes, B({0x1f, 0x00, 0x03, 0x01, 0x00, 0x00}));
}

TEST(ControlCodecTest, AcceptsNonMinimalVarints) {
  // MAX_REQUEST_ID with Request ID 5 in a 4-byte varint, and the type in 2.
  EXPECT_EQ(ParseOne(B({0x40, 0x15, 0x00, 0x04, 0x80, 0x00, 0x00, 0x05})),
            ControlMessage(MaxRequestId{5}));
}

// ---- control: truncation and framing ------------------------------------------

TEST(ControlCodecTest, EveryPrefixNeedsMoreAndFinIsAViolation) {
  for (const ControlMessage& msg : AllMessages()) {
    SCOPED_TRACE(MessageName(msg));
    const std::string bytes = Serialize(msg);
    for (size_t k = 0; k < bytes.size(); ++k) {
      ControlCollector collector;
      ControlStreamParser parser(&collector);
      ASSERT_TRUE(parser.OnIngress(S(bytes).first(k), false).ok()) << k;
      EXPECT_TRUE(collector.messages.empty());
      absl::Status status = parser.OnIngress({}, true);
      EXPECT_EQ(TerminationCodeOf(status), TerminationCode::kProtocolViolation) << k;
    }
  }
}

TEST(ControlCodecTest, LengthShorterOrLongerThanTheFieldsIsAViolation) {
  for (const ControlMessage& msg : AllMessages()) {
    SCOPED_TRACE(MessageName(msg));
    const std::string bytes = Serialize(msg);
    const std::string payload = bytes.substr(3);
    for (size_t k = 0; k < payload.size(); ++k) {
      absl::Status status = ParsePayload(MessageType(msg), payload.substr(0, k));
      EXPECT_EQ(TerminationCodeOf(status), TerminationCode::kProtocolViolation) << k;
    }
    absl::Status status = ParsePayload(MessageType(msg), payload + B({0x00}));
    EXPECT_EQ(TerminationCodeOf(status), TerminationCode::kProtocolViolation);
  }
}

TEST(ControlCodecTest, UnknownTypeFailsBeforeThePayloadArrives) {
  for (uint64_t type : {0x00, 0x01, 0x1b, 0x1c, 0x22, 0x40, 0x41}) {
    std::string bytes;
    if (type < 64) {
      bytes = B({static_cast<int>(type)});
    } else {
      bytes = B({0x40, static_cast<int>(type)});
    }
    bytes += B({0xff, 0xff});  // a 65535-byte payload that never comes
    std::vector<ControlMessage> messages;
    EXPECT_EQ(TerminationCodeOf(FeedControl(bytes, &messages)),
              TerminationCode::kProtocolViolation)
        << type;
    EXPECT_EQ(TerminationCodeOf(FeedControl(bytes, &messages, 1)),
              TerminationCode::kProtocolViolation)
        << type;
  }
}

TEST(ControlCodecTest, FinIsAViolationAfterDeliveringCompleteMessages) {
  std::vector<ControlMessage> messages;
  absl::Status status = FeedControl(Serialize(MaxRequestId{3}), &messages,
                                    std::numeric_limits<size_t>::max(), /*fin=*/true);
  EXPECT_EQ(TerminationCodeOf(status), TerminationCode::kProtocolViolation);
  EXPECT_EQ(messages.size(), 1u);
  EXPECT_EQ(TerminationCodeOf(FeedControl("", &messages, 1, true)),
            TerminationCode::kProtocolViolation);
}

TEST(ControlCodecTest, ParserStaysFailed) {
  ControlCollector collector;
  ControlStreamParser parser(&collector);
  const absl::Status first = parser.OnIngress(S(B({0x1b, 0x00, 0x00})), false);
  ASSERT_FALSE(first.ok());
  EXPECT_EQ(parser.OnIngress(S(Serialize(MaxRequestId{1})), false), first);
  EXPECT_TRUE(collector.messages.empty());
}

TEST(ControlCodecTest, VisitorErrorStopsParsing) {
  ControlCollector collector;
  collector.reply = absl::FailedPreconditionError("session says no");
  ControlStreamParser parser(&collector);
  const std::string two = Serialize(MaxRequestId{1}) + Serialize(MaxRequestId{2});
  EXPECT_EQ(parser.OnIngress(S(two), false).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(collector.messages.size(), 1u);
  EXPECT_FALSE(parser.OnIngress(S(Serialize(MaxRequestId{3})), false).ok());
  EXPECT_EQ(collector.messages.size(), 1u);
}

TEST(ControlCodecTest, TerminationCodeOfForeignStatuses) {
  EXPECT_EQ(TerminationCodeOf(absl::OkStatus()), TerminationCode::kNoError);
  EXPECT_EQ(TerminationCodeOf(absl::InternalError("x")), TerminationCode::kProtocolViolation);
  absl::Status status = ProtocolError(TerminationCode::kDuplicateTrackAlias, "dup");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TerminationCodeOf(status), TerminationCode::kDuplicateTrackAlias);
}

// ---- control: field validation --------------------------------------------------

// SUBSCRIBE payload with the given middle (namespace + name) and tail.
std::string SubscribePayload(const std::string& track, const std::string& tail) {
  return B({0x02}) + track + tail;
}
const std::string kSubscribeTail = B({0x80, 0x01, 0x01, 0x02, 0x00});  // prio, order, fwd, Largest, 0 params

std::string Tuple(const std::vector<std::string>& elements) {
  std::string out = B({static_cast<int>(elements.size())});
  for (const std::string& e : elements) {
    // Two-byte varint lengths keep this simple for lengths up to 16383.
    out += B({0x40 | static_cast<int>(e.size() >> 8), static_cast<int>(e.size() & 0xff)}) + e;
  }
  return out;
}

std::string Name(const std::string& name) {
  return B({0x40 | static_cast<int>(name.size() >> 8), static_cast<int>(name.size() & 0xff)}) +
         name;
}

TEST(ControlValidationTest, NamespaceElementCount) {
  EXPECT_TRUE(ParsePayload(0x03, SubscribePayload(Tuple({"a"}) + Name("t"), kSubscribeTail)).ok());
  std::vector<std::string> max(32, "x");
  EXPECT_TRUE(ParsePayload(0x03, SubscribePayload(Tuple(max) + Name("t"), kSubscribeTail)).ok());
  std::vector<std::string> too_many(33, "x");
  EXPECT_EQ(TerminationCodeOf(ParsePayload(
                0x03, SubscribePayload(Tuple(too_many) + Name("t"), kSubscribeTail))),
            TerminationCode::kProtocolViolation);
  EXPECT_EQ(TerminationCodeOf(
                ParsePayload(0x03, SubscribePayload(Tuple({}) + Name("t"), kSubscribeTail))),
            TerminationCode::kProtocolViolation);
  // N = 0 is refused for namespace prefixes too (draft-14 SUBSCRIBE_NAMESPACE).
  EXPECT_EQ(TerminationCodeOf(ParsePayload(0x11, B({0x02, 0x00, 0x00}))),
            TerminationCode::kProtocolViolation);
  EXPECT_EQ(TerminationCodeOf(ParsePayload(0x14, B({0x00}))), TerminationCode::kProtocolViolation);
  EXPECT_EQ(TerminationCodeOf(ParsePayload(0x09, B({0x21}) + std::string(33, '\0'))),
            TerminationCode::kProtocolViolation);
}

TEST(ControlValidationTest, FullTrackNameLength) {
  // 4096 bytes in all is the maximum; the namespace counts.
  const std::string ns_part(2000, 'n');
  EXPECT_TRUE(ParsePayload(0x03, SubscribePayload(Tuple({ns_part, ns_part}) + Name(std::string(96, 't')),
                                                  kSubscribeTail))
                  .ok());
  EXPECT_EQ(TerminationCodeOf(ParsePayload(
                0x03, SubscribePayload(Tuple({ns_part, ns_part}) + Name(std::string(97, 't')),
                                       kSubscribeTail))),
            TerminationCode::kProtocolViolation);
  EXPECT_EQ(TerminationCodeOf(ParsePayload(
                0x03, SubscribePayload(Tuple({"a"}) + Name(std::string(4096, 't')), kSubscribeTail))),
            TerminationCode::kProtocolViolation);
  Subscribe s = SampleSubscribe(FilterType::kLargestObject);
  s.track = {{"a"}, std::string(4095, 't')};
  std::string out;
  EXPECT_TRUE(SerializeControlMessage(s, &out).ok());
  s.track.name.push_back('t');
  EXPECT_EQ(SerializeControlMessage(s, &out).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ControlValidationTest, ReasonPhraseLength) {
  auto error_with_reason = [](size_t n) {
    return B({0x01, 0x00, 0x40 | static_cast<int>(n >> 8), static_cast<int>(n & 0xff)}) +
           std::string(n, 'r');
  };
  EXPECT_TRUE(ParsePayload(0x05, error_with_reason(1024)).ok());
  EXPECT_EQ(TerminationCodeOf(ParsePayload(0x05, error_with_reason(1025))),
            TerminationCode::kProtocolViolation);
  // The length alone is enough to fail: the bytes need not be there.
  EXPECT_EQ(TerminationCodeOf(ParsePayload(0x19, B({0x01, 0x00, 0x44, 0x01}))),
            TerminationCode::kProtocolViolation);
  std::string out;
  EXPECT_FALSE(SerializeControlMessage(SubscribeError{1, 0, std::string(1025, 'r')}, &out).ok());
  EXPECT_TRUE(SerializeControlMessage(SubscribeError{1, 0, std::string(1024, 'r')}, &out).ok());
}

TEST(ControlValidationTest, GoawayUriLength) {
  auto goaway = [](size_t n) {
    return B({0x40 | static_cast<int>(n >> 8), static_cast<int>(n & 0xff)}) + std::string(n, 'u');
  };
  EXPECT_TRUE(ParsePayload(0x10, goaway(8192)).ok());
  EXPECT_EQ(TerminationCodeOf(ParsePayload(0x10, goaway(8193))),
            TerminationCode::kProtocolViolation);
}

TEST(ControlValidationTest, OddKeyValueLength) {
  // CLIENT_SETUP with an unknown odd setup parameter of Length 65536.
  const std::string setup = B({0x01, 0x01, 0x01, 0x3f, 0x80, 0x01, 0x00, 0x00});
  EXPECT_EQ(TerminationCodeOf(ParsePayload(0x20, setup)), TerminationCode::kProtocolViolation);
  ServerSetup big{kVersionDraft14, {{0x3f, 0, std::string(65536, 'x')}}};
  std::string out;
  EXPECT_EQ(SerializeControlMessage(big, &out).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(out.empty());
}

TEST(ControlValidationTest, FlagsGroupOrderAndFilter) {
  auto subscribe = [](int order, int forward, const std::string& filter) {
    return SubscribePayload(Tuple({"a"}) + Name("t"),
                            B({0x80, order, forward}) + filter + B({0x00}));
  };
  EXPECT_TRUE(ParsePayload(0x03, subscribe(0, 0, B({0x01}))).ok());
  EXPECT_TRUE(ParsePayload(0x03, subscribe(2, 1, B({0x02}))).ok());
  EXPECT_EQ(TerminationCodeOf(ParsePayload(0x03, subscribe(3, 1, B({0x02})))),
            TerminationCode::kProtocolViolation);
  EXPECT_EQ(TerminationCodeOf(ParsePayload(0x03, subscribe(1, 2, B({0x02})))),
            TerminationCode::kProtocolViolation);
  for (int filter : {0x00, 0x05, 0x21}) {
    EXPECT_EQ(TerminationCodeOf(ParsePayload(0x03, subscribe(1, 1, B({filter})))),
              TerminationCode::kProtocolViolation)
        << filter;
  }
  // AbsoluteStart / AbsoluteRange without their Locations.
  EXPECT_EQ(TerminationCodeOf(ParsePayload(0x03, SubscribePayload(Tuple({"a"}) + Name("t"),
                                                                  B({0x80, 1, 1, 0x03})))),
            TerminationCode::kProtocolViolation);
  EXPECT_EQ(TerminationCodeOf(ParsePayload(0x03, SubscribePayload(Tuple({"a"}) + Name("t"),
                                                                  B({0x80, 1, 1, 0x04, 5, 1})))),
            TerminationCode::kProtocolViolation);

  // SUBSCRIBE_OK: Group Order 0 is refused; Content Exists must be 0 or 1.
  EXPECT_TRUE(ParsePayload(0x04, B({1, 2, 0, 1, 1, 5, 6, 0})).ok());
  EXPECT_EQ(TerminationCodeOf(ParsePayload(0x04, B({1, 2, 0, 0, 0, 0}))),
            TerminationCode::kProtocolViolation);
  EXPECT_EQ(TerminationCodeOf(ParsePayload(0x04, B({1, 2, 0, 1, 2, 5, 6, 0}))),
            TerminationCode::kProtocolViolation);
  // Content Exists = 1 without a Largest Location.
  EXPECT_EQ(TerminationCodeOf(ParsePayload(0x04, B({1, 2, 0, 1, 1}))),
            TerminationCode::kProtocolViolation);
  // FETCH_OK End Of Track must be 0 or 1.
  EXPECT_EQ(TerminationCodeOf(ParsePayload(0x18, B({1, 1, 2, 0, 0, 0}))),
            TerminationCode::kProtocolViolation);
  // FETCH types other than 1..3.
  for (int fetch_type : {0, 4}) {
    EXPECT_EQ(TerminationCodeOf(ParsePayload(0x16, B({1, 0x80, 1, fetch_type, 1, 2, 0}))),
              TerminationCode::kProtocolViolation);
  }
  EXPECT_TRUE(ParsePayload(0x16, B({1, 0x80, 1, 2, 1, 2, 0})).ok());
}

TEST(ControlValidationTest, AuthorizationTokenStructure) {
  auto subscribe_with_token = [](const std::string& token) {
    return SubscribePayload(Tuple({"a"}) + Name("t"),
                            B({0x80, 1, 1, 0x02, 0x01, 0x03, static_cast<int>(token.size())}) +
                                token);
  };
  EXPECT_TRUE(ParsePayload(0x03, subscribe_with_token(B({0x00, 0x05}))).ok());  // DELETE
  EXPECT_TRUE(ParsePayload(0x03, subscribe_with_token(B({0x02, 0x05}))).ok());  // USE_ALIAS
  EXPECT_TRUE(ParsePayload(0x03, subscribe_with_token(kRegisterToken)).ok());
  EXPECT_TRUE(ParsePayload(0x03, subscribe_with_token(B({0x03, 0x00}))).ok());  // empty value
  for (const std::string& bad : {std::string(), B({0x04, 0x01}), B({0x00}), B({0x00, 0x05, 0x01}),
                                 B({0x01, 0x05}), B({0x03}), B({0x02, 0x40})}) {
    EXPECT_EQ(TerminationCodeOf(ParsePayload(0x03, subscribe_with_token(bad))),
              TerminationCode::kKeyValueFormattingError);
  }
  // Same code point in CLIENT_SETUP.
  EXPECT_EQ(TerminationCodeOf(ParsePayload(0x20, B({0x01, 0x01, 0x01, 0x03, 0x01, 0x07}))),
            TerminationCode::kKeyValueFormattingError);
  // SUBSCRIBE_OK may not carry the parameter, so it is ignored there.
  EXPECT_TRUE(ParsePayload(0x04, B({1, 2, 0, 1, 0, 1, 0x03, 0x01, 0x07})).ok());
  // Serializing a malformed token is refused too.
  Subscribe s = SampleSubscribe(FilterType::kLargestObject);
  s.parameters = {{kParamAuthorizationToken, 0, B({0x09})}};
  std::string out;
  EXPECT_EQ(SerializeControlMessage(s, &out).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ControlValidationTest, DuplicateParameters) {
  auto subscribe_with_params = [](const std::string& params) {
    return SubscribePayload(Tuple({"a"}) + Name("t"), B({0x80, 1, 1, 0x02}) + params);
  };
  // DELIVERY_TIMEOUT may not repeat; AUTHORIZATION TOKEN and unknown ones may.
  EXPECT_EQ(TerminationCodeOf(
                ParsePayload(0x03, subscribe_with_params(B({0x02, 0x02, 0x01, 0x02, 0x02})))),
            TerminationCode::kProtocolViolation);
  EXPECT_TRUE(ParsePayload(0x03, subscribe_with_params(B({0x02, 0x03, 0x02, 0x02, 0x05, 0x03,
                                                          0x02, 0x02, 0x06})))
                  .ok());
  EXPECT_TRUE(
      ParsePayload(0x03, subscribe_with_params(B({0x02, 0x0a, 0x01, 0x0a, 0x02}))).ok());
  // MAX_CACHE_DURATION is not a SUBSCRIBE parameter: ignored, repeats allowed.
  EXPECT_TRUE(
      ParsePayload(0x03, subscribe_with_params(B({0x02, 0x04, 0x01, 0x04, 0x02}))).ok());
  // Setup parameters: MAX_REQUEST_ID twice.
  EXPECT_EQ(TerminationCodeOf(ParsePayload(0x21, B({0x01, 0x02, 0x02, 0x01, 0x02, 0x02}))),
            TerminationCode::kProtocolViolation);
}

TEST(ControlValidationTest, HugeCountsFailWithoutAllocating) {
  const std::string huge = B({0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff});  // 2^62-1
  // CLIENT_SETUP claiming 2^62-1 versions, and 2^62-1 parameters.
  EXPECT_EQ(TerminationCodeOf(ParsePayload(0x20, huge + B({0x01}))),
            TerminationCode::kProtocolViolation);
  EXPECT_EQ(TerminationCodeOf(ParsePayload(0x21, B({0x01}) + huge + B({0x00, 0x00}))),
            TerminationCode::kProtocolViolation);
  // Namespace count and element/name lengths of 2^62-1.
  EXPECT_EQ(TerminationCodeOf(ParsePayload(0x09, huge)), TerminationCode::kProtocolViolation);
  EXPECT_EQ(TerminationCodeOf(ParsePayload(0x09, B({0x01}) + huge)),
            TerminationCode::kProtocolViolation);
  EXPECT_EQ(TerminationCodeOf(ParsePayload(0x03, B({0x01, 0x01, 0x01, 'a'}) + huge)),
            TerminationCode::kProtocolViolation);
  // GOAWAY URI and reason lengths of 2^62-1.
  EXPECT_EQ(TerminationCodeOf(ParsePayload(0x10, huge)), TerminationCode::kProtocolViolation);
  EXPECT_EQ(TerminationCodeOf(ParsePayload(0x05, B({0x01, 0x01}) + huge)),
            TerminationCode::kProtocolViolation);
}

TEST(ControlSerializeTest, RefusesOutOfRangeFields) {
  std::string out;
  auto refused = [&out](const ControlMessage& msg) {
    out.clear();
    absl::Status status = SerializeControlMessage(msg, &out);
    // Nothing is appended on failure.
    return status.code() == absl::StatusCode::kInvalidArgument && out.empty();
  };
  EXPECT_TRUE(refused(MaxRequestId{kMaxVarint + 1}));
  EXPECT_TRUE(refused(PublishNamespaceDone{{}}));
  EXPECT_TRUE(refused(PublishNamespaceDone{TrackNamespace(33, "x")}));
  EXPECT_TRUE(refused(PublishNamespaceDone{{std::string(4097, 'x')}}));
  Subscribe s = SampleSubscribe(FilterType::kAbsoluteStart);
  s.start.reset();
  EXPECT_TRUE(refused(s));
  s = SampleSubscribe(FilterType::kAbsoluteRange);
  s.end_group.reset();
  EXPECT_TRUE(refused(s));
  s = SampleSubscribe(FilterType::kLargestObject);
  s.start = Location{1, 1};
  EXPECT_TRUE(refused(s));
  s = SampleSubscribe(FilterType::kLargestObject);
  s.filter_type = static_cast<FilterType>(9);
  EXPECT_TRUE(refused(s));
  s = SampleSubscribe(FilterType::kLargestObject);
  s.group_order = static_cast<GroupOrder>(3);
  EXPECT_TRUE(refused(s));
  SubscribeOk ok = SampleSubscribeOk(true);
  ok.group_order = GroupOrder::kPublisherDefault;
  EXPECT_TRUE(refused(ok));
  Fetch f = SampleFetch(FetchType::kStandalone);
  f.fetch_type = static_cast<FetchType>(0);
  EXPECT_TRUE(refused(f));
  // Even-type pairs carry integers, odd ones bytes.
  EXPECT_TRUE(refused(ServerSetup{kVersionDraft14, {{0x02, 0, "bytes"}}}));
  EXPECT_TRUE(refused(ServerSetup{kVersionDraft14, {{0x01, 5, ""}}}));
  // Payload above 65535 bytes.
  EXPECT_TRUE(refused(ServerSetup{kVersionDraft14,
                                  {{0x3f, 0, std::string(65000, 'a')},
                                   {0x3d, 0, std::string(1000, 'b')}}}));
  EXPECT_TRUE(refused(Goaway{std::string(8193, 'u')}));
  // Nothing is appended on failure.
  EXPECT_TRUE(out.empty());
}

// ---- control: garbage -----------------------------------------------------------

// Whatever the parser accepts must serialize again and parse back equal.
void ExpectReserializable(const std::vector<ControlMessage>& messages) {
  for (const ControlMessage& msg : messages) {
    std::string bytes;
    absl::Status status = SerializeControlMessage(msg, &bytes);
    ASSERT_TRUE(status.ok()) << MessageName(msg) << ": " << status;
    EXPECT_EQ(ParseOne(bytes), msg);
  }
}

TEST(ControlGarbageTest, RandomBytes) {
  std::mt19937 rng(1);
  for (int round = 0; round < 2000; ++round) {
    std::string bytes(rng() % 80, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    if (!bytes.empty() && round % 2 == 0) {
      // Known types make the parser go deeper.
      bytes[0] = static_cast<char>(2 + rng() % 0x20);
      if (bytes.size() > 2) bytes[1] = 0;
      if (bytes.size() > 2) bytes[2] = static_cast<char>(bytes.size() - 3);
    }
    std::vector<ControlMessage> whole, bytewise;
    const absl::Status a = FeedControl(bytes, &whole);
    const absl::Status b = FeedControl(bytes, &bytewise, 1);
    EXPECT_EQ(a.ok(), b.ok());
    EXPECT_EQ(TerminationCodeOf(a), TerminationCodeOf(b));
    EXPECT_EQ(whole, bytewise);
    ExpectReserializable(whole);
  }
}

TEST(ControlGarbageTest, MutatedValidStream) {
  const std::string valid = AllMessagesBytes();
  std::mt19937 rng(2);
  for (int round = 0; round < 1000; ++round) {
    std::string bytes = valid;
    for (int flips = 1 + rng() % 3; flips > 0; --flips) {
      bytes[rng() % bytes.size()] = static_cast<char>(rng());
    }
    std::vector<ControlMessage> messages;
    FeedControl(bytes, &messages, 1 + rng() % 50).IgnoreError();
    ExpectReserializable(messages);
  }
}

// ---- data streams: helpers --------------------------------------------------------

class DataRecorder : public DataStreamVisitor {
 public:
  struct Object {
    ObjectHeader header;
    std::string payload;
    int calls = 0;
    bool complete = false;
  };

  absl::Status OnSubgroupHeader(const SubgroupHeader& header) override {
    events += "H";
    subgroup_headers.push_back(header);
    return absl::OkStatus();
  }
  absl::Status OnFetchHeader(uint64_t request_id) override {
    events += "F";
    fetch_headers.push_back(request_id);
    return absl::OkStatus();
  }
  absl::Status OnObject(const ObjectHeader& header, absl::Span<const uint8_t> fragment,
                        bool last) override {
    if (objects.empty() || objects.back().complete) {
      events += "O";
      objects.emplace_back();
      objects.back().header = header;
    }
    Object& object = objects.back();
    EXPECT_EQ(object.header, header);
    object.payload.append(reinterpret_cast<const char*>(fragment.data()), fragment.size());
    object.calls++;
    object.complete = last;
    ++object_calls;
    return object_reply;
  }
  absl::Status OnStreamEnd() override {
    events += "E";
    return absl::OkStatus();
  }

  std::string events;
  std::vector<SubgroupHeader> subgroup_headers;
  std::vector<uint64_t> fetch_headers;
  std::vector<Object> objects;
  int object_calls = 0;
  absl::Status object_reply;
};

bool operator==(const DataRecorder::Object& a, const DataRecorder::Object& b) {
  return a.header == b.header && a.payload == b.payload && a.complete == b.complete;
}

absl::Status FeedData(const std::string& bytes, DataRecorder* recorder, size_t chunk,
                      bool fin = true, CodecLimits limits = {}) {
  DataStreamParser parser(recorder, limits);
  size_t pos = 0;
  absl::Status status;
  do {
    const size_t n = std::min(chunk, bytes.size() - pos);
    const bool last = pos + n == bytes.size();
    status = parser.OnIngress(S(bytes).subspan(pos, n), fin && last);
    pos += n;
  } while (status.ok() && pos < bytes.size());
  return status;
}

ObjectHeader MakeObject(uint64_t group, uint64_t subgroup, uint64_t id, uint8_t priority,
                        Parameters extensions = {}, ObjectStatus status = ObjectStatus::kNormal,
                        uint64_t payload_length = 0) {
  ObjectHeader o;
  o.group = group;
  o.subgroup = subgroup;
  o.object = id;
  o.publisher_priority = priority;
  o.extensions = std::move(extensions);
  o.status = status;
  o.payload_length = payload_length;
  return o;
}

// ---- data streams: byte vectors from the draft ------------------------------------

TEST(SubgroupStreamTest, DraftExampleOne) {
  const std::string wire = B({0x14, 0x02, 0x00, 0x00, 0x00,        // header
                              0x00, 0x04, 'a', 'b', 'c', 'd',       // object 0
                              0x00, 0x04, 'e', 'f', 'g', 'h'});     // object 1
  SubgroupHeader header;
  header.track_alias = 2;
  header.group = 0;
  header.subgroup_mode = SubgroupHeader::SubgroupIdMode::kExplicit;
  header.subgroup = 0;
  header.publisher_priority = 0;

  std::string written = SerializeSubgroupHeader(header);
  ASSERT_TRUE(SerializeSubgroupObject(header, std::nullopt, MakeObject(0, 0, 0, 0), S("abcd"),
                                      &written)
                  .ok());
  ASSERT_TRUE(
      SerializeSubgroupObject(header, 0, MakeObject(0, 0, 1, 0), S("efgh"), &written).ok());
  EXPECT_EQ(written, wire);

  for (size_t chunk : {size_t{1}, wire.size()}) {
    DataRecorder rec;
    ASSERT_TRUE(FeedData(wire, &rec, chunk).ok());
    EXPECT_EQ(rec.events, "HOOE");
    ASSERT_EQ(rec.subgroup_headers.size(), 1u);
    EXPECT_EQ(rec.subgroup_headers[0], header);
    ASSERT_EQ(rec.objects.size(), 2u);
    EXPECT_EQ(rec.objects[0].header, MakeObject(0, 0, 0, 0, {}, ObjectStatus::kNormal, 4));
    EXPECT_EQ(rec.objects[0].payload, "abcd");
    EXPECT_EQ(rec.objects[1].header, MakeObject(0, 0, 1, 0, {}, ObjectStatus::kNormal, 4));
    EXPECT_EQ(rec.objects[1].payload, "efgh");
  }
}

TEST(SubgroupStreamTest, DraftExampleTwoWithExtensions) {
  // The draft's second example: Extension Headers Length = 33 with a type-4
  // varint 2186796243 (8 bytes) and a type-77 value of Length 21. (The
  // draft's sample value "traceID:123456" is 14 bytes; Length 21 and the
  // total of 33 are kept, with a 21-byte value.)
  const std::string trace = "traceID:1234567890123";
  ASSERT_EQ(trace.size(), 21u);
  const std::string wire =
      B({0x15, 0x02, 0x00, 0x00, 0x00,                                  // header
         0x00,                                                          // delta 0: object 0
         0x21,                                                          // 33 bytes of extensions
         0x04, 0xc0, 0x00, 0x00, 0x00, 0x82, 0x57, 0xdc, 0xd3,          // {4, 2186796243}
         0x40, 0x4d, 0x15}) + trace +                                   // {77, 21 bytes}
      B({0x04, 'a', 'b', 'c', 'd',                                      // payload
         0x00, 0x00, 0x04, 'e', 'f', 'g', 'h'});                        // object 1
  const Parameters extensions = {{4, 2186796243u, ""}, {77, 0, trace}};

  SubgroupHeader header;
  header.track_alias = 2;
  header.subgroup_mode = SubgroupHeader::SubgroupIdMode::kExplicit;
  header.publisher_priority = 0;
  header.has_extensions = true;
  std::string written = SerializeSubgroupHeader(header);
  ASSERT_TRUE(SerializeSubgroupObject(header, std::nullopt, MakeObject(0, 0, 0, 0, extensions),
                                      S("abcd"), &written)
                  .ok());
  ASSERT_TRUE(
      SerializeSubgroupObject(header, 0, MakeObject(0, 0, 1, 0), S("efgh"), &written).ok());
  EXPECT_EQ(written, wire);

  DataRecorder rec;
  ASSERT_TRUE(FeedData(wire, &rec, 1).ok());
  ASSERT_EQ(rec.objects.size(), 2u);
  EXPECT_EQ(rec.objects[0].header.extensions, extensions);
  EXPECT_EQ(rec.objects[0].payload, "abcd");
  EXPECT_TRUE(rec.objects[1].header.extensions.empty());
  EXPECT_EQ(rec.objects[1].header.object, 1u);
  EXPECT_EQ(rec.events, "HOOE");
}

TEST(FetchStreamTest, ObjectsBytes) {
  const std::string wire = B({0x05, 0x07,                                      // FETCH_HEADER, req 7
                              0x01, 0x00, 0x02, 0x40, 0x00, 0x03, 'x', 'y', 'z',  // {1,0,2} "xyz"
                              0x01, 0x00, 0x03, 0x40, 0x00, 0x00, 0x03});       // {1,0,3} End of Group
  std::string written = SerializeFetchHeader(7);
  ASSERT_TRUE(SerializeFetchObject(MakeObject(1, 0, 2, 0x40), S("xyz"), &written).ok());
  ASSERT_TRUE(SerializeFetchObject(MakeObject(1, 0, 3, 0x40, {}, ObjectStatus::kEndOfGroup), {},
                                   &written)
                  .ok());
  EXPECT_EQ(written, wire);
  // The header alone, then the payload after it (as a session sends a
  // shared payload), gives the same bytes.
  std::string split = SerializeFetchHeader(7);
  ASSERT_TRUE(SerializeFetchObjectHeader(MakeObject(1, 0, 2, 0x40), S("xyz"), &split).ok());
  split += "xyz";
  ASSERT_TRUE(SerializeFetchObjectHeader(MakeObject(1, 0, 3, 0x40, {}, ObjectStatus::kEndOfGroup),
                                         {}, &split)
                  .ok());
  EXPECT_EQ(split, wire);

  DataRecorder rec;
  ASSERT_TRUE(FeedData(wire, &rec, wire.size()).ok());
  EXPECT_EQ(rec.events, "FOOE");
  EXPECT_EQ(rec.fetch_headers, std::vector<uint64_t>{7});
  ASSERT_EQ(rec.objects.size(), 2u);
  EXPECT_EQ(rec.objects[0].header, MakeObject(1, 0, 2, 0x40, {}, ObjectStatus::kNormal, 3));
  EXPECT_EQ(rec.objects[0].payload, "xyz");
  EXPECT_EQ(rec.objects[1].header, MakeObject(1, 0, 3, 0x40, {}, ObjectStatus::kEndOfGroup, 0));
  EXPECT_EQ(rec.objects[1].calls, 1);
}

// ---- data streams: all header types ------------------------------------------------

struct SubgroupCase {
  SubgroupHeader::SubgroupIdMode mode;
  bool extensions;
  bool end_of_group;
  uint8_t type;
};

class SubgroupTypeTest : public testing::TestWithParam<SubgroupCase> {};

TEST_P(SubgroupTypeTest, RoundTrip) {
  const SubgroupCase& c = GetParam();
  SubgroupHeader header;
  header.track_alias = 300;
  header.group = 70000;
  header.subgroup_mode = c.mode;
  header.subgroup = c.mode == SubgroupHeader::SubgroupIdMode::kExplicit      ? 9
                    : c.mode == SubgroupHeader::SubgroupIdMode::kFirstObject ? 3
                                                                             : 0;
  header.publisher_priority = 200;
  header.has_extensions = c.extensions;
  header.end_of_group = c.end_of_group;

  const Parameters ext = c.extensions ? Parameters{{0x3c, 2, ""}} : Parameters{};
  const uint64_t sg = header.subgroup;
  std::string wire = SerializeSubgroupHeader(header);
  ASSERT_FALSE(wire.empty());
  EXPECT_EQ(static_cast<uint8_t>(wire[0]), c.type);
  ASSERT_TRUE(SerializeSubgroupObject(header, std::nullopt, MakeObject(70000, sg, 3, 200, ext),
                                      S("first"), &wire)
                  .ok());
  ASSERT_TRUE(SerializeSubgroupObject(header, 3, MakeObject(70000, sg, 4, 200), {}, &wire).ok());
  ASSERT_TRUE(SerializeSubgroupObject(header, 4, MakeObject(70000, sg, 10, 200, ext,
                                                            ObjectStatus::kEndOfGroup),
                                      {}, &wire)
                  .ok());

  for (size_t chunk : {size_t{1}, size_t{5}, wire.size()}) {
    DataRecorder rec;
    ASSERT_TRUE(FeedData(wire, &rec, chunk).ok()) << chunk;
    EXPECT_EQ(rec.events, "HOOOE");  // the header is reported before any object
    ASSERT_EQ(rec.subgroup_headers.size(), 1u);
    EXPECT_EQ(rec.subgroup_headers[0], header);
    ASSERT_EQ(rec.objects.size(), 3u);
    EXPECT_EQ(rec.objects[0].header,
              MakeObject(70000, sg, 3, 200, ext, ObjectStatus::kNormal, 5));
    EXPECT_EQ(rec.objects[0].payload, "first");
    EXPECT_EQ(rec.objects[1].header, MakeObject(70000, sg, 4, 200));
    EXPECT_EQ(rec.objects[2].header,
              MakeObject(70000, sg, 10, 200, ext, ObjectStatus::kEndOfGroup));
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllTwelve, SubgroupTypeTest,
    testing::Values(SubgroupCase{SubgroupHeader::SubgroupIdMode::kZero, false, false, 0x10},
                    SubgroupCase{SubgroupHeader::SubgroupIdMode::kZero, true, false, 0x11},
                    SubgroupCase{SubgroupHeader::SubgroupIdMode::kFirstObject, false, false, 0x12},
                    SubgroupCase{SubgroupHeader::SubgroupIdMode::kFirstObject, true, false, 0x13},
                    SubgroupCase{SubgroupHeader::SubgroupIdMode::kExplicit, false, false, 0x14},
                    SubgroupCase{SubgroupHeader::SubgroupIdMode::kExplicit, true, false, 0x15},
                    SubgroupCase{SubgroupHeader::SubgroupIdMode::kZero, false, true, 0x18},
                    SubgroupCase{SubgroupHeader::SubgroupIdMode::kZero, true, true, 0x19},
                    SubgroupCase{SubgroupHeader::SubgroupIdMode::kFirstObject, false, true, 0x1a},
                    SubgroupCase{SubgroupHeader::SubgroupIdMode::kFirstObject, true, true, 0x1b},
                    SubgroupCase{SubgroupHeader::SubgroupIdMode::kExplicit, false, true, 0x1c},
                    SubgroupCase{SubgroupHeader::SubgroupIdMode::kExplicit, true, true, 0x1d}));

TEST(FetchStreamTest, FailedWriteLeavesTheBufferAsItWas) {
  std::string out = "queued";
  ObjectHeader object = MakeObject(kMaxVarint + 1, 0, 0, 0);  // group out of range
  EXPECT_EQ(SerializeFetchObject(object, S("payload"), &out).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(out, "queued");
}

TEST(SubgroupStreamTest, ObjectIdDeltas) {
  SubgroupHeader header;
  header.subgroup_mode = SubgroupHeader::SubgroupIdMode::kZero;
  std::string wire = SerializeSubgroupHeader(header);
  const size_t header_size = wire.size();
  ASSERT_TRUE(SerializeSubgroupObject(header, std::nullopt, MakeObject(0, 0, 3, 0), S("a"), &wire).ok());
  ASSERT_TRUE(SerializeSubgroupObject(header, 3, MakeObject(0, 0, 4, 0), S("b"), &wire).ok());
  ASSERT_TRUE(SerializeSubgroupObject(header, 4, MakeObject(0, 0, 10, 0), S("c"), &wire).ok());
  // Deltas 3 (absolute first id), 0 and 5.
  EXPECT_EQ(wire.substr(header_size), B({0x03, 0x01, 'a', 0x00, 0x01, 'b', 0x05, 0x01, 'c'}));
  // Ids must increase.
  std::string out;
  EXPECT_EQ(SerializeSubgroupObject(header, 10, MakeObject(0, 0, 10, 0), S("d"), &out).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(out.empty());
}

TEST(SubgroupStreamTest, FirstObjectModeReportsHeaderWithTheFirstId) {
  // Type 0x12: no Subgroup ID field; the first object (id 7) supplies it.
  const std::string wire = B({0x12, 0x01, 0x02, 0x03, 0x07, 0x01, 'z', 0x00, 0x00, 0x00});
  DataRecorder rec;
  DataStreamParser parser(&rec);
  ASSERT_TRUE(parser.OnIngress(S(wire).first(4), false).ok());
  EXPECT_EQ(rec.events, "");  // id unknown yet
  ASSERT_TRUE(parser.OnIngress(S(wire).subspan(4), true).ok());
  EXPECT_EQ(rec.events, "HOOE");
  ASSERT_EQ(rec.subgroup_headers.size(), 1u);
  EXPECT_EQ(rec.subgroup_headers[0].subgroup, 7u);
  EXPECT_EQ(rec.subgroup_headers[0].subgroup_mode, SubgroupHeader::SubgroupIdMode::kFirstObject);
  EXPECT_EQ(rec.objects[0].header.subgroup, 7u);
  EXPECT_EQ(rec.objects[1].header.subgroup, 7u);
  EXPECT_EQ(rec.objects[1].header.object, 8u);

  // The writer checks the first id matches the header's subgroup.
  SubgroupHeader header;
  header.subgroup_mode = SubgroupHeader::SubgroupIdMode::kFirstObject;
  header.subgroup = 7;
  std::string out;
  EXPECT_FALSE(SerializeSubgroupObject(header, std::nullopt, MakeObject(0, 7, 6, 0), {}, &out).ok());
  EXPECT_TRUE(SerializeSubgroupObject(header, std::nullopt, MakeObject(0, 7, 7, 0), {}, &out).ok());
}

TEST(SubgroupStreamTest, EmptyStreams) {
  {
    DataRecorder rec;
    EXPECT_TRUE(FeedData(B({0x10, 0x01, 0x02, 0x80}), &rec, 1).ok());
    EXPECT_EQ(rec.events, "HE");
  }
  {
    // A first-object-id stream with no object is reported with subgroup 0.
    DataRecorder rec;
    EXPECT_TRUE(FeedData(B({0x12, 0x01, 0x02, 0x80}), &rec, 100).ok());
    EXPECT_EQ(rec.events, "HE");
  }
  {
    DataRecorder rec;
    DataStreamParser parser(&rec);
    EXPECT_EQ(TerminationCodeOf(parser.OnIngress({}, true)), TerminationCode::kProtocolViolation);
  }
}

// ---- data streams: payload streaming and limits -------------------------------------

TEST(DataStreamTest, StreamsLargePayloadInFragments) {
  SubgroupHeader header;
  const std::string payload(3 << 20, 'p');
  std::string wire = SerializeSubgroupHeader(header);
  ASSERT_TRUE(
      SerializeSubgroupObject(header, std::nullopt, MakeObject(0, 0, 0, 128), S(payload), &wire)
          .ok());
  DataRecorder rec;
  DataStreamParser parser(&rec);
  const size_t header_bytes = wire.size() - payload.size();
  // Header alone: the object is announced with an empty first fragment.
  ASSERT_TRUE(parser.OnIngress(S(wire).first(header_bytes), false).ok());
  ASSERT_EQ(rec.objects.size(), 1u);
  EXPECT_EQ(rec.objects[0].calls, 1);
  EXPECT_EQ(rec.objects[0].payload, "");
  EXPECT_EQ(rec.objects[0].header.payload_length, payload.size());
  // Each chunk is handed on as it arrives.
  size_t pos = header_bytes;
  while (pos < wire.size()) {
    const size_t n = std::min<size_t>(64 * 1024, wire.size() - pos);
    ASSERT_TRUE(parser.OnIngress(S(wire).subspan(pos, n), false).ok());
    pos += n;
    EXPECT_EQ(rec.objects[0].payload.size(), pos - header_bytes);
    EXPECT_EQ(rec.objects[0].complete, pos == wire.size());
  }
  EXPECT_EQ(rec.objects[0].payload, payload);
  ASSERT_TRUE(parser.OnIngress({}, true).ok());
  EXPECT_EQ(rec.events, "HOE");
}

TEST(DataStreamTest, ObjectAboveTheLimitFailsAtItsHeader) {
  CodecLimits limits;
  limits.max_object_payload = 1000;
  // Payload Length 1001 (0x43e9) with no payload bytes yet.
  DataRecorder rec;
  DataStreamParser parser(&rec, limits);
  EXPECT_EQ(TerminationCodeOf(parser.OnIngress(S(B({0x10, 0x01, 0x02, 0x80, 0x00, 0x43, 0xe9})),
                                               false)),
            TerminationCode::kProtocolViolation);
  EXPECT_TRUE(rec.objects.empty());
  DataRecorder ok_rec;
  EXPECT_TRUE(FeedData(B({0x10, 0x01, 0x02, 0x80, 0x00, 0x43, 0xe8}) + std::string(1000, 'x'),
                       &ok_rec, 333, true, limits)
                  .ok());
  // A length of 2^62-1 on a fetch stream.
  DataRecorder fetch_rec;
  EXPECT_EQ(TerminationCodeOf(FeedData(B({0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff,
                                          0xff, 0xff, 0xff, 0xff, 0xff, 0xff}),
                                       &fetch_rec, 1, false)),
            TerminationCode::kProtocolViolation);
}

TEST(DataStreamTest, ExtensionLimitsAndFormat) {
  CodecLimits limits;
  limits.max_extension_bytes = 16;
  auto stream = [](const std::string& extensions_field) {
    return B({0x11, 0x01, 0x02, 0x80, 0x00}) + extensions_field + B({0x00, 0x00});
  };
  DataRecorder rec;
  EXPECT_TRUE(FeedData(stream(B({0x02, 0x04, 0x05})), &rec, 1, true, limits).ok());
  EXPECT_EQ(rec.objects.at(0).header.extensions, (Parameters{{4, 5, ""}}));
  // 17 bytes declared: refused before they arrive.
  EXPECT_EQ(TerminationCodeOf(FeedData(B({0x11, 0x01, 0x02, 0x80, 0x00, 0x11}), &rec, 1, false,
                                       limits)),
            TerminationCode::kProtocolViolation);
  // A pair running past the block.
  EXPECT_EQ(TerminationCodeOf(FeedData(stream(B({0x03, 0x05, 0x05, 'a'})), &rec, 100)),
            TerminationCode::kProtocolViolation);
  // An odd pair longer than 65535 (declared; the limit is raised to reach it).
  CodecLimits big;
  big.max_extension_bytes = 1 << 20;
  std::string huge = B({0x05, 0x80, 0x01, 0x00, 0x00}) + std::string(65536, 'v');
  std::string field = B({0x80, 0x01, 0x00, 0x05});  // 65541 bytes
  ASSERT_EQ(huge.size(), 65541u);
  EXPECT_EQ(TerminationCodeOf(FeedData(stream(field + huge), &rec, 4096, true, big)),
            TerminationCode::kProtocolViolation);
}

TEST(DataStreamTest, ObjectStatusRules) {
  DataRecorder rec;
  // Status 2 is not defined.
  EXPECT_EQ(TerminationCodeOf(FeedData(B({0x10, 0x01, 0x02, 0x80, 0x00, 0x00, 0x02}), &rec, 1)),
            TerminationCode::kProtocolViolation);
  // Object Does Not Exist with extensions.
  EXPECT_EQ(TerminationCodeOf(
                FeedData(B({0x11, 0x01, 0x02, 0x80, 0x00, 0x02, 0x04, 0x01, 0x00, 0x01}), &rec, 1)),
            TerminationCode::kProtocolViolation);
  // ... and without: fine.
  DataRecorder ok;
  EXPECT_TRUE(FeedData(B({0x11, 0x01, 0x02, 0x80, 0x00, 0x00, 0x00, 0x01}), &ok, 1).ok());
  EXPECT_EQ(ok.objects.at(0).header.status, ObjectStatus::kDoesNotExist);
  // Nothing may follow End of Group on a subgroup stream.
  EXPECT_EQ(TerminationCodeOf(FeedData(B({0x10, 0x01, 0x02, 0x80, 0x00, 0x00, 0x03, 0x00, 0x01,
                                          'x'}),
                                       &rec, 100)),
            TerminationCode::kProtocolViolation);
  // The serializers refuse a status with a payload.
  std::string out;
  EXPECT_FALSE(SerializeFetchObject(MakeObject(0, 0, 0, 0, {}, ObjectStatus::kEndOfTrack), S("x"),
                                    &out)
                   .ok());
  EXPECT_FALSE(SerializeFetchObject(MakeObject(0, 0, 0, 0, {{2, 1, ""}},
                                               ObjectStatus::kDoesNotExist),
                                    {}, &out)
                   .ok());
  SubgroupHeader plain;
  EXPECT_FALSE(
      SerializeSubgroupObject(plain, std::nullopt, MakeObject(0, 0, 0, 0, {{2, 1, ""}}), {}, &out)
          .ok());
  EXPECT_TRUE(out.empty());
}

TEST(DataStreamTest, UnknownStreamTypes) {
  for (int type : {0x00, 0x04, 0x06, 0x0f, 0x16, 0x17, 0x1e, 0x1f, 0x20, 0x30}) {
    DataRecorder rec;
    EXPECT_EQ(TerminationCodeOf(FeedData(B({type, 0x01, 0x02, 0x03, 0x80}), &rec, 1, false)),
              TerminationCode::kProtocolViolation)
        << type;
    EXPECT_EQ(rec.events, "");
  }
}

TEST(DataStreamTest, ObjectIdOverflow) {
  // First id 2^62-1, then delta 0 would be 2^62.
  DataRecorder rec;
  EXPECT_EQ(TerminationCodeOf(FeedData(B({0x10, 0x01, 0x02, 0x80, 0xff, 0xff, 0xff, 0xff, 0xff,
                                          0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0x00}),
                                       &rec, 1)),
            TerminationCode::kProtocolViolation);
  EXPECT_EQ(rec.objects.size(), 1u);
}

TEST(DataStreamTest, DataAfterFinAndFailedParserStaysFailed) {
  DataRecorder rec;
  DataStreamParser parser(&rec);
  ASSERT_TRUE(parser.OnIngress(S(B({0x05, 0x01})), true).ok());
  EXPECT_EQ(rec.events, "FE");
  EXPECT_TRUE(parser.OnIngress({}, true).ok());  // a repeated FIN changes nothing
  EXPECT_EQ(rec.events, "FE");
  const absl::Status status = parser.OnIngress(S(B({0x00})), false);
  EXPECT_EQ(TerminationCodeOf(status), TerminationCode::kProtocolViolation);
  EXPECT_EQ(parser.OnIngress({}, false), status);
}

TEST(DataStreamTest, VisitorErrorStops) {
  DataRecorder rec;
  rec.object_reply = absl::CancelledError("stop");
  DataStreamParser parser(&rec);
  const std::string wire = B({0x10, 0x01, 0x02, 0x80, 0x00, 0x01, 'a', 0x00, 0x01, 'b'});
  EXPECT_EQ(parser.OnIngress(S(wire), true).code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(rec.object_calls, 1);
  EXPECT_EQ(rec.events, "HO");
}

// A stream with every feature: used for truncation and chunking checks.
std::string RichSubgroupStream(std::vector<size_t>* boundaries) {
  SubgroupHeader header;
  header.track_alias = 5;
  header.group = 9;
  header.subgroup_mode = SubgroupHeader::SubgroupIdMode::kFirstObject;
  header.subgroup = 2;
  header.has_extensions = true;
  header.end_of_group = true;
  std::string wire = SerializeSubgroupHeader(header);
  boundaries->push_back(wire.size());
  auto add = [&](std::optional<uint64_t> prev, ObjectHeader o, const std::string& payload) {
    EXPECT_TRUE(SerializeSubgroupObject(header, prev, o, S(payload), &wire).ok());
    boundaries->push_back(wire.size());
  };
  add(std::nullopt, MakeObject(9, 2, 2, 0, {{0x3c, 1, ""}, {0x0b, 0, "abc"}}), "hello");
  add(2, MakeObject(9, 2, 3, 0), "");
  add(3, MakeObject(9, 2, 5, 0, {}, ObjectStatus::kDoesNotExist), "");
  add(5, MakeObject(9, 2, 6, 0, {{0x40, 300, ""}}), std::string(200, 'q'));
  add(6, MakeObject(9, 2, 7, 0, {}, ObjectStatus::kEndOfGroup), "");
  return wire;
}

std::string RichFetchStream(std::vector<size_t>* boundaries) {
  std::string wire = SerializeFetchHeader(1u << 20);
  boundaries->push_back(wire.size());
  auto add = [&](ObjectHeader o, const std::string& payload) {
    EXPECT_TRUE(SerializeFetchObject(o, S(payload), &wire).ok());
    boundaries->push_back(wire.size());
  };
  add(MakeObject(4, 1, 0, 3, {{0x0d, 0, "x"}}), "payload");
  add(MakeObject(4, 1, 1, 3, {}, ObjectStatus::kEndOfGroup), "");
  add(MakeObject(5, 0, 0, 9), std::string(100, 'r'));
  add(MakeObject(6, 0, 0, 9, {}, ObjectStatus::kEndOfTrack), "");
  return wire;
}

TEST(DataStreamTest, FetchObjectsRoundTrip) {
  std::vector<size_t> boundaries;
  const std::string wire = RichFetchStream(&boundaries);
  DataRecorder rec;
  ASSERT_TRUE(FeedData(wire, &rec, 3).ok());
  EXPECT_EQ(rec.events, "FOOOOE");
  EXPECT_EQ(rec.fetch_headers, std::vector<uint64_t>{1u << 20});
  ASSERT_EQ(rec.objects.size(), 4u);
  EXPECT_EQ(rec.objects[0].header,
            MakeObject(4, 1, 0, 3, {{0x0d, 0, "x"}}, ObjectStatus::kNormal, 7));
  EXPECT_EQ(rec.objects[0].payload, "payload");
  EXPECT_EQ(rec.objects[1].header, MakeObject(4, 1, 1, 3, {}, ObjectStatus::kEndOfGroup));
  EXPECT_EQ(rec.objects[2].payload, std::string(100, 'r'));
  EXPECT_EQ(rec.objects[3].header, MakeObject(6, 0, 0, 9, {}, ObjectStatus::kEndOfTrack));
}

TEST(DataStreamTest, FinAtEveryOffset) {
  for (bool fetch : {false, true}) {
    std::vector<size_t> boundaries;
    const std::string wire = fetch ? RichFetchStream(&boundaries) : RichSubgroupStream(&boundaries);
    const std::set<size_t> clean(boundaries.begin(), boundaries.end());
    for (size_t k = 0; k <= wire.size(); ++k) {
      DataRecorder rec;
      DataStreamParser parser(&rec);
      ASSERT_TRUE(parser.OnIngress(S(wire).first(k), false).ok()) << k;
      const absl::Status status = parser.OnIngress({}, true);
      if (clean.count(k)) {
        EXPECT_TRUE(status.ok()) << fetch << " " << k << " " << status;
        EXPECT_EQ(rec.events.back(), 'E');
      } else {
        EXPECT_EQ(TerminationCodeOf(status), TerminationCode::kProtocolViolation) << k;
        EXPECT_TRUE(rec.events.empty() || rec.events.back() != 'E');
      }
    }
  }
}

TEST(DataStreamTest, ChunkingDoesNotChangeTheObjects) {
  for (bool fetch : {false, true}) {
    std::vector<size_t> boundaries;
    const std::string wire = fetch ? RichFetchStream(&boundaries) : RichSubgroupStream(&boundaries);
    DataRecorder whole;
    ASSERT_TRUE(FeedData(wire, &whole, wire.size()).ok());
    for (size_t chunk : {size_t{1}, size_t{2}, size_t{7}, size_t{50}}) {
      DataRecorder rec;
      ASSERT_TRUE(FeedData(wire, &rec, chunk).ok());
      EXPECT_EQ(rec.events, whole.events);
      EXPECT_EQ(rec.subgroup_headers, whole.subgroup_headers);
      EXPECT_EQ(rec.objects, whole.objects);
    }
  }
}

TEST(DataStreamTest, GarbageAndMutations) {
  std::mt19937 rng(3);
  std::vector<size_t> unused;
  const std::string subgroup = RichSubgroupStream(&unused);
  const std::string fetch = RichFetchStream(&unused);
  CodecLimits limits;
  limits.max_object_payload = 1 << 16;
  for (int round = 0; round < 3000; ++round) {
    std::string bytes;
    if (round % 3 == 0) {
      bytes.resize(rng() % 64);
      for (char& c : bytes) c = static_cast<char>(rng());
      if (!bytes.empty()) bytes[0] = static_cast<char>(0x10 + rng() % 14);
    } else {
      bytes = round % 3 == 1 ? subgroup : fetch;
      for (int flips = 1 + rng() % 3; flips > 0; --flips) {
        bytes[rng() % bytes.size()] = static_cast<char>(rng());
      }
    }
    DataRecorder whole, bytewise;
    const absl::Status a = FeedData(bytes, &whole, bytes.size() + 1, true, limits);
    const absl::Status b = FeedData(bytes, &bytewise, 1, true, limits);
    EXPECT_EQ(a.ok(), b.ok()) << a << " / " << b;
    EXPECT_EQ(TerminationCodeOf(a), TerminationCodeOf(b));
    EXPECT_NE(a.code(), absl::StatusCode::kInternal) << a;
    EXPECT_EQ(whole.events, bytewise.events);
    EXPECT_EQ(whole.objects, bytewise.objects);
  }
}

// ---- datagrams ----------------------------------------------------------------------

TEST(DatagramTest, Bytes) {
  Datagram d;
  d.track_alias = 4;
  d.object = MakeObject(5, 0, 6, 0x80, {}, ObjectStatus::kNormal, 2);
  d.payload = "hi";
  const std::string type0 = B({0x00, 0x04, 0x05, 0x06, 0x80, 'h', 'i'});
  std::string out;
  ASSERT_TRUE(SerializeDatagram(d, &out).ok());
  EXPECT_EQ(out, type0);
  auto parsed = ParseDatagram(S(type0));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, d);

  // Object ID 0 leaves the field out (type 0x04).
  d.object.object = 0;
  out.clear();
  ASSERT_TRUE(SerializeDatagram(d, &out).ok());
  EXPECT_EQ(out, B({0x04, 0x04, 0x05, 0x80, 'h', 'i'}));

  // Status with extensions (type 0x21): {4, 7} and End of Group.
  Datagram status;
  status.track_alias = 4;
  status.object = MakeObject(5, 0, 6, 0x80, {{4, 7, ""}}, ObjectStatus::kEndOfGroup);
  const std::string type21 = B({0x21, 0x04, 0x05, 0x06, 0x80, 0x02, 0x04, 0x07, 0x03});
  out.clear();
  ASSERT_TRUE(SerializeDatagram(status, &out).ok());
  EXPECT_EQ(out, type21);
  parsed = ParseDatagram(S(type21));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, status);

  // End of Group + extensions + object id (type 0x03).
  parsed = ParseDatagram(S(B({0x03, 0x01, 0x02, 0x03, 0x10, 0x02, 0x06, 0x01, 'p'})));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->end_of_group);
  EXPECT_EQ(parsed->object, MakeObject(2, 0, 3, 0x10, {{6, 1, ""}}, ObjectStatus::kNormal, 1));
  EXPECT_EQ(parsed->payload, "p");
}

TEST(DatagramTest, AllTenTypesRoundTrip) {
  std::set<uint8_t> types;
  for (bool eog : {false, true}) {
    for (bool ext : {false, true}) {
      for (uint64_t id : {0, 77}) {
        for (bool with_status : {false, true}) {
          if (with_status && eog) continue;
          if (with_status && id == 0) continue;  // status types always carry the id
          Datagram d;
          d.track_alias = 1234;
          d.end_of_group = eog;
          d.object = MakeObject(99, 0, id, 3);
          if (ext) d.object.extensions = {{0x0b, 0, "ext"}};
          if (with_status) {
            d.object.status = ObjectStatus::kEndOfTrack;
          } else {
            d.payload = "payload bytes";
            d.object.payload_length = d.payload.size();
          }
          std::string out;
          ASSERT_TRUE(SerializeDatagram(d, &out).ok());
          types.insert(static_cast<uint8_t>(out[0]));
          auto parsed = ParseDatagram(S(out));
          ASSERT_TRUE(parsed.ok()) << parsed.status();
          EXPECT_EQ(*parsed, d);
          // Truncating inside the header is a violation.
          const size_t header_size = out.size() - d.payload.size();
          for (size_t k = 0; k < header_size; ++k) {
            EXPECT_EQ(TerminationCodeOf(ParseDatagram(S(out).first(k)).status()),
                      TerminationCode::kProtocolViolation)
                << k;
          }
        }
      }
    }
  }
  EXPECT_EQ(types, (std::set<uint8_t>{0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x20, 0x21}));
}

TEST(DatagramTest, Violations) {
  auto code = [](const std::string& bytes, CodecLimits limits = {}) {
    return TerminationCodeOf(ParseDatagram(S(bytes), limits).status());
  };
  for (int type : {0x08, 0x10, 0x1f, 0x22, 0x24, 0x26, 0x30}) {
    EXPECT_EQ(code(B({type, 0x01, 0x02, 0x03, 0x80})), TerminationCode::kProtocolViolation) << type;
  }
  // Extensions Present with length 0.
  EXPECT_EQ(code(B({0x01, 0x01, 0x02, 0x03, 0x80, 0x00, 'p'})), TerminationCode::kProtocolViolation);
  // Bytes after the status, unknown status, Does Not Exist with extensions.
  EXPECT_EQ(code(B({0x20, 0x01, 0x02, 0x03, 0x80, 0x03, 0x00})), TerminationCode::kProtocolViolation);
  EXPECT_EQ(code(B({0x20, 0x01, 0x02, 0x03, 0x80, 0x05})), TerminationCode::kProtocolViolation);
  EXPECT_EQ(code(B({0x21, 0x01, 0x02, 0x03, 0x80, 0x02, 0x04, 0x01, 0x01})),
            TerminationCode::kProtocolViolation);
  // Payload and extension limits.
  CodecLimits limits;
  limits.max_object_payload = 3;
  limits.max_extension_bytes = 2;
  EXPECT_TRUE(ParseDatagram(S(B({0x00, 0x01, 0x02, 0x03, 0x80, 'a', 'b', 'c'})), limits).ok());
  EXPECT_EQ(code(B({0x00, 0x01, 0x02, 0x03, 0x80, 'a', 'b', 'c', 'd'}), limits),
            TerminationCode::kProtocolViolation);
  EXPECT_EQ(code(B({0x01, 0x01, 0x02, 0x03, 0x80, 0x03, 0x04, 0x01, 0x02}), limits),
            TerminationCode::kProtocolViolation);
  // Serializer: no type holds a status and End of Group, or a status and a payload.
  Datagram d;
  d.object.status = ObjectStatus::kEndOfGroup;
  d.end_of_group = true;
  std::string out;
  EXPECT_FALSE(SerializeDatagram(d, &out).ok());
  d.end_of_group = false;
  d.payload = "x";
  EXPECT_FALSE(SerializeDatagram(d, &out).ok());
  EXPECT_TRUE(out.empty());
}

TEST(DatagramTest, Garbage) {
  std::mt19937 rng(4);
  for (int round = 0; round < 5000; ++round) {
    std::string bytes(rng() % 40, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    if (!bytes.empty() && round % 2 == 0) bytes[0] = static_cast<char>(rng() % 8);
    auto parsed = ParseDatagram(S(bytes));
    if (!parsed.ok()) continue;
    std::string out;
    ASSERT_TRUE(SerializeDatagram(*parsed, &out).ok());
    auto again = ParseDatagram(S(out));
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(*again, *parsed);
  }
}

}  // namespace
}  // namespace kvcast::moqt
