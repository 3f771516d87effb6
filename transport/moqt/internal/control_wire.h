// Draft-14 control message payloads (the bytes after Type (i) and
// Length (16)). Framing and buffering live in codec.cc.
//
// Thread safety: pure functions.
#ifndef KVCAST_TRANSPORT_MOQT_INTERNAL_CONTROL_WIRE_H_
#define KVCAST_TRANSPORT_MOQT_INTERNAL_CONTROL_WIRE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "transport/moqt/messages.h"

namespace kvcast::moqt::internal {

// Draft-14 message type codes.
enum ControlType : uint64_t {
  kTypeSubscribeUpdate = 0x02,
  kTypeSubscribe = 0x03,
  kTypeSubscribeOk = 0x04,
  kTypeSubscribeError = 0x05,
  kTypePublishNamespace = 0x06,
  kTypePublishNamespaceOk = 0x07,
  kTypePublishNamespaceError = 0x08,
  kTypePublishNamespaceDone = 0x09,
  kTypeUnsubscribe = 0x0a,
  kTypePublishDone = 0x0b,
  kTypePublishNamespaceCancel = 0x0c,
  kTypeTrackStatus = 0x0d,
  kTypeTrackStatusOk = 0x0e,
  kTypeTrackStatusError = 0x0f,
  kTypeGoaway = 0x10,
  kTypeSubscribeNamespace = 0x11,
  kTypeSubscribeNamespaceOk = 0x12,
  kTypeSubscribeNamespaceError = 0x13,
  kTypeUnsubscribeNamespace = 0x14,
  kTypeMaxRequestId = 0x15,
  kTypeFetch = 0x16,
  kTypeFetchCancel = 0x17,
  kTypeFetchOk = 0x18,
  kTypeFetchError = 0x19,
  kTypeRequestsBlocked = 0x1a,
  kTypePublish = 0x1d,
  kTypePublishOk = 0x1e,
  kTypePublishError = 0x1f,
  kTypeClientSetup = 0x20,
  kTypeServerSetup = 0x21,
};

// True for the message types draft-14 defines.
bool IsKnownControlType(uint64_t type);

// Appends the payload of `msg`. INVALID_ARGUMENT if a field is out of range.
absl::Status WriteControlPayload(const ControlMessage& msg, std::string* out);

// Parses the complete payload of a message of `type`, which must be consumed
// exactly. Errors carry the termination code (PROTOCOL_VIOLATION or
// KEY_VALUE_FORMATTING_ERROR).
absl::StatusOr<ControlMessage> ParseControlPayload(uint64_t type, absl::string_view payload);

}  // namespace kvcast::moqt::internal

#endif  // KVCAST_TRANSPORT_MOQT_INTERNAL_CONTROL_WIRE_H_
