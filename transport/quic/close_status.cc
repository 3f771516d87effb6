#include "transport/quic/close_status.h"

#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace kvcast::quic {
namespace {
constexpr char kAppErrorPayload[] = "type.kvcast.dev/quic.AppError";
}  // namespace

absl::Status ApplicationCloseStatus(uint64_t app_error,
                                    absl::string_view reason) {
  if (app_error == 0) return absl::OkStatus();
  absl::Status status(
      absl::StatusCode::kAborted,
      absl::StrCat("application error 0x", absl::Hex(app_error),
                   reason.empty() ? "" : ": ", reason));
  status.SetPayload(kAppErrorPayload, absl::Cord(std::to_string(app_error)));
  return status;
}

std::optional<uint64_t> ApplicationErrorCode(const absl::Status& status) {
  absl::optional<absl::Cord> payload = status.GetPayload(kAppErrorPayload);
  uint64_t code = 0;
  if (!payload.has_value() || !absl::SimpleAtoi(std::string(*payload), &code)) {
    return std::nullopt;
  }
  return code;
}

}  // namespace kvcast::quic
