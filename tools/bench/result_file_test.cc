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

TEST(ResultFileTest, UnwritablePathIsAnError) {
  EXPECT_FALSE(WriteResultFile("/nonexistent-dir/r.json", {}, {}).ok());
}

}  // namespace
}  // namespace kvcast::bench
