// Leveled logging for the services: spdlog (Debian's libspdlog-dev), one
// logger per process writing to stderr as
//   2026-11-28T07:12:00.123 warning kvcast-scheduler: req-7: decode d-1: ... retrying
// with the request id first where a message is about one request.
//
//   services::Log().warn("{}: {}; retrying", request_id, why);
//
// InitLogging (in main) puts the program's name in each line and sets the
// level from --log_level (trace, debug, info, warn, error, critical, off);
// until then, and in tests, lines say "kvcast" and the level is info.
//
// Thread safety: spdlog's _mt logger; log from any thread.
#ifndef KVCAST_SERVICES_COMMON_LOG_H_
#define KVCAST_SERVICES_COMMON_LOG_H_

#include <string>

#include "absl/status/status.h"
#include "spdlog/spdlog.h"

namespace kvcast::services {

// The process's logger.
spdlog::logger& Log();

// Names `program` in every line from now on and sets the level;
// InvalidArgument for an unknown level name. Call before other threads log.
absl::Status InitLogging(const std::string& program, const std::string& level);

}  // namespace kvcast::services

#endif  // KVCAST_SERVICES_COMMON_LOG_H_
