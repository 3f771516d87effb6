// libFuzzer target for the MoQT draft-14 codec (transport/moqt/codec.h).
//
// Input layout:
//   byte 0  mode and flags: bits 0-1 pick the mode, bits 2-7 are flags.
//   byte 1  split seed (modes 0, 1 and 3): 0 = one OnIngress call,
//           1 = one byte per call, else pseudo-random chunks (some empty).
//   rest    the bytes under test.
//
// Modes:
//   0 control stream: ControlStreamParser fed the bytes split at fuzzer-chosen
//     points; the result must not depend on the split; every message parsed
//     must round-trip (serialize, re-parse, re-serialize to the same bytes);
//     a visitor error must stop the parser and be returned.
//   1 data stream: DataStreamParser with small CodecLimits and a visitor that
//     checks the visitor contract (fragments sum to payload_length, object ids
//     increase on subgroup streams, limits honoured, ...); split-independence
//     and a round trip of every complete object through the serializers.
//   2 datagram: ParseDatagram; what parses must round-trip.
//   3 framed control messages: the bytes are records [type selector][length]
//     [payload] that are framed with a correct Type + Length (16) before they
//     reach ControlStreamParser, so the fuzzer spends its time inside message
//     payloads; every message that parses must round-trip.
//
// Any invariant break prints what broke and calls __builtin_trap().
// With MOQT_FUZZ_EXPECT_VALID=1 in the environment every input must also
// parse without error and re-serialize to exactly its own bytes (used to
// check the hand-written, canonical seed corpus; see build_and_run.sh).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "transport/moqt/codec.h"
#include "transport/moqt/messages.h"

