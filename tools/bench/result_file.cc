#include "tools/bench/result_file.h"

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace kvcast::bench {
namespace {

// The output of a shell command, trailing newline stripped ("" on failure).
std::string Capture(const std::string& command) {
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) return "";
  std::string out;
  char buf[256];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  if (pclose(p) != 0) return "";
  return std::string(absl::StripTrailingAsciiWhitespace(out));
}

}  // namespace

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        return std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
      }
    }
  }
  return "unknown";
}

std::string TodayUtc() {
  const std::time_t now = std::time(nullptr);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", std::gmtime(&now));
  return buf;
}

std::string SourceCommit() {
  const char* ws = std::getenv("BUILD_WORKSPACE_DIRECTORY");
  const std::string git = ws != nullptr ? absl::StrCat("git -C '", ws, "' ") : "git ";
  const std::string commit = Capture(git + "rev-parse --short=12 HEAD 2>/dev/null");
  if (commit.empty()) return "unknown";
  // Documents (docs/, result files and plots, any *.md) do not change what runs.
  const std::string changes =
      Capture(git + "status --porcelain --untracked-files=no 2>/dev/null");
  for (absl::string_view line : absl::StrSplit(changes, '\n', absl::SkipEmpty())) {
    if (line.size() <= 3) continue;
    const absl::string_view path = line.substr(3);
    if (!absl::StartsWith(path, "docs/") && !absl::EndsWith(path, ".md")) return commit + "-dirty";
  }
  return commit;
}

std::string CommandLine(int argc, char** argv) {
  return absl::StrJoin(argv, argv + argc, " ");
}

nlohmann::json ResultHeader(std::string_view tool, int argc, char** argv) {
  return {{"tool", std::string(tool)}, {"date", TodayUtc()}, {"cpu", CpuModel()},
          {"cores", std::thread::hardware_concurrency()}, {"command", CommandLine(argc, argv)},
          {"commit", SourceCommit()}};
}

absl::Status WriteJsonFile(const std::string& path, const nlohmann::json& doc) {
  std::ofstream out(path);
  out << doc.dump(1) << "\n";
  out.close();
  if (!out) return absl::UnavailableError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

absl::Status WriteResultFile(const std::string& path, nlohmann::json header,
                             nlohmann::json results) {
  header["results"] = std::move(results);
  return WriteJsonFile(path, header);
}

}  // namespace kvcast::bench
