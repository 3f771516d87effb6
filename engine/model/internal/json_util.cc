#include "engine/model/internal/json_util.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "engine/model/internal/absl_view.h"

namespace kvcast {

using model_internal::AV;
namespace model_internal {
namespace {

// Accepts every event and remembers the first syntax error; used only to
// locate an error the DOM parser already reported.
class ErrorLocator : public nlohmann::json_sax<nlohmann::json> {
 public:
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t&) override { return true; }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    // nlohmann counts characters consumed; report the 0-based offset of the
    // offending byte.
    position_ = position > 0 ? position - 1 : 0;
    reason_ = ex.what();
    return false;
  }

  std::size_t position() const { return position_; }
  const std::string& reason() const { return reason_; }

 private:
  std::size_t position_ = 0;
  std::string reason_ = "malformed JSON";
};

}  // namespace

absl::StatusOr<nlohmann::json> ParseJson(std::string_view text, std::string_view source) {
  nlohmann::json parsed = nlohmann::json::parse(text.begin(), text.end(), nullptr,
                                                /*allow_exceptions=*/false);
  if (!parsed.is_discarded()) return parsed;
  ErrorLocator locator;
  nlohmann::json::sax_parse(text.begin(), text.end(), &locator);
  return absl::InvalidArgumentError(absl::StrCat(AV(source), ": invalid JSON at byte ",
                                                 locator.position(), ": ", locator.reason()));
}

std::optional<int64_t> JsonInteger(const nlohmann::json& value, int64_t min, int64_t max) {
  if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    const int64_t v = static_cast<int64_t>(u);
    if (v < min || v > max) return std::nullopt;
    return v;
  }
  if (value.is_number_integer()) {
    const int64_t v = value.get<int64_t>();
    if (v < min || v > max) return std::nullopt;
    return v;
  }
  return std::nullopt;
}

}  // namespace model_internal
}  // namespace kvcast
