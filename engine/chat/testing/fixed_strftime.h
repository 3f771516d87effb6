// A strftime_now for tests and golden comparisons: formats one fixed
// moment as a naive datetime (jinja2's side uses the same, see
// tools/golden/chat_template_golden.py; transformers passes a naive one).
#ifndef KVCAST_ENGINE_CHAT_TESTING_FIXED_STRFTIME_H_
#define KVCAST_ENGINE_CHAT_TESTING_FIXED_STRFTIME_H_

#include <ctime>
#include <string>

#include "absl/status/status.h"
#include "engine/chat/internal/text.h"
#include "engine/chat/jinja.h"

namespace kvcast {

inline JinjaFunction FixedStrftimeNow(int year, int month, int day, int hour, int minute, int second) {
  return [=](const nlohmann::ordered_json& args,
             const nlohmann::ordered_json&) -> absl::StatusOr<nlohmann::ordered_json> {
    if (args.size() != 1 || !args[0].is_string()) return absl::InvalidArgumentError("strftime_now(format)");
    std::tm tm{};
    tm.tm_year = year - 1900;
    tm.tm_mon = month - 1;
    tm.tm_mday = day;
    tm.tm_hour = hour;
    tm.tm_min = minute;
    tm.tm_sec = second;
    std::time_t t = timegm(&tm);
    gmtime_r(&t, &tm);
    return jinja_internal::PyStrftime(args[0].get<std::string>(), tm, 0);
  };
}

// The moment the golden cases use: 2024-07-26 12:00:00.
inline JinjaFunction GoldenStrftimeNow() { return FixedStrftimeNow(2024, 7, 26, 12, 0, 0); }

}  // namespace kvcast

#endif  // KVCAST_ENGINE_CHAT_TESTING_FIXED_STRFTIME_H_
