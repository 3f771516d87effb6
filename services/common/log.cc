#include "services/common/log.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "spdlog/sinks/stdout_sinks.h"  // also the stderr sinks

namespace kvcast::services {
namespace {

std::string Pattern(const std::string& program) {
  return absl::StrCat("%Y-%m-%dT%H:%M:%S.%e %l ", program, ": %v");
}

}  // namespace

spdlog::logger& Log() {
  // One logger for the process's life (never destroyed: threads may log
  // while it exits); InitLogging changes its pattern and level in place.
  static spdlog::logger* const logger = [] {
    auto* l = new spdlog::logger("kvcast", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    l->set_pattern(Pattern("kvcast"));
    l->set_level(spdlog::level::info);
    l->flush_on(spdlog::level::trace);  // every line at once: logs are read live
    return l;
  }();
  return *logger;
}

absl::Status InitLogging(const std::string& program, const std::string& level) {
  const spdlog::level::level_enum l = spdlog::level::from_str(level);
  if (l == spdlog::level::off && level != "off") {
    return absl::InvalidArgumentError(
        absl::StrCat("--log_level=", level,
                     ": expected trace, debug, info, warn, error, critical or off"));
  }
  Log().set_pattern(Pattern(program));
  Log().set_level(l);
  return absl::OkStatus();
}

}  // namespace kvcast::services
