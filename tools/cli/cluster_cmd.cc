#include "tools/cli/cluster_cmd.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "tools/cluster/subprocess.h"

namespace kvcast::cli {
namespace {

// Self-pipe: the handler only write()s, so the signal may land on any
// thread (OpenBLAS starts threads before main, ruling out signalfd).
int g_signal_pipe[2] = {-1, -1};

void OnSignal(int signo) {
  const int saved = errno;
  const unsigned char b = static_cast<unsigned char>(signo);
  (void)!write(g_signal_pipe[1], &b, 1);
  errno = saved;
}

absl::Status InstallSignalPipe() {
  if (g_signal_pipe[0] >= 0) return absl::OkStatus();
  if (pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", strerror(errno)));
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateClusterUp(const cluster::ClusterOptions& o) {
  if (o.model_dir.empty()) return absl::InvalidArgumentError("--model DIR is required");
  if (o.num_prefill < 1 || o.num_decode < 1 || o.num_schedulers < 1) {
    return absl::InvalidArgumentError("--prefill, --decode and --schedulers must be at least 1");
  }
  if (o.scheduler_port < 0 || o.scheduler_port > 65535) {
    return absl::InvalidArgumentError("--scheduler_port must be in [0, 65535]");
  }
  if (o.http_port < -1 || o.http_port > 65535) {
    return absl::InvalidArgumentError("--http_port must be in [-1, 65535] (-1: off)");
  }
  if (o.kv_cache_mb < 1) return absl::InvalidArgumentError("--kv_cache_mb must be positive");
  if (o.work_dir.empty()) return absl::InvalidArgumentError("--work_dir must not be empty");
  return absl::OkStatus();
}

absl::Status ClusterUp(const cluster::ClusterOptions& options, bool restart,
                       const std::optional<AutoscaleOptions>& autoscale) {
  if (absl::Status s = InstallSignalPipe(); !s.ok()) return s;
  std::fprintf(stderr, "kvcast cluster: starting in %s ...\n", options.work_dir.c_str());
  auto started = cluster::LocalCluster::Start(options);
  if (!started.ok()) return started.status();
  cluster::LocalCluster& c = **started;
  std::printf("scheduler: %s (metrics http://%s/metrics)\n", c.scheduler_address().c_str(),
              c.scheduler_metrics_address().c_str());
  if (!c.scheduler_http_address().empty()) {
    std::printf("OpenAI-compatible API: %s://%s/v1%s\n", options.http_tls ? "https" : "http",
                c.scheduler_http_address().c_str(),
                options.http_tls ? absl::StrCat(" (CA ", c.ca_cert(), ")").c_str() : "");
  }
  for (const cluster::Process* p : c.processes()) {
    std::string where = p->grpc_address.empty() ? absl::StrCat("moqt ", p->moqt_address, "/udp")
                                                : absl::StrCat("grpc ", p->grpc_address);
    if (!p->grpc_address.empty() && !p->moqt_address.empty()) {
      absl::StrAppend(&where, ", moqt ", p->moqt_address, "/udp");
    }
    if (!p->metrics_address.empty()) absl::StrAppend(&where, ", metrics ", p->metrics_address);
    std::printf("  %-10s pid %-7d %-52s log %s\n", p->name.c_str(), int(p->pid), where.c_str(),
                p->log_path.c_str());
  }
  std::printf("try: kvcast generate --scheduler %s --prompt_ids 1,2,3 --max_tokens 8\n"
              "Ctrl-C (SIGINT) or SIGTERM stops the cluster.\n",
              c.scheduler_address().c_str());
  std::fflush(stdout);

  // A child that exits is reported and, with `restart`, spawned again after
  // a back-off (none the first time, then 1 s, doubling per exit that
  // follows less than kStableRun of running, up to 30 s), as a
  // Deployment's pod would be.
  constexpr absl::Duration kStableRun = absl::Seconds(30);
  struct Supervised {
    absl::Time started = absl::Now();
    absl::Time restart_at = absl::InfiniteFuture();  // set while it is down
    int quick_exits = 0;
  };
  std::map<std::string, Supervised> state;
  absl::Time next_scale = autoscale ? absl::Now() + autoscale->interval : absl::InfiniteFuture();
  int signo = 0;
  while (signo == 0) {
    pollfd p{g_signal_pipe[0], POLLIN, 0};
    if (poll(&p, 1, 200) > 0) {
      unsigned char b;
      if (read(g_signal_pipe[0], &b, 1) == 1) signo = b;
    }
    if (absl::Now() >= next_scale) {
      std::fputs(Autoscale(c, *autoscale).c_str(), stderr);
      next_scale = absl::Now() + autoscale->interval;
    }
    for (const cluster::Process* proc : c.processes()) {
      Supervised& s = state[proc->name];
      const absl::Time now = absl::Now();
      if (proc->draining || c.Running(proc->role, proc->index)) continue;  // drained: not restarted
      if (s.restart_at == absl::InfiniteFuture()) {  // it has just exited
        s.quick_exits = now - s.started < kStableRun ? s.quick_exits + 1 : 1;
        const absl::Duration backoff =
            s.quick_exits == 1
                ? absl::ZeroDuration()
                : std::min(absl::Seconds(30), absl::Seconds(1 << std::min(s.quick_exits - 2, 5)));
        s.restart_at = restart ? now + backoff : absl::InfinitePast();
        std::fprintf(stderr, "kvcast cluster: %s (pid %d) exited: %s; %s; log %s:\n%s\n",
                     proc->name.c_str(), int(proc->pid),
                     cluster::DescribeWaitStatus(proc->wait_status).c_str(),
                     !restart ? "not restarted (--restart=false)"
                     : backoff == absl::ZeroDuration()
                         ? "restarting"
                         : absl::StrCat("restarting in ", absl::FormatDuration(backoff)).c_str(),
                     proc->log_path.c_str(), cluster::LocalCluster::LogTail(*proc, 1000).c_str());
      }
      if (!restart || now < s.restart_at) continue;
      if (absl::Status r = c.Restart(proc->role, proc->index); !r.ok()) {
        std::fprintf(stderr, "kvcast cluster: restarting %s: %s\n", proc->name.c_str(),
                     r.ToString().c_str());
        s.restart_at = now + absl::Seconds(30);
        continue;
      }
      s.started = now;
      s.restart_at = absl::InfiniteFuture();
      std::fprintf(stderr, "kvcast cluster: %s restarted (pid %d)\n", proc->name.c_str(),
                   int(proc->pid));
    }
  }
  std::fprintf(stderr, "kvcast cluster: %s, stopping\n", strsignal(signo));
  absl::Status stopped = c.Stop();
  if (stopped.ok()) std::fprintf(stderr, "kvcast cluster: stopped\n");
  return stopped;
}

}  // namespace kvcast::cli
