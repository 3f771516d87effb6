#include "tools/bench/thread_cpu.h"

#include <dirent.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace kvcast::bench {

double ProcessCpuSeconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

ThreadCpu SnapshotThreadCpu() {
  ThreadCpu out;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return out;
  while (dirent* e = readdir(dir)) {
    int tid = 0;
    if (!absl::SimpleAtoi(e->d_name, &tid)) continue;
    const std::string task = absl::StrCat("/proc/self/task/", tid, "/");
    std::ifstream comm(task + "comm"), stat(task + "schedstat");
    std::string name;
    uint64_t ns = 0;
    if (std::getline(comm, name) && (stat >> ns)) out[tid] = {name, ns * 1e-9};
  }
  closedir(dir);
  return out;
}

std::vector<std::pair<std::string, double>> CpuByName(const ThreadCpu& before,
                                                      const ThreadCpu& after) {
  std::map<std::string, double> sum;
  for (const auto& [tid, cpu] : after) {
    auto it = before.find(tid);
    sum[cpu.first] += cpu.second - (it == before.end() ? 0 : it->second.second);
  }
  std::vector<std::pair<std::string, double>> out(sum.begin(), sum.end());
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

}  // namespace kvcast::bench
