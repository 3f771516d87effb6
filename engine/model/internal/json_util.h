// Exception-free JSON parsing for the model loaders (private to
// //engine/model and its tools).
//
// Contract: ParseJson never throws; on malformed text it returns
// InvalidArgument "<source>: invalid JSON at byte <offset>: <reason>".
// Thread safety: stateless.
#ifndef KVCAST_ENGINE_MODEL_INTERNAL_JSON_UTIL_H_
#define KVCAST_ENGINE_MODEL_INTERNAL_JSON_UTIL_H_

#include <cstdint>
#include <optional>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace kvcast {
namespace model_internal {

absl::StatusOr<nlohmann::json> ParseJson(std::string_view text, std::string_view source);

// The integer value of `value` if it is a JSON integer in [min, max].
std::optional<int64_t> JsonInteger(const nlohmann::json& value, int64_t min, int64_t max);

}  // namespace model_internal
}  // namespace kvcast

#endif  // KVCAST_ENGINE_MODEL_INTERNAL_JSON_UTIL_H_