namespace kvcast::moqt {
namespace {

bool g_expect_valid = false;

#define FUZZ_CHECK(cond, ...)                                                  \
  do {                                                                         \
    if (!(cond)) {                                                             \
      std::fprintf(stderr, "INVARIANT BROKEN at %s:%d: %s\n  ", __FILE__,      \
                   __LINE__, #cond);                                           \
      std::fprintf(stderr, __VA_ARGS__);                                       \
      std::fprintf(stderr, "\n");                                              \
      std::fflush(stderr);                                                     \
      __builtin_trap();                                                        \
    }                                                                          \
  } while (0)

using Bytes = absl::Span<const uint8_t>;

std::string Str(const absl::Status& s) { return s.ToString(); }

std::string Hex(absl::string_view s) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

Bytes AsBytes(const std::string& s) {
  return Bytes(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

uint64_t TermCode(const absl::Status& s) {
  return static_cast<uint64_t>(TerminationCodeOf(s));
}

// Splits `data` into chunks chosen by `seed` (see the header comment).
std::vector<Bytes> Split(Bytes data, uint8_t seed) {
  std::vector<Bytes> chunks;
  if (seed == 0) {
    chunks.push_back(data);
    return chunks;
  }
  uint32_t state = 0x9e3779b9u ^ (static_cast<uint32_t>(seed) * 0x85ebca6bu);
  const size_t max_chunk = seed % 32 + 1;
  const size_t max_chunks = 4 * data.size() + 16;
  size_t pos = 0;
  while (pos < data.size()) {
    size_t n;
    if (seed == 1) {
      n = 1;
    } else {
      state ^= state << 13;
      state ^= state >> 17;
      state ^= state << 5;
      n = state % (max_chunk + 1);  // 0 .. max_chunk: empty chunks too
    }
    if (chunks.size() + 1 >= max_chunks) n = data.size() - pos;
    n = std::min(n, data.size() - pos);
    chunks.push_back(data.subspan(pos, n));
    pos += n;
  }
  if (chunks.empty()) chunks.push_back(data);
  return chunks;
}

// Minimal RFC 9000 varint reader for checking serializer output.
bool ReadVarint(absl::string_view* s, uint64_t* v) {
  if (s->empty()) return false;
  const uint8_t first = static_cast<uint8_t>((*s)[0]);
  const size_t len = size_t{1} << (first >> 6);
  if (s->size() < len) return false;
  uint64_t value = first & 0x3f;
  for (size_t i = 1; i < len; ++i) value = (value << 8) | static_cast<uint8_t>((*s)[i]);
  *v = value;
  s->remove_prefix(len);
  return true;
}

size_t VarintSize(uint64_t v) {
  if (v < (1ull << 6)) return 1;
  if (v < (1ull << 14)) return 2;
  if (v < (1ull << 30)) return 4;
  return 8;
}

// Smallest wire size of a Key-Value-Pair block (the parser may have read
// non-minimal varints, so the wire size is at least this).
uint64_t MinKvpBlockSize(const Parameters& kvps) {
  uint64_t total = 0;
  for (const KeyValuePair& kvp : kvps) {
    total += VarintSize(kvp.type);
    if (kvp.type % 2 == 0) {
      total += VarintSize(kvp.int_value);
    } else {
      total += VarintSize(kvp.bytes_value.size()) + kvp.bytes_value.size();
    }
  }
  return total;
}

void CheckKvps(const Parameters& kvps, const char* where) {
  for (const KeyValuePair& kvp : kvps) {
    if (kvp.type % 2 == 0) {
      FUZZ_CHECK(kvp.bytes_value.empty(), "%s: even KVP type 0x%llx carries bytes", where,
                 (unsigned long long)kvp.type);
    } else {
      FUZZ_CHECK(kvp.bytes_value.size() <= 65535, "%s: odd KVP type 0x%llx longer than 65535",
                 where, (unsigned long long)kvp.type);
      FUZZ_CHECK(kvp.int_value == 0, "%s: odd KVP type 0x%llx carries an int value", where,
                 (unsigned long long)kvp.type);
    }
    if (kvp.type == kParamAuthorizationToken) {
      // The Token structure: what decodes must round-trip as a value.
      absl::StatusOr<AuthToken> token = ParseAuthToken(kvp.bytes_value);
      if (token.ok()) {
        absl::StatusOr<AuthToken> again = ParseAuthToken(SerializeAuthToken(*token));
        FUZZ_CHECK(again.ok() && *again == *token, "%s: AUTHORIZATION TOKEN round trip", where);
      } else {
        FUZZ_CHECK(TerminationCodeOf(token.status()) == TerminationCode::kKeyValueFormattingError,
                   "%s: undecodable token without KEY_VALUE_FORMATTING_ERROR", where);
      }
    }
  }
}

bool ValidStatus(ObjectStatus s) {
  return s == ObjectStatus::kNormal || s == ObjectStatus::kDoesNotExist ||
         s == ObjectStatus::kEndOfGroup || s == ObjectStatus::kEndOfTrack;
}

// ---- structural equality of control messages ----------------------------------
// The round trip must give back the very message that was parsed
// (parse(serialize(m)) == m), not only the same bytes: a serializer that
// writes a wrong value would otherwise go unnoticed.

auto Tie(const ClientSetup& m) { return std::tie(m.supported_versions, m.parameters); }
auto Tie(const ServerSetup& m) { return std::tie(m.selected_version, m.parameters); }
auto Tie(const Goaway& m) { return std::tie(m.new_session_uri); }
auto Tie(const MaxRequestId& m) { return std::tie(m.request_id); }
auto Tie(const RequestsBlocked& m) { return std::tie(m.maximum_request_id); }
auto Tie(const Subscribe& m) {
  return std::tie(m.request_id, m.track, m.subscriber_priority, m.group_order, m.forward,
                  m.filter_type, m.start, m.end_group, m.parameters);
}
auto Tie(const SubscribeOk& m) {
  return std::tie(m.request_id, m.track_alias, m.expires, m.group_order, m.largest,
                  m.parameters);
}
auto Tie(const SubscribeError& m) { return std::tie(m.request_id, m.error_code, m.reason); }
auto Tie(const SubscribeUpdate& m) {
  return std::tie(m.request_id, m.subscription_request_id, m.start, m.end_group,
                  m.subscriber_priority, m.forward, m.parameters);
}
auto Tie(const Unsubscribe& m) { return std::tie(m.request_id); }
auto Tie(const PublishDone& m) {
  return std::tie(m.request_id, m.status_code, m.stream_count, m.reason);
}
auto Tie(const Publish& m) {
  return std::tie(m.request_id, m.track, m.track_alias, m.group_order, m.largest, m.forward,
                  m.parameters);
}
auto Tie(const PublishOk& m) {
  return std::tie(m.request_id, m.forward, m.subscriber_priority, m.group_order, m.filter_type,
                  m.start, m.end_group, m.parameters);
}
auto Tie(const PublishError& m) { return std::tie(m.request_id, m.error_code, m.reason); }
auto Tie(const Fetch& m) {
  return std::tie(m.request_id, m.subscriber_priority, m.group_order, m.fetch_type, m.track,
                  m.start, m.end, m.joining_request_id, m.joining_start, m.parameters);
}
auto Tie(const FetchOk& m) {
  return std::tie(m.request_id, m.group_order, m.end_of_track, m.end, m.parameters);
}
auto Tie(const FetchError& m) { return std::tie(m.request_id, m.error_code, m.reason); }
auto Tie(const FetchCancel& m) { return std::tie(m.request_id); }
auto Tie(const TrackStatus& m) { return Tie(m.request); }
auto Tie(const TrackStatusOk& m) { return Tie(m.reply); }
auto Tie(const TrackStatusError& m) { return Tie(m.reply); }
auto Tie(const PublishNamespace& m) { return std::tie(m.request_id, m.ns, m.parameters); }
auto Tie(const PublishNamespaceOk& m) { return std::tie(m.request_id); }
auto Tie(const PublishNamespaceError& m) {
  return std::tie(m.request_id, m.error_code, m.reason);
}
auto Tie(const PublishNamespaceDone& m) { return std::tie(m.ns); }
auto Tie(const PublishNamespaceCancel& m) { return std::tie(m.ns, m.error_code, m.reason); }
auto Tie(const SubscribeNamespace& m) { return std::tie(m.request_id, m.prefix, m.parameters); }
auto Tie(const SubscribeNamespaceOk& m) { return std::tie(m.request_id); }
auto Tie(const SubscribeNamespaceError& m) {
  return std::tie(m.request_id, m.error_code, m.reason);
}
auto Tie(const UnsubscribeNamespace& m) { return std::tie(m.prefix); }

bool SameMessage(const ControlMessage& a, const ControlMessage& b) {
  if (a.index() != b.index()) return false;
  return std::visit(
      [&b](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        return Tie(x) == Tie(std::get<T>(b));
      },
      a);
}

// ---- control stream -----------------------------------------------------------

class ControlRecorder : public ControlMessageVisitor {
 public:
  explicit ControlRecorder(int fail_at = -1) : fail_at_(fail_at) {}
  absl::Status OnControlMessage(ControlMessage msg) override {
    ++calls;
    FUZZ_CHECK(!stopped_, "ControlMessageVisitor called again after it returned an error");
    if (fail_at_ >= 0 && static_cast<int>(messages.size()) == fail_at_) {
      stopped_ = true;
      return absl::AbortedError("visitor stops here");
    }
    messages.push_back(std::move(msg));
    return absl::OkStatus();
  }
  std::vector<ControlMessage> messages;
  int calls = 0;

 private:
  int fail_at_;
  bool stopped_ = false;
};

struct ControlResult {
  std::vector<std::string> messages;  // re-serialized (or "!" + error)
  bool ok = true;
  uint64_t code = 0;
};

std::string SerializeOrError(const ControlMessage& msg) {
  std::string out;
  absl::Status st = SerializeControlMessage(msg, &out);
  if (!st.ok()) return std::string("!") + MessageName(msg) + ": " + Str(st);
  return out;
}

// Feeds `data` (split by `seed`) to a ControlStreamParser.
ControlResult RunControl(Bytes data, uint8_t seed, bool fin, int fail_at,
                         std::vector<ControlMessage>* messages_out) {
  ControlRecorder visitor(fail_at);
  ControlStreamParser parser(&visitor);
  absl::Status st;
  std::vector<Bytes> chunks = Split(data, seed);
  for (size_t i = 0; i < chunks.size(); ++i) {
    st = parser.OnIngress(chunks[i], fin && i + 1 == chunks.size());
    if (!st.ok()) break;
  }
  ControlResult result;
  result.ok = st.ok();
  result.code = TermCode(st);
  if (st.ok()) {
    FUZZ_CHECK(result.code == 0, "TerminationCodeOf(OK) is %llu", (unsigned long long)result.code);
    FUZZ_CHECK(!fin, "control stream FIN accepted (must be a protocol violation)");
  } else {
    FUZZ_CHECK(result.code != 0, "error status with kNoError termination code: %s",
               Str(st).c_str());
    // The parser stays failed and calls nobody.
    const int calls = visitor.calls;
    static const uint8_t kMore[] = {0x07, 0x01, 0x00, 0x00, 0x15, 0x00, 0x01, 0x00};
    absl::Status again = parser.OnIngress(Bytes(kMore, sizeof(kMore)), false);
    FUZZ_CHECK(!again.ok(), "control parser accepted input after failing with %s",
               Str(st).c_str());
    FUZZ_CHECK(visitor.calls == calls, "control parser called the visitor after failing");
  }
  if (fail_at >= 0 && visitor.calls > fail_at) {
    FUZZ_CHECK(!st.ok() && st.code() == absl::StatusCode::kAborted,
               "visitor error not returned from OnIngress (got %s)", Str(st).c_str());
  }
  if (g_expect_valid && fail_at < 0) {
    FUZZ_CHECK(st.ok() || fin, "EXPECT_VALID: control stream rejected: %s", Str(st).c_str());
  }
  for (const ControlMessage& msg : visitor.messages) {
    result.messages.push_back(SerializeOrError(msg));
  }
  if (messages_out != nullptr) *messages_out = std::move(visitor.messages);
  return result;
}

// serialize -> parse must give the same message, and serialize -> parse ->
// serialize the same bytes. Returns the serialized message.
std::string RoundTripControl(const ControlMessage& msg) {
  std::string s1;
  absl::Status st = SerializeControlMessage(msg, &s1);
  FUZZ_CHECK(st.ok(), "parsed %s does not re-serialize: %s", MessageName(msg), Str(st).c_str());

  // Framing: Type (i) = MessageType(msg), Length (16) = rest.
  absl::string_view rest(s1);
  uint64_t type = 0;
  FUZZ_CHECK(ReadVarint(&rest, &type) && rest.size() >= 2, "serialized %s too short: %s",
             MessageName(msg), Hex(s1).c_str());
  FUZZ_CHECK(type == MessageType(msg), "%s serialized with type 0x%llx, MessageType 0x%llx",
             MessageName(msg), (unsigned long long)type,
             (unsigned long long)MessageType(msg));
  const size_t length = (static_cast<uint8_t>(rest[0]) << 8) | static_cast<uint8_t>(rest[1]);
  FUZZ_CHECK(length == rest.size() - 2, "%s: Length field %zu but payload is %zu bytes",
             MessageName(msg), length, rest.size() - 2);

  // Serialize appends.
  std::string appended = "\xAA";
  st = SerializeControlMessage(msg, &appended);
  FUZZ_CHECK(st.ok() && appended == "\xAA" + s1, "SerializeControlMessage does not append");

  ControlRecorder visitor;
  ControlStreamParser parser(&visitor);
  st = parser.OnIngress(AsBytes(s1), false);
  FUZZ_CHECK(st.ok(), "re-parse of serialized %s failed: %s\n  bytes %s", MessageName(msg),
             Str(st).c_str(), Hex(s1).c_str());
  FUZZ_CHECK(visitor.messages.size() == 1, "re-parse of %s gave %zu messages", MessageName(msg),
             visitor.messages.size());
  const ControlMessage& again = visitor.messages[0];
  FUZZ_CHECK(again.index() == msg.index(), "%s re-parsed as %s", MessageName(msg),
             MessageName(again));
  FUZZ_CHECK(SameMessage(msg, again),
             "%s changed in the round trip (serialize then parse); bytes %s", MessageName(msg),
             Hex(s1).c_str());
  std::string s2;
  st = SerializeControlMessage(again, &s2);
  FUZZ_CHECK(st.ok(), "re-parsed %s does not serialize: %s", MessageName(again),
             Str(st).c_str());
  FUZZ_CHECK(s1 == s2, "%s round trip differs:\n  first  %s\n  second %s", MessageName(msg),
             Hex(s1).c_str(), Hex(s2).c_str());
  return s1;
}

// Seeds are canonical draft-14 encodings (minimal varints): with
// MOQT_FUZZ_EXPECT_VALID the codec must write back exactly the input.
void CheckCanonical(absl::string_view what, absl::string_view input, absl::string_view output) {
  FUZZ_CHECK(!g_expect_valid || input == output,
             "EXPECT_VALID: %.*s re-serialized differently:\n  input  %s\n  output %s",
             static_cast<int>(what.size()), what.data(), Hex(input).c_str(),
             Hex(output).c_str());
}

absl::string_view AsView(Bytes b) {
  return absl::string_view(reinterpret_cast<const char*>(b.data()), b.size());
}

void FuzzControl(uint8_t flags, uint8_t seed, Bytes data) {
  const bool fin = flags & 1;
  std::vector<ControlMessage> messages;
  ControlResult whole = RunControl(data, 0, fin, -1, &messages);
  std::string reserialized;
  for (const ControlMessage& msg : messages) reserialized += RoundTripControl(msg);
  CheckCanonical("control stream", AsView(data), reserialized);
  if (seed != 0) {
    ControlResult split = RunControl(data, seed, fin, -1, nullptr);
    FUZZ_CHECK(split.ok == whole.ok && split.code == whole.code &&
                   split.messages == whole.messages,
               "result depends on how the input is split (seed %u): whole ok=%d code=%llu "
               "msgs=%zu, split ok=%d code=%llu msgs=%zu",
               seed, whole.ok, (unsigned long long)whole.code, whole.messages.size(), split.ok,
               (unsigned long long)split.code, split.messages.size());
  }
  // A visitor error stops the parser at message `fail_at`.
  const int fail_at = (flags >> 1) & 7;
  ControlResult stopped = RunControl(data, seed, false, fail_at, nullptr);
  if (static_cast<int>(whole.messages.size()) <= fail_at) {
    FUZZ_CHECK(stopped.messages == whole.messages,
               "messages differ with a visitor that never fails");
  } else {
    FUZZ_CHECK(stopped.messages.size() == static_cast<size_t>(fail_at),
               "parser went on after the visitor failed");
  }
}

// Mode 3: records [selector][length][payload], framed correctly.
void FuzzFramedControl(Bytes data) {
  static const uint64_t kTypes[] = {
      0x20, 0x21, 0x10, 0x15, 0x1a, 0x03, 0x04, 0x05, 0x02, 0x0a, 0x0b, 0x1d, 0x1e, 0x1f, 0x16,
      0x18, 0x19, 0x17, 0x0d, 0x0e, 0x0f, 0x06, 0x07, 0x08, 0x09, 0x0c, 0x11, 0x12, 0x13, 0x14};
  constexpr size_t kNumTypes = sizeof(kTypes) / sizeof(kTypes[0]);
  std::string stream;
  size_t pos = 0;
  while (pos + 2 <= data.size()) {
    const uint8_t sel = data[pos];
    size_t len = data[pos + 1];
    pos += 2;
    if (len == 255 || len > data.size() - pos) len = data.size() - pos;
    uint64_t type = sel < 2 * kNumTypes ? kTypes[sel % kNumTypes] : sel;  // some unknown types
    // Type as a minimal varint.
    if (type < 64) {
      stream.push_back(static_cast<char>(type));
    } else {
      stream.push_back(static_cast<char>(0x40 | (type >> 8)));
      stream.push_back(static_cast<char>(type & 0xff));
    }
    stream.push_back(static_cast<char>(len >> 8));
    stream.push_back(static_cast<char>(len & 0xff));
    stream.append(reinterpret_cast<const char*>(data.data() + pos), len);
    pos += len;
  }
  std::vector<ControlMessage> messages;
  RunControl(AsBytes(stream), 0, false, -1, &messages);
  std::string reserialized;
  for (const ControlMessage& msg : messages) reserialized += RoundTripControl(msg);
  CheckCanonical("framed control messages", stream, reserialized);
}

// ---- data streams ---------------------------------------------------------------

struct RecordedObject {
  ObjectHeader header;
  std::string payload;
  bool complete = false;
};

bool SameObjectHeader(const ObjectHeader& a, const ObjectHeader& b) {
  return a.group == b.group && a.subgroup == b.subgroup && a.object == b.object &&
         a.publisher_priority == b.publisher_priority && a.extensions == b.extensions &&
         a.status == b.status && a.payload_length == b.payload_length;
}

std::string DescribeHeader(const ObjectHeader& h) {
  char buf[200];
  std::snprintf(buf, sizeof(buf), "g=%llu sg=%llu o=%llu prio=%u ext=%zu status=%llu len=%llu",
                (unsigned long long)h.group, (unsigned long long)h.subgroup,
                (unsigned long long)h.object, h.publisher_priority, h.extensions.size(),
                (unsigned long long)h.status, (unsigned long long)h.payload_length);
  return buf;
}

// Used inside DataRecorder: counts the call, returns the planned visitor error.
#define RETURN_IF_STOP()                    \
  do {                                      \
    absl::Status stop_ = Stop();            \
    if (!stop_.ok()) return stop_;          \
  } while (0)

class DataRecorder : public DataStreamVisitor {
 public:
  DataRecorder(const CodecLimits& limits, int fail_at) : limits_(limits), fail_at_(fail_at) {}

  absl::Status OnSubgroupHeader(const SubgroupHeader& header) override {
    RETURN_IF_STOP();
    FUZZ_CHECK(!have_header, "second stream header");
    FUZZ_CHECK(objects.empty() && !ended, "stream header after objects or end");
    FUZZ_CHECK(header.subgroup_mode != SubgroupHeader::SubgroupIdMode::kZero ||
                   header.subgroup == 0,
               "subgroup mode kZero with subgroup %llu", (unsigned long long)header.subgroup);
    have_header = true;
    subgroup = header;
    return absl::OkStatus();
  }

  absl::Status OnFetchHeader(uint64_t request_id) override {
    RETURN_IF_STOP();
    FUZZ_CHECK(!have_header, "second stream header");
    FUZZ_CHECK(objects.empty() && !ended, "stream header after objects or end");
    have_header = true;
    is_fetch = true;
    fetch_request_id = request_id;
    return absl::OkStatus();
  }

  absl::Status OnObject(const ObjectHeader& h, absl::Span<const uint8_t> fragment,
                        bool last) override {
    RETURN_IF_STOP();
    FUZZ_CHECK(have_header, "OnObject before the stream header");
    FUZZ_CHECK(!ended, "OnObject after OnStreamEnd");
    if (in_object_) {
      FUZZ_CHECK(SameObjectHeader(h, objects.back().header),
                 "object header changed between fragments: %s then %s",
                 DescribeHeader(objects.back().header).c_str(), DescribeHeader(h).c_str());
    } else {
      CheckNewObject(h, fragment, last);
      objects.push_back(RecordedObject{h, "", false});
      in_object_ = true;
    }
    RecordedObject& obj = objects.back();
    FUZZ_CHECK(fragment.size() <= h.payload_length - obj.payload.size(),
               "fragments exceed payload_length %llu (have %zu, got %zu more)",
               (unsigned long long)h.payload_length, obj.payload.size(), fragment.size());
    obj.payload.append(reinterpret_cast<const char*>(fragment.data()), fragment.size());
    FUZZ_CHECK(last == (obj.payload.size() == h.payload_length),
               "last=%d but %zu of %llu payload bytes delivered", last, obj.payload.size(),
               (unsigned long long)h.payload_length);
    if (last) {
      obj.complete = true;
      in_object_ = false;
    }
    return absl::OkStatus();
  }

  absl::Status OnStreamEnd() override {
    RETURN_IF_STOP();
    FUZZ_CHECK(!in_object_, "OnStreamEnd inside an object (%s, %zu bytes delivered)",
               DescribeHeader(objects.back().header).c_str(), objects.back().payload.size());
    FUZZ_CHECK(!ended, "OnStreamEnd twice");
    ended = true;
    return absl::OkStatus();
  }

  // A canonical description of what was parsed, independent of how the
  // payload was fragmented.
  std::string Canonical() const {
    std::string out;
    char buf[200];
    if (have_header) {
      if (is_fetch) {
        std::snprintf(buf, sizeof(buf), "F%llu;", (unsigned long long)fetch_request_id);
      } else {
        std::snprintf(buf, sizeof(buf), "S%llu,%llu,%d,%llu,%u,%d,%d;",
                      (unsigned long long)subgroup.track_alias,
                      (unsigned long long)subgroup.group,
                      static_cast<int>(subgroup.subgroup_mode),
                      (unsigned long long)subgroup.subgroup, subgroup.publisher_priority,
                      subgroup.has_extensions, subgroup.end_of_group);
      }
      out += buf;
    }
    for (size_t i = 0; i < objects.size(); ++i) {
      const RecordedObject& o = objects[i];
      // An incomplete last object with no payload yet may or may not have
      // been reported depending on chunk boundaries.
      if (i + 1 == objects.size() && !o.complete && o.payload.empty()) break;
      out += DescribeHeader(o.header);
      for (const KeyValuePair& kvp : o.header.extensions) {
        std::snprintf(buf, sizeof(buf), "[%llu:%llu:", (unsigned long long)kvp.type,
                      (unsigned long long)kvp.int_value);
        out += buf;
        out += Hex(kvp.bytes_value) + "]";
      }
      out += o.complete ? " C:" : " P:";
      out += Hex(o.payload) + ";";
    }
    if (ended) out += "END";
    return out;
  }

  bool have_header = false;
  bool is_fetch = false;
  SubgroupHeader subgroup;
  uint64_t fetch_request_id = 0;
  std::vector<RecordedObject> objects;
  bool ended = false;
  int calls = 0;

 private:
  // Counts calls; returns the visitor error at call `fail_at_`.
  absl::Status Stop() {
    FUZZ_CHECK(!stopped_, "DataStreamVisitor called again after it returned an error");
    if (fail_at_ >= 0 && calls == fail_at_) {
      stopped_ = true;
      ++calls;
      return absl::AbortedError("visitor stops here");
    }
    ++calls;
    return absl::OkStatus();
  }

  void CheckNewObject(const ObjectHeader& h, absl::Span<const uint8_t> fragment, bool last) {
    const std::string d = DescribeHeader(h);
    FUZZ_CHECK(ValidStatus(h.status), "unknown object status accepted: %s", d.c_str());
    if (h.status != ObjectStatus::kNormal) {
      FUZZ_CHECK(h.payload_length == 0 && fragment.empty() && last,
                 "status object with payload: %s", d.c_str());
    }
    FUZZ_CHECK(!(h.status == ObjectStatus::kDoesNotExist && !h.extensions.empty()),
               "Object Does Not Exist with extension headers accepted "
               "(draft-14: MUST close with PROTOCOL_VIOLATION): %s",
               d.c_str());
    FUZZ_CHECK(h.payload_length <= limits_.max_object_payload,
               "payload_length above max_object_payload %llu: %s",
               (unsigned long long)limits_.max_object_payload, d.c_str());
    FUZZ_CHECK(MinKvpBlockSize(h.extensions) <= limits_.max_extension_bytes,
               "extensions above max_extension_bytes %llu: %s",
               (unsigned long long)limits_.max_extension_bytes, d.c_str());
    CheckKvps(h.extensions, "object extension");
    if (is_fetch) return;
    FUZZ_CHECK(h.group == subgroup.group, "object group differs from the subgroup header: %s",
               d.c_str());
    FUZZ_CHECK(h.publisher_priority == subgroup.publisher_priority,
               "object priority differs from the subgroup header: %s", d.c_str());
    FUZZ_CHECK(subgroup.has_extensions || h.extensions.empty(),
               "extensions on a subgroup stream without extensions: %s", d.c_str());
    if (previous_object_) {
      FUZZ_CHECK(h.object > *previous_object_, "object id %llu after %llu on a subgroup stream",
                 (unsigned long long)h.object, (unsigned long long)*previous_object_);
    }
    previous_object_ = h.object;
    switch (subgroup.subgroup_mode) {
      case SubgroupHeader::SubgroupIdMode::kZero:
        FUZZ_CHECK(h.subgroup == 0, "subgroup %llu on a zero-subgroup stream",
                   (unsigned long long)h.subgroup);
        break;
      case SubgroupHeader::SubgroupIdMode::kExplicit:
        FUZZ_CHECK(h.subgroup == subgroup.subgroup, "subgroup %llu, header says %llu",
                   (unsigned long long)h.subgroup, (unsigned long long)subgroup.subgroup);
        break;
      case SubgroupHeader::SubgroupIdMode::kFirstObject:
        if (!first_subgroup_) {
          FUZZ_CHECK(h.subgroup == h.object,
                     "first-object subgroup mode: subgroup %llu != first object id %llu",
                     (unsigned long long)h.subgroup, (unsigned long long)h.object);
          first_subgroup_ = h.subgroup;
        } else {
          FUZZ_CHECK(h.subgroup == *first_subgroup_, "subgroup changed from %llu to %llu",
                     (unsigned long long)*first_subgroup_, (unsigned long long)h.subgroup);
        }
        break;
    }
  }
#undef RETURN_IF_STOP

  CodecLimits limits_;
  int fail_at_;
  bool stopped_ = false;
  bool in_object_ = false;
  std::optional<uint64_t> previous_object_;
  std::optional<uint64_t> first_subgroup_;
};

struct DataResult {
  std::string canonical;
  bool ok = true;
  uint64_t code = 0;
};

DataResult RunData(Bytes data, uint8_t seed, bool fin, const CodecLimits& limits, int fail_at,
                   DataRecorder* visitor) {
  DataStreamParser parser(visitor, limits);
  absl::Status st;
  std::vector<Bytes> chunks = Split(data, seed);
  for (size_t i = 0; i < chunks.size(); ++i) {
    st = parser.OnIngress(chunks[i], fin && i + 1 == chunks.size());
    if (!st.ok()) break;
  }
  DataResult result;
  result.ok = st.ok();
  result.code = TermCode(st);
  if (st.ok()) {
    FUZZ_CHECK(result.code == 0, "TerminationCodeOf(OK) is %llu",
               (unsigned long long)result.code);
    FUZZ_CHECK(visitor->ended == fin, "OnIngress OK with fin=%d but OnStreamEnd called=%d", fin,
               visitor->ended);
  } else {
    FUZZ_CHECK(result.code != 0, "error status with kNoError termination code: %s",
               Str(st).c_str());
    const int calls = visitor->calls;
    static const uint8_t kMore[] = {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
    absl::Status again = parser.OnIngress(Bytes(kMore, sizeof(kMore)), true);
    FUZZ_CHECK(!again.ok(), "data parser accepted input after failing with %s", Str(st).c_str());
    FUZZ_CHECK(visitor->calls == calls, "data parser called the visitor after failing");
  }
  if (fail_at >= 0 && visitor->calls > fail_at) {
    FUZZ_CHECK(!st.ok() && st.code() == absl::StatusCode::kAborted,
               "visitor error not returned from OnIngress (got %s)", Str(st).c_str());
  }
  if (g_expect_valid && fail_at < 0) {
    FUZZ_CHECK(st.ok(), "EXPECT_VALID: data stream rejected: %s", Str(st).c_str());
  }
  result.canonical = visitor->Canonical();
  return result;
}

// Re-serializes the complete objects of `parsed` and parses them again.
// Returns the serialized stream.
std::string RoundTripData(const DataRecorder& parsed, const CodecLimits& limits) {
  if (!parsed.have_header) return "";
  std::string wire;
  absl::Status st;
  SubgroupHeader header = parsed.subgroup;
  size_t complete = 0;
  for (const RecordedObject& o : parsed.objects) complete += o.complete;
  if (parsed.is_fetch) {
    wire = SerializeFetchHeader(parsed.fetch_request_id);
  } else {
    if (header.subgroup_mode == SubgroupHeader::SubgroupIdMode::kFirstObject && complete > 0) {
      header.subgroup = parsed.objects[0].header.subgroup;
    }
    wire = SerializeSubgroupHeader(header);
  }
  std::optional<uint64_t> previous;
  for (const RecordedObject& o : parsed.objects) {
    if (!o.complete) break;
    Bytes payload = AsBytes(o.payload);
    st = parsed.is_fetch ? SerializeFetchObject(o.header, payload, &wire)
                         : SerializeSubgroupObject(header, previous, o.header, payload, &wire);
    FUZZ_CHECK(st.ok(), "parsed object does not re-serialize: %s: %s",
               DescribeHeader(o.header).c_str(), Str(st).c_str());
    previous = o.header.object;
  }
  DataRecorder again(limits, -1);
  DataStreamParser parser(&again, limits);
  st = parser.OnIngress(AsBytes(wire), true);
  FUZZ_CHECK(st.ok(), "re-parse of re-serialized stream failed: %s\n  bytes %s", Str(st).c_str(),
             Hex(wire).c_str());
  FUZZ_CHECK(again.ended, "re-parse did not end the stream");
  FUZZ_CHECK(again.objects.size() == complete, "re-parse gave %zu objects, expected %zu",
             again.objects.size(), complete);
  FUZZ_CHECK(again.is_fetch == parsed.is_fetch, "stream kind changed in the round trip");
  if (parsed.is_fetch) {
    FUZZ_CHECK(again.fetch_request_id == parsed.fetch_request_id, "fetch request id changed");
  } else {
    const SubgroupHeader& a = parsed.subgroup;
    const SubgroupHeader& b = again.subgroup;
    FUZZ_CHECK(a.track_alias == b.track_alias && a.group == b.group &&
                   a.subgroup_mode == b.subgroup_mode &&
                   a.publisher_priority == b.publisher_priority &&
                   a.has_extensions == b.has_extensions && a.end_of_group == b.end_of_group &&
                   (a.subgroup_mode != SubgroupHeader::SubgroupIdMode::kExplicit ||
                    a.subgroup == b.subgroup),
               "subgroup header changed in the round trip; bytes %s", Hex(wire).c_str());
  }
  for (size_t i = 0; i < complete; ++i) {
    FUZZ_CHECK(SameObjectHeader(parsed.objects[i].header, again.objects[i].header) &&
                   parsed.objects[i].payload == again.objects[i].payload,
               "object %zu changed in the round trip: %s -> %s", i,
               DescribeHeader(parsed.objects[i].header).c_str(),
               DescribeHeader(again.objects[i].header).c_str());
  }
  return wire;
}

CodecLimits SmallLimits(uint8_t flags) {
  static const uint64_t kPayload[] = {1ull << 20, 1ull << 20, 1024, 16};
  static const uint64_t kExt[] = {4096, 256, 16, 1};
  CodecLimits limits;
  limits.max_object_payload = kPayload[(flags >> 1) & 3];
  limits.max_extension_bytes = kExt[(flags >> 3) & 3];
  return limits;
}

void FuzzData(uint8_t flags, uint8_t seed, Bytes data) {
  const bool fin = flags & 1;
  const CodecLimits limits = SmallLimits(flags);
  DataRecorder whole_visitor(limits, -1);
  DataResult whole = RunData(data, 0, fin, limits, -1, &whole_visitor);
  CheckCanonical("data stream", AsView(data), RoundTripData(whole_visitor, limits));
  if (seed != 0) {
    DataRecorder split_visitor(limits, -1);
    DataResult split = RunData(data, seed, fin, limits, -1, &split_visitor);
    FUZZ_CHECK(split.ok == whole.ok && split.code == whole.code &&
                   split.canonical == whole.canonical,
               "result depends on how the input is split (seed %u):\n  whole ok=%d code=%llu "
               "%s\n  split ok=%d code=%llu %s",
               seed, whole.ok, (unsigned long long)whole.code, whole.canonical.c_str(), split.ok,
               (unsigned long long)split.code, split.canonical.c_str());
  }
  const int fail_at = (seed >> 3) & 7;
  DataRecorder stopping(limits, fail_at);
  RunData(data, seed, fin, limits, fail_at, &stopping);
}

// ---- datagrams ------------------------------------------------------------------

bool SameDatagram(const Datagram& a, const Datagram& b) {
  return a.track_alias == b.track_alias && a.object.group == b.object.group &&
         a.object.object == b.object.object &&
         a.object.publisher_priority == b.object.publisher_priority &&
         a.object.extensions == b.object.extensions && a.object.status == b.object.status &&
         a.end_of_group == b.end_of_group && a.payload == b.payload;
}

void FuzzDatagram(uint8_t flags, Bytes data) {
  const CodecLimits limits = SmallLimits(flags);
  absl::StatusOr<Datagram> parsed = ParseDatagram(data, limits);
  if (!parsed.ok()) {
    FUZZ_CHECK(TermCode(parsed.status()) != 0, "datagram error with kNoError code: %s",
               Str(parsed.status()).c_str());
    FUZZ_CHECK(!g_expect_valid, "EXPECT_VALID: datagram rejected: %s",
               Str(parsed.status()).c_str());
    return;
  }
  const Datagram& d = *parsed;
  const std::string desc = DescribeHeader(d.object);
  FUZZ_CHECK(d.object.subgroup == 0, "datagram with subgroup: %s", desc.c_str());
  FUZZ_CHECK(ValidStatus(d.object.status), "unknown datagram status accepted: %s", desc.c_str());
  FUZZ_CHECK(d.object.status == ObjectStatus::kNormal || d.payload.empty(),
             "status datagram with payload: %s", desc.c_str());
  FUZZ_CHECK(!(d.object.status == ObjectStatus::kDoesNotExist && !d.object.extensions.empty()),
             "Object Does Not Exist datagram with extension headers accepted: %s", desc.c_str());
  FUZZ_CHECK(d.payload.size() <= limits.max_object_payload,
             "datagram payload above max_object_payload: %s", desc.c_str());
  FUZZ_CHECK(MinKvpBlockSize(d.object.extensions) <= limits.max_extension_bytes,
             "datagram extensions above max_extension_bytes: %s", desc.c_str());
  CheckKvps(d.object.extensions, "datagram extension");

  std::string s1;
  absl::Status st = SerializeDatagram(d, &s1);
  FUZZ_CHECK(st.ok(), "parsed datagram does not re-serialize: %s: %s", desc.c_str(),
             Str(st).c_str());
  absl::StatusOr<Datagram> again = ParseDatagram(AsBytes(s1), limits);
  FUZZ_CHECK(again.ok(), "re-parse of serialized datagram failed: %s\n  bytes %s",
             Str(again.status()).c_str(), Hex(s1).c_str());
  FUZZ_CHECK(SameDatagram(d, *again), "datagram changed in the round trip: %s -> %s",
             desc.c_str(), DescribeHeader(again->object).c_str());
  std::string s2;
  st = SerializeDatagram(*again, &s2);
  FUZZ_CHECK(st.ok() && s1 == s2, "datagram round trip bytes differ:\n  %s\n  %s",
             Hex(s1).c_str(), Hex(s2).c_str());
  CheckCanonical("datagram", AsView(data), s1);
}

}  // namespace
}  // namespace kvcast::moqt

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  using namespace kvcast::moqt;
  const char* expect = std::getenv("MOQT_FUZZ_EXPECT_VALID");
  g_expect_valid = expect != nullptr && expect[0] == '1';
  // TerminationCodeOf / ProtocolError contract from codec.h.
  FUZZ_CHECK(TerminationCodeOf(absl::OkStatus()) == TerminationCode::kNoError,
             "TerminationCodeOf(OK)");
  FUZZ_CHECK(TerminationCodeOf(absl::InternalError("x")) == TerminationCode::kProtocolViolation,
             "TerminationCodeOf(foreign error) must be kProtocolViolation");
  for (uint64_t c = 1; c <= 0x1a; ++c) {
    const TerminationCode code = static_cast<TerminationCode>(c);
    absl::Status s = ProtocolError(code, "fuzz");
    FUZZ_CHECK(!s.ok() && TerminationCodeOf(s) == code, "ProtocolError(%llu) round trip",
               (unsigned long long)c);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvcast::moqt;
  if (size < 1) return 0;
  const uint8_t mode = data[0] & 3;
  const uint8_t flags = data[0] >> 2;
  if (mode == 2) {
    FuzzDatagram(flags, Bytes(data + 1, size - 1));
    return 0;
  }
  if (size < 2) return 0;
  const uint8_t seed = data[1];
  const Bytes rest(data + 2, size - 2);
  switch (mode) {
    case 0:
      FuzzControl(flags, seed, rest);
      break;
    case 1:
      FuzzData(flags, seed, rest);
      break;
    case 3:
      FuzzFramedControl(rest);
      break;
  }
  return 0;
}
