// Machine-readable benchmark results: every benchmark tool's --json FILE
// writes one JSON object, {"tool", "date", "cpu", "cores", "command",
// "commit", "results"}, beside its text tables, so that tools/report can plot it and a
// reader can tell which machine, command and code produced each number
// (docs/benchmarks.md, "Result files").
#ifndef KVCAST_TOOLS_BENCH_RESULT_FILE_H_
#define KVCAST_TOOLS_BENCH_RESULT_FILE_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"

namespace kvcast::bench {

// The CPU's model name from /proc/cpuinfo ("unknown" where there is none).
std::string CpuModel();

// Today's date, UTC, as YYYY-MM-DD.
std::string TodayUtc();

// The commit of the checkout the tool runs in (`git rev-parse --short=12
// HEAD` in $BUILD_WORKSPACE_DIRECTORY under `bazel run`, else the working
// directory), with "-dirty" when tracked files other than documents differ
// from it (docs/, with the result files and plots, and any *.md do not change
// what runs); "unknown" outside a git checkout.
std::string SourceCommit();

// The command line as typed (argv joined by spaces).
std::string CommandLine(int argc, char** argv);

// {"tool", "date", "cpu", "cores", "command", "commit"}: the header every
// result file starts with. Call before absl::ParseCommandLine consumes argv.
nlohmann::json ResultHeader(std::string_view tool, int argc, char** argv);

// Writes a JSON document to path (pretty-printed, one value per line).
absl::Status WriteJsonFile(const std::string& path, const nlohmann::json& doc);

// Writes header + {"results": results} to path.
absl::Status WriteResultFile(const std::string& path, nlohmann::json header,
                             nlohmann::json results);

}  // namespace kvcast::bench

#endif  // KVCAST_TOOLS_BENCH_RESULT_FILE_H_
