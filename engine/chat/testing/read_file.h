// Test helper: a file's bytes ("" when it cannot be read; the caller's
// comparisons then fail and name the path).
#ifndef KVCAST_ENGINE_CHAT_TESTING_READ_FILE_H_
#define KVCAST_ENGINE_CHAT_TESTING_READ_FILE_H_

#include <fstream>
#include <sstream>
#include <string>

namespace kvcast {

inline std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace kvcast

#endif  // KVCAST_ENGINE_CHAT_TESTING_READ_FILE_H_
