// Test vector files: see vector_files.h.
#include "transport/kvcache/testing/vector_files.h"

#include <filesystem>
#include <fstream>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace kvcast::kvcache::testing {

bool MakeDirectory(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  return !ec;
}

bool WriteFile(const std::string& path, const void* data, size_t size) {
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(data), std::streamsize(size));
  return bool(f);
}

bool WriteGroupVectors(const std::string& dir, const std::vector<std::vector<uint8_t>>& objects,
                       absl::Span<const float> decoded) {
  if (!MakeDirectory(dir)) return false;
  for (size_t t = 0; t < objects.size(); ++t) {
    if (!WriteFile(absl::StrCat(dir, "/object_", t, ".bin"), objects[t].data(),
                   objects[t].size())) {
      return false;
    }
  }
  return WriteFile(dir + "/decoded.f32", decoded.data(), decoded.size() * sizeof(float));
}

}  // namespace kvcast::kvcache::testing
