// Test helper: a fresh directory per test case under $TEST_TMPDIR.
#ifndef KVCAST_ENGINE_MODEL_INTERNAL_TEST_DIR_H_
#define KVCAST_ENGINE_MODEL_INTERNAL_TEST_DIR_H_

#include <cstdlib>
#include <string>

#include "engine/model/internal/file_util.h"
#include "gtest/gtest.h"

namespace kvcast {
namespace model_internal {

// $TEST_TMPDIR/<current test name>, created if missing.
inline std::string TestDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(tmp ? tmp : "/tmp") + "/" +
                    ::testing::UnitTest::GetInstance()->current_test_info()->name();
  EXPECT_TRUE(MakeDirectories(dir).ok());
  return dir;
}

}  // namespace model_internal
}  // namespace kvcast

#endif  // KVCAST_ENGINE_MODEL_INTERNAL_TEST_DIR_H_
