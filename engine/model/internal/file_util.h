// Whole-file I/O for the model loaders and the tiny-model generator
// (private to //engine/model and its tools).
//
// Contract: every error message names the path; errno is mapped to the
// nearest canonical code (ENOENT -> NotFound, EACCES -> PermissionDenied,
// otherwise Internal). Thread safety: stateless; concurrent writers of one
// path race as they would with plain POSIX calls.
#ifndef KVCAST_ENGINE_MODEL_INTERNAL_FILE_UTIL_H_
#define KVCAST_ENGINE_MODEL_INTERNAL_FILE_UTIL_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvcast {
namespace model_internal {

absl::Status ErrnoToStatus(int error_number, std::string_view message);
absl::StatusOr<std::string> ReadFile(const std::string& path);
// Writes to `path`.tmp and renames it over `path`.
absl::Status WriteFile(const std::string& path, std::string_view contents);
bool FileExists(const std::string& path);
// Creates `path` and its missing parents; OK if it already is a directory.
absl::Status MakeDirectories(const std::string& path);
std::string JoinPath(std::string_view dir, std::string_view name);

// A read-only private mapping of a whole file; the caller munmaps it.
struct MappedFile {
  void* data = nullptr;
  size_t size = 0;
};
// Maps `path`. DataLoss "<path>: file is N bytes, too short for <what>"
// when it is smaller than `min_size`; open/stat/mmap errors name the path.
absl::StatusOr<MappedFile> MapFile(const std::string& path, size_t min_size,
                                   std::string_view what);

}  // namespace model_internal
}  // namespace kvcast

#endif  // KVCAST_ENGINE_MODEL_INTERNAL_FILE_UTIL_H_
