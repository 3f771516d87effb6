#include "services/common/log.h"

#include <unistd.h>

#include <cstdio>
#include <string>

#include "gtest/gtest.h"

namespace kvcast::services {
namespace {

// Runs `fn` with stderr captured.
template <typename F>
std::string Stderr(F fn) {
  std::fflush(stderr);
  char path[] = "/tmp/log_test_XXXXXX";
  const int fd = mkstemp(path);
  const int saved = dup(2);
  dup2(fd, 2);
  fn();
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  std::string out;
  char buf[4096];
  lseek(fd, 0, SEEK_SET);
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) out.append(buf, size_t(n));
  close(fd);
  unlink(path);
  return out;
}

TEST(LogTest, LinesGoToStderrWithTimeLevelAndProgram) {
  ASSERT_TRUE(InitLogging("kvcast-test", "info").ok());
  const std::string out = Stderr([] { Log().warn("{}: decode {} stalled", "req-7", "d-1"); });
  // 2026-11-28T07:12:00.123 warning kvcast-test: req-7: decode d-1 stalled
  ASSERT_GE(out.size(), 24u) << out;
  EXPECT_EQ(out[4], '-');
  EXPECT_EQ(out[10], 'T');
  EXPECT_NE(out.find(" warning kvcast-test: req-7: decode d-1 stalled\n"), std::string::npos) << out;
}

TEST(LogTest, TheLevelFiltersAndAnUnknownLevelIsRefused) {
  ASSERT_TRUE(InitLogging("kvcast-test", "warn").ok());
  EXPECT_EQ(Stderr([] { Log().info("not shown"); }), "");
  EXPECT_NE(Stderr([] { Log().error("shown"); }).find("error kvcast-test: shown"), std::string::npos);
  const absl::Status bad = InitLogging("kvcast-test", "loud");
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("--log_level=loud"), std::string::npos);
  ASSERT_TRUE(InitLogging("kvcast-test", "off").ok());
  EXPECT_EQ(Stderr([] { Log().critical("silenced"); }), "");
}

}  // namespace
}  // namespace kvcast::services
