// Debian's Abseil 20220623 is built with its own absl::string_view (not an
// alias of std::string_view), so absl::StrCat cannot take std::string_view.
// AV bridges the two without copying.
#ifndef KVCAST_ENGINE_MODEL_INTERNAL_ABSL_VIEW_H_
#define KVCAST_ENGINE_MODEL_INTERNAL_ABSL_VIEW_H_

#include <string_view>

#include "absl/strings/string_view.h"

namespace kvcast {
namespace model_internal {

inline absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }

}  // namespace model_internal
}  // namespace kvcast

#endif  // KVCAST_ENGINE_MODEL_INTERNAL_ABSL_VIEW_H_
