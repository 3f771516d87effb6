// CPU accounting for the benchmarks: what the whole process and each of its
// threads spent (/proc/self/task/*/schedstat: time on a CPU, user and
// system), so a case's cost can be read per thread (the MoQT loops, coders
// and TLS ends are named: "prefill", "relay", "decode", "ac-coder",
// "tls-send", ...).
#ifndef KVCAST_TOOLS_BENCH_THREAD_CPU_H_
#define KVCAST_TOOLS_BENCH_THREAD_CPU_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace kvcast::bench {

// Seconds of CPU (user + system) every thread of this process has used.
double ProcessCpuSeconds();

// Each live thread's name and CPU seconds so far, by thread id.
using ThreadCpu = std::map<int, std::pair<std::string, double>>;
ThreadCpu SnapshotThreadCpu();

// CPU seconds between two snapshots summed by thread name (threads that
// started in between count from zero; ones that ended are missing: sample
// around work whose threads outlive it), largest first.
std::vector<std::pair<std::string, double>> CpuByName(const ThreadCpu& before,
                                                      const ThreadCpu& after);

}  // namespace kvcast::bench

#endif  // KVCAST_TOOLS_BENCH_THREAD_CPU_H_
