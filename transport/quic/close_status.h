// How an application close (CONNECTION_CLOSE with an application error code)
// shows up in ConnectionHandler::OnClosed, and how to get the code back.
//
//   code 0  -> OK
//   code N  -> ABORTED "application error 0xN: <reason>", with N attached as a
//              payload so protocols (MoQT) can read it with
//              ApplicationErrorCode().
//
// Thread safety: pure functions.
#ifndef KVCAST_TRANSPORT_QUIC_CLOSE_STATUS_H_
#define KVCAST_TRANSPORT_QUIC_CLOSE_STATUS_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace kvcast::quic {

absl::Status ApplicationCloseStatus(uint64_t app_error,
                                    absl::string_view reason);

// The application error code carried by a status from
// ApplicationCloseStatus, or nullopt (OK statuses and transport failures).
std::optional<uint64_t> ApplicationErrorCode(const absl::Status& status);

}  // namespace kvcast::quic

#endif  // KVCAST_TRANSPORT_QUIC_CLOSE_STATUS_H_
