#include "tools/bench/result_file.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace kvcast::bench {
namespace {

TEST(ResultFileTest, HeaderNamesToolDateCpuCommandCommit) {
  char a0[] = "bazel-bin/tools/bench/engine_bench", a1[] = "--prompt_len", a2[] = "4096";
  char* argv[] = {a0, a1, a2};
  const nlohmann::json h = ResultHeader("engine_bench", 3, argv);
  EXPECT_EQ(h["tool"], "engine_bench");
  EXPECT_EQ(h["command"], "bazel-bin/tools/bench/engine_bench --prompt_len 4096");
  const std::string date = h["date"];
  ASSERT_EQ(date.size(), 10u) << date;
  EXPECT_EQ(date[4], '-');
  EXPECT_EQ(date[7], '-');
  EXPECT_FALSE(h["cpu"].get<std::string>().empty());
  EXPECT_FALSE(h["commit"].get<std::string>().empty());
}

TEST(ResultFileTest, WritesHeaderAndResults) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/r.json";
  nlohmann::json header = {{"tool", "t"}, {"date", "2026-01-02"}};
  ASSERT_TRUE(WriteResultFile(path, header, {{{"case", "tls"}, {"mib_s", 1900.5}}}).ok());
  std::ifstream in(path);
  const nlohmann::json doc = nlohmann::json::parse(in);
  EXPECT_EQ(doc["tool"], "t");
  EXPECT_EQ(doc["date"], "2026-01-02");
  ASSERT_EQ(doc["results"].size(), 1u);
  EXPECT_EQ(doc["results"][0]["case"], "tls");
  EXPECT_DOUBLE_EQ(doc["results"][0]["mib_s"].get<double>(), 1900.5);
}

// A repository of its own, so the answer does not depend on this checkout.
TEST(ResultFileTest, CommitIsDirtyOnlyForCodeChanges) {
  const std::string repo = std::string(std::getenv("TEST_TMPDIR")) + "/repo";
  auto sh = [&](const std::string& cmd) {
    return std::system(("cd '" + repo + "' && " + cmd + " >/dev/null 2>&1").c_str());
  };
  ASSERT_EQ(std::system(("rm -rf '" + repo + "' && mkdir -p '" + repo + "/docs'").c_str()), 0);
  ASSERT_EQ(sh("git init -q . && echo a > main.cc && echo r > docs/r.json && echo m > README.md && "
               "git add -A && "
               "git -c user.name=t -c user.email=t@t commit -qm first"),
            0);
  setenv("BUILD_WORKSPACE_DIRECTORY", repo.c_str(), 1);
  const std::string clean = SourceCommit();
  EXPECT_EQ(clean.size(), 12u) << clean;
  ASSERT_EQ(sh("echo rr > docs/r.json && echo mm > README.md && echo new > untracked.cc"), 0);
  EXPECT_EQ(SourceCommit(), clean);  // documents rewritten, an untracked file: same code
  ASSERT_EQ(sh("echo b > main.cc"), 0);
  EXPECT_EQ(SourceCommit(), clean + "-dirty");
  unsetenv("BUILD_WORKSPACE_DIRECTORY");
}

TEST(ResultFileTest, UnwritablePathIsAnError) {
  EXPECT_FALSE(WriteResultFile("/nonexistent-dir/r.json", {}, {}).ok());
}

}  // namespace
}  // namespace kvcast::bench
