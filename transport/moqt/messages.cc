#include "transport/moqt/messages.h"

#include <cstdio>
#include <type_traits>

namespace kvcast::moqt {
namespace {

// Appends `bytes`, writing \xNN for non-printable bytes, the backslash, and
// any byte of `reserved` (the separators of the printed form).
void AppendEscaped(const std::string& bytes, const char* reserved, std::string* out) {
  for (unsigned char c : bytes) {
    bool escape = c < 0x20 || c > 0x7e || c == '\\';
    for (const char* r = reserved; *r != '\0' && !escape; ++r) escape = c == *r;
    if (!escape) {
      out->push_back(static_cast<char>(c));
      continue;
    }
    char hex[5];
    std::snprintf(hex, sizeof(hex), "\\x%02x", c);
    out->append(hex);
  }
}

// Draft-14 type code and name per alternative of ControlMessage.
struct MessageInfo {
  uint64_t type;
  const char* name;
};

template <typename T>
constexpr MessageInfo InfoOf() {
  if constexpr (std::is_same_v<T, ClientSetup>) return {0x20, "CLIENT_SETUP"};
  else if constexpr (std::is_same_v<T, ServerSetup>) return {0x21, "SERVER_SETUP"};
  else if constexpr (std::is_same_v<T, Goaway>) return {0x10, "GOAWAY"};
  else if constexpr (std::is_same_v<T, MaxRequestId>) return {0x15, "MAX_REQUEST_ID"};
  else if constexpr (std::is_same_v<T, RequestsBlocked>) return {0x1a, "REQUESTS_BLOCKED"};
  else if constexpr (std::is_same_v<T, Subscribe>) return {0x03, "SUBSCRIBE"};
  else if constexpr (std::is_same_v<T, SubscribeOk>) return {0x04, "SUBSCRIBE_OK"};
  else if constexpr (std::is_same_v<T, SubscribeError>) return {0x05, "SUBSCRIBE_ERROR"};
  else if constexpr (std::is_same_v<T, SubscribeUpdate>) return {0x02, "SUBSCRIBE_UPDATE"};
  else if constexpr (std::is_same_v<T, Unsubscribe>) return {0x0a, "UNSUBSCRIBE"};
  else if constexpr (std::is_same_v<T, PublishDone>) return {0x0b, "PUBLISH_DONE"};
  else if constexpr (std::is_same_v<T, Publish>) return {0x1d, "PUBLISH"};
  else if constexpr (std::is_same_v<T, PublishOk>) return {0x1e, "PUBLISH_OK"};
  else if constexpr (std::is_same_v<T, PublishError>) return {0x1f, "PUBLISH_ERROR"};
  else if constexpr (std::is_same_v<T, Fetch>) return {0x16, "FETCH"};
  else if constexpr (std::is_same_v<T, FetchOk>) return {0x18, "FETCH_OK"};
  else if constexpr (std::is_same_v<T, FetchError>) return {0x19, "FETCH_ERROR"};
  else if constexpr (std::is_same_v<T, FetchCancel>) return {0x17, "FETCH_CANCEL"};
  else if constexpr (std::is_same_v<T, TrackStatus>) return {0x0d, "TRACK_STATUS"};
  else if constexpr (std::is_same_v<T, TrackStatusOk>) return {0x0e, "TRACK_STATUS_OK"};
  else if constexpr (std::is_same_v<T, TrackStatusError>) return {0x0f, "TRACK_STATUS_ERROR"};
  else if constexpr (std::is_same_v<T, PublishNamespace>) return {0x06, "PUBLISH_NAMESPACE"};
  else if constexpr (std::is_same_v<T, PublishNamespaceOk>) return {0x07, "PUBLISH_NAMESPACE_OK"};
  else if constexpr (std::is_same_v<T, PublishNamespaceError>) {
    return {0x08, "PUBLISH_NAMESPACE_ERROR"};
  } else if constexpr (std::is_same_v<T, PublishNamespaceDone>) {
    return {0x09, "PUBLISH_NAMESPACE_DONE"};
  } else if constexpr (std::is_same_v<T, PublishNamespaceCancel>) {
    return {0x0c, "PUBLISH_NAMESPACE_CANCEL"};
  } else if constexpr (std::is_same_v<T, SubscribeNamespace>) {
    return {0x11, "SUBSCRIBE_NAMESPACE"};
  } else if constexpr (std::is_same_v<T, SubscribeNamespaceOk>) {
    return {0x12, "SUBSCRIBE_NAMESPACE_OK"};
  } else if constexpr (std::is_same_v<T, SubscribeNamespaceError>) {
    return {0x13, "SUBSCRIBE_NAMESPACE_ERROR"};
  } else {
    static_assert(std::is_same_v<T, UnsubscribeNamespace>, "ControlMessage alternative missing");
    return {0x14, "UNSUBSCRIBE_NAMESPACE"};
  }
}

MessageInfo InfoOf(const ControlMessage& msg) {
  return std::visit([](const auto& m) { return InfoOf<std::decay_t<decltype(m)>>(); }, msg);
}

}  // namespace

bool IsNamespacePrefix(const TrackNamespace& prefix, const TrackNamespace& ns) {
  if (prefix.size() > ns.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (prefix[i] != ns[i]) return false;
  }
  return true;
}

std::string ToString(const TrackNamespace& ns) {
  std::string out;
  for (size_t i = 0; i < ns.size(); ++i) {
    if (i > 0) out.push_back('/');
    AppendEscaped(ns[i], "/:", &out);
  }
  return out;
}

std::string ToString(const FullTrackName& name) {
  std::string out = ToString(name.ns);
  out.push_back(':');
  AppendEscaped(name.name, "", &out);
  return out;
}

std::optional<uint64_t> FindIntParameter(const Parameters& params, uint64_t type) {
  if (type % 2 != 0) return std::nullopt;  // odd types carry bytes
  for (const KeyValuePair& kvp : params) {
    if (kvp.type == type) return kvp.int_value;
  }
  return std::nullopt;
}

uint64_t MessageType(const ControlMessage& msg) { return InfoOf(msg).type; }

const char* MessageName(const ControlMessage& msg) { return InfoOf(msg).name; }

}  // namespace kvcast::moqt
