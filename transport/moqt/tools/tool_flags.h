// Flag parsing shared by the MoQT binaries: "host:port" and "a/b/c".
#ifndef KVCAST_TRANSPORT_MOQT_TOOLS_TOOL_FLAGS_H_
#define KVCAST_TRANSPORT_MOQT_TOOLS_TOOL_FLAGS_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "transport/moqt/messages.h"

namespace kvcast::moqt {

// "host:port" or "[v6]:port".
absl::StatusOr<std::pair<std::string, uint16_t>> ParseHostPort(const std::string& s);
// "a/b/c" -> {"a","b","c"} (elements split at `separator`); INVALID_ARGUMENT
// for empty elements or > 32.
absl::StatusOr<TrackNamespace> ParseNamespace(const std::string& s, char separator = '/');

}  // namespace kvcast::moqt

#endif  // KVCAST_TRANSPORT_MOQT_TOOLS_TOOL_FLAGS_H_
