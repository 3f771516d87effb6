#include "tools/cluster/local_cluster.h"

#include <errno.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "tools/cluster/metrics_scrape.h"
#include "tools/cluster/subprocess.h"
#include "tools/devcert/devcert.h"

namespace kvcast::cluster {
namespace fs = std::filesystem;

const char* RoleName(Role role) {
  switch (role) {
    case Role::kRelay: return "relay";
    case Role::kScheduler: return "scheduler";
    case Role::kPrefill: return "prefill";
    case Role::kDecode: return "decode";
  }
  return "?";
}

absl::StatusOr<std::string> LocalCluster::FindBinary(const std::string& name,
                                                     const std::string& package) {
  return FindExecutable(name, package);
}

absl::StatusOr<std::unique_ptr<LocalCluster>> LocalCluster::Start(const ClusterOptions& options) {
  if (options.model_dir.empty()) return absl::InvalidArgumentError("ClusterOptions.model_dir is required");
  if (options.num_prefill < 1 || options.num_decode < 1 || options.num_schedulers < 1) {
    return absl::InvalidArgumentError(
        "a cluster needs at least one scheduler, one prefill and one decode worker");
  }
  if (options.scheduler_port < 0 || options.scheduler_port > 65535 || options.http_port < -1 ||
      options.http_port > 65535 || options.kv_cache_mb < 1) {
    return absl::InvalidArgumentError(
        "scheduler_port must be in [0, 65535], http_port in [-1, 65535], kv_cache_mb positive");
  }
  std::unique_ptr<LocalCluster> cluster(new LocalCluster(options));
  absl::Status s = cluster->Launch();
  if (!s.ok()) {
    cluster->Stop().IgnoreError();
    return s;
  }
  return cluster;
}

absl::Status LocalCluster::Launch() {
  work_dir_ = options_.work_dir;
  if (work_dir_.empty()) {
    const char* tmp = std::getenv("TEST_TMPDIR");
    std::string pattern = absl::StrCat(tmp != nullptr && *tmp ? tmp : "/tmp", "/kvcast-cluster-XXXXXX");
    if (mkdtemp(pattern.data()) == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat("mkdtemp ", pattern, ": ", strerror(errno)));
    }
    work_dir_ = pattern;
  }
  std::error_code ec;
  fs::create_directories(fs::path(work_dir_) / "logs", ec);
  if (ec) return absl::FailedPreconditionError(absl::StrCat("mkdir ", work_dir_, "/logs: ", ec.message()));
  work_dir_ = fs::absolute(work_dir_).string();

  devcert::DevCertOptions dc;
  dc.out_dir = work_dir_ + "/certs";
  RETURN_IF_ERROR(devcert::WriteDevCertificates(dc));
  certs_ = devcert::PathsIn(dc.out_dir);
  const devcert::DevCertPaths& certs = certs_;

  auto binary = [](const std::string& given, const char* name, const char* pkg) -> absl::StatusOr<std::string> {
    if (given.empty()) return FindBinary(name, pkg);
    if (access(given.c_str(), X_OK) != 0) return absl::NotFoundError(absl::StrCat(given, ": not executable"));
    return given;
  };
  ASSIGN_OR_RETURN(std::string scheduler_bin,
                   binary(options_.scheduler_bin, "kvcast-scheduler", "services/scheduler"));
  ASSIGN_OR_RETURN(prefill_bin_, binary(options_.prefill_bin, "kvcast-prefill", "services/prefill"));
  ASSIGN_OR_RETURN(decode_bin_, binary(options_.decode_bin, "kvcast-decode", "services/decode"));
  std::string relay_bin;
  if (options_.relay) {
    ASSIGN_OR_RETURN(relay_bin, binary(options_.relay_bin, "kvcast-relay", "services/relay"));
  }

  if (options_.scheduler_port != 0) used_ports_.insert(options_.scheduler_port);
  if (options_.http_port > 0) used_ports_.insert(options_.http_port);
  auto pick = [this](int type) { return PickAddress(type); };

  std::string& relay_address = relay_address_;
  if (options_.relay) {
    ASSIGN_OR_RETURN(relay_address, pick(SOCK_DGRAM));
    ASSIGN_OR_RETURN(std::string relay_metrics, pick(SOCK_STREAM));
    // Mutual TLS: only holders of the cluster's certificates reach the KV,
    // and each request needs a token the scheduler signed for its prompt.
    std::vector<std::string> args = {"--listen=" + relay_address, "--cert=" + certs.server_cert,
                                     "--key=" + certs.server_key, "--client_ca=" + certs.ca_cert,
                                     "--require_client_cert=true",
                                     "--auth_key_file=" + certs.moqt_auth_key,
                                     // Covers a decode worker subscribing before the
                                     // prefill worker's announce reaches the relay.
                                     "--subscribe_wait_ms=2000",
                                     "--metrics_listen=" + relay_metrics};
    args.insert(args.end(), options_.relay_flags.begin(), options_.relay_flags.end());
    ASSIGN_OR_RETURN(Process * p, Spawn(Role::kRelay, 0, relay_bin, std::move(args)));
    p->moqt_address = relay_address;
    p->metrics_address = relay_metrics;
  }

  std::vector<std::string> internal_addresses;
  for (int r = 0; r < options_.num_schedulers; ++r) {
    std::string address = absl::StrCat("127.0.0.1:", options_.scheduler_port);
    if (r > 0 || options_.scheduler_port == 0) {
      ASSIGN_OR_RETURN(address, pick(SOCK_STREAM));
    }
    ASSIGN_OR_RETURN(std::string metrics, pick(SOCK_STREAM));
    // Workers register on an internal port with mutual TLS; the public API
    // (address, HTTP) stays plaintext.
    ASSIGN_OR_RETURN(std::string internal, pick(SOCK_STREAM));
    std::string http;
    if (r == 0 && options_.http_port > 0) http = absl::StrCat("127.0.0.1:", options_.http_port);
    if (r > 0 || options_.http_port == 0) {
      ASSIGN_OR_RETURN(http, pick(SOCK_STREAM));
    }
    if (options_.http_port < 0) http.clear();
    std::vector<std::string> args = {"--grpc_listen=" + address,
                                     "--metrics_listen=" + metrics,
                                     "--http_listen=" + http,
                                     "--http_cert=" + (options_.http_tls ? certs.server_cert : ""),
                                     "--http_key=" + (options_.http_tls ? certs.server_key : ""),
                                     "--internal_grpc_listen=" + internal,
                                     "--internal_grpc_cert=" + certs.server_cert,
                                     "--internal_grpc_key=" + certs.server_key,
                                     "--internal_grpc_ca=" + certs.ca_cert,
                                     "--moqt_auth_key_file=" + certs.moqt_auth_key,
                                     "--model=" + options_.model_dir};
    args.insert(args.end(), options_.scheduler_flags.begin(), options_.scheduler_flags.end());
    ASSIGN_OR_RETURN(Process * p, Spawn(Role::kScheduler, r, scheduler_bin, std::move(args)));
    p->grpc_address = address;
    p->metrics_address = metrics;
    p->http_address = http;
    internal_addresses.push_back(internal);
  }
  scheduler_internal_ = absl::StrJoin(internal_addresses, ",");
  // Workers start once the scheduler answers, so their first Register
  // does not land in gRPC's reconnect backoff.
  const absl::Time deadline = absl::Now() + options_.start_timeout;
  for (int r = 0; r < options_.num_schedulers; ++r) {
    const Process& sched = scheduler(r);
    while (!HttpGet(sched.metrics_address, "/metrics", absl::Seconds(1)).ok()) {
      RETURN_IF_ERROR(CheckChildren());
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError(absl::StrCat(sched.name, "'s /metrics (",
                                                        sched.metrics_address,
                                                        ") did not answer; its log:\n",
                                                        LogTail(sched)));
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
  }

  for (Role role : {Role::kPrefill, Role::kDecode}) {
    for (int i = 0; i < (role == Role::kPrefill ? options_.num_prefill : options_.num_decode); ++i) {
      RETURN_IF_ERROR(SpawnWorker(role, i).status());
    }
  }
  return WaitForWorkers(options_.num_prefill, options_.num_decode,
                        std::max(deadline - absl::Now(), absl::Seconds(1)));
}

absl::StatusOr<std::string> LocalCluster::PickAddress(int type) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    ASSIGN_OR_RETURN(int port, PickFreePort(type));
    if (used_ports_.insert(port).second) return absl::StrCat("127.0.0.1:", port);
  }
  return absl::ResourceExhaustedError("no free port");
}

absl::StatusOr<Process*> LocalCluster::SpawnWorker(Role role, int index) {
  const bool prefill = role == Role::kPrefill;
  ASSIGN_OR_RETURN(std::string grpc, PickAddress(SOCK_STREAM));
  ASSIGN_OR_RETURN(std::string metrics, PickAddress(SOCK_STREAM));
  ASSIGN_OR_RETURN(std::string moqt, PickAddress(SOCK_DGRAM));
  std::vector<std::string> args = {
      "--model=" + options_.model_dir, "--backend=" + options_.backend,
      absl::StrCat("--kv_cache_mb=", options_.kv_cache_mb), "--grpc_listen=" + grpc,
      "--metrics_listen=" + metrics, "--scheduler=" + scheduler_internal_,
      "--grpc_cert=" + certs_.server_cert, "--grpc_key=" + certs_.server_key,
      "--grpc_ca=" + certs_.ca_cert,
      "--advertise_host=127.0.0.1", "--moqt_listen=" + moqt, "--quic_cert=" + certs_.server_cert,
      "--quic_key=" + certs_.server_key, "--quic_ca=" + certs_.ca_cert,
      "--moqt_auth_key_file=" + certs_.moqt_auth_key};
  if (options_.relay) args.push_back("--relay=" + relay_address_);
  const auto& extra = prefill ? options_.prefill_flags : options_.decode_flags;
  args.insert(args.end(), extra.begin(), extra.end());
  ASSIGN_OR_RETURN(Process * p, Spawn(role, index, prefill ? prefill_bin_ : decode_bin_, std::move(args)));
  p->grpc_address = grpc;
  p->metrics_address = metrics;
  p->moqt_address = moqt;
  return p;
}

absl::StatusOr<int> LocalCluster::AddWorker(Role role) {
  if (role != Role::kPrefill && role != Role::kDecode) {
    return absl::InvalidArgumentError(absl::StrCat("AddWorker: ", RoleName(role), " is no worker role"));
  }
  RETURN_IF_ERROR(SpawnWorker(role, num_workers(role)).status());
  return num_workers(role) - 1;
}

absl::StatusOr<int> LocalCluster::DrainWorker(Role role) {
  for (auto it = processes_.rbegin(); it != processes_.rend(); ++it) {
    Process* p = it->get();
    if (p->role != role || p->draining || Reap(p, false)) continue;
    if (kill(-p->pid, SIGTERM) != 0) {
      return absl::InternalError(absl::StrCat("kill ", p->name, ": ", strerror(errno)));
    }
    p->draining = true;
    return p->index;
  }
  return absl::FailedPreconditionError(absl::StrCat("no running ", RoleName(role), " worker to drain"));
}

int LocalCluster::serving_workers(Role role) {
  int n = 0;
  for (auto& p : processes_) n += p->role == role && !p->draining && !Reap(p.get(), false);
  return n;
}

absl::StatusOr<Process*> LocalCluster::Spawn(Role role, int index, const std::string& binary,
                                             std::vector<std::string> args) {
  auto p = std::make_unique<Process>();
  p->role = role;
  p->index = index;
  p->name = role == Role::kPrefill || role == Role::kDecode || index > 0
                ? absl::StrCat(RoleName(role), "-", index)
                : RoleName(role);
  p->log_path = absl::StrCat(work_dir_, "/logs/", p->name, ".log");
  args.insert(args.begin(), binary);
  ASSIGN_OR_RETURN(p->pid, SpawnProcess(args, p->log_path));
  p->argv = std::move(args);
  processes_.push_back(std::move(p));
  return processes_.back().get();
}

absl::Status LocalCluster::WaitForWorkers(int num_prefill, int num_decode, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (const auto& sched : processes_) {
    if (sched->role != Role::kScheduler || Reap(sched.get(), false)) continue;
    std::string last = "no scrape yet";
    for (;;) {
      RETURN_IF_ERROR(CheckChildren());
      auto text = HttpGet(sched->metrics_address, "/metrics", absl::Seconds(1));
      if (text.ok()) {
        auto p = ScrapeMetric(*text, "kvcast_workers", {{"role", "prefill"}});
        auto d = ScrapeMetric(*text, "kvcast_workers", {{"role", "decode"}});
        if (p.ok() && d.ok() && *p == num_prefill && *d == num_decode) break;
        last = absl::StrCat("prefill ", p.ok() ? absl::StrCat(*p) : p.status().ToString(),
                            ", decode ", d.ok() ? absl::StrCat(*d) : d.status().ToString());
      } else {
        last = text.status().ToString();
      }
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            "waited ", absl::FormatDuration(timeout), " for ", num_prefill, " prefill + ",
            num_decode, " decode workers; ", sched->name, " reports ", last, "; its log:\n",
            LogTail(*sched)));
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
  }
  return absl::OkStatus();
}

bool LocalCluster::Reap(Process* p, bool block) {
  if (p->exited) return true;
  int status = 0;
  pid_t r;
  do {
    r = waitpid(p->pid, &status, block ? 0 : WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == p->pid || (r < 0 && errno == ECHILD)) {
    p->exited = true;
    p->wait_status = status;
  }
  return p->exited;
}

absl::Status LocalCluster::CheckChildren() {
  for (auto& p : processes_) {
    if (!p->exited && Reap(p.get(), false) &&
        !(p->draining && WIFEXITED(p->wait_status) && WEXITSTATUS(p->wait_status) == 0)) {
      return absl::FailedPreconditionError(absl::StrCat(p->name, " (pid ", p->pid, ") ",
                                                        DescribeWaitStatus(p->wait_status), "; ",
                                                        p->log_path, ":\n", LogTail(*p)));
    }
  }
  return absl::OkStatus();
}

std::string LocalCluster::LogTail(const Process& p, size_t max_bytes) {
  return FileTail(p.log_path, max_bytes);
}

Process* LocalCluster::Find(Role role, int index) const {
  for (const auto& p : processes_) {
    if (p->role == role && p->index == index) return p.get();
  }
  return nullptr;
}

const std::string& LocalCluster::relay_address() const {
  static const std::string kNone;
  const Process* r = relay();
  return r ? r->moqt_address : kNone;
}

std::string LocalCluster::ca_cert() const { return devcert::PathsIn(work_dir_ + "/certs").ca_cert; }

const Process& LocalCluster::worker(Role role, int index) const {
  const Process* p = (role == Role::kPrefill || role == Role::kDecode) ? Find(role, index) : nullptr;
  if (p == nullptr) {
    std::fprintf(stderr, "LocalCluster::worker: no %s worker %d\n", RoleName(role), index);
    std::abort();
  }
  return *p;
}

const Process& LocalCluster::scheduler(int replica) const {
  const Process* p = Find(Role::kScheduler, replica);
  if (p == nullptr) {
    std::fprintf(stderr, "LocalCluster::scheduler: no replica %d\n", replica);
    std::abort();
  }
  return *p;
}

const Process* LocalCluster::relay() const { return Find(Role::kRelay, 0); }

int LocalCluster::num_workers(Role role) const {
  int n = 0;
  for (const auto& p : processes_) n += p->role == role;
  return n;
}

std::vector<const Process*> LocalCluster::processes() const {
  std::vector<const Process*> out;
  for (const auto& p : processes_) out.push_back(p.get());
  return out;
}

absl::Status LocalCluster::Kill(Role role, int index, int signo) {
  Process* p = Find(role, index);
  if (p == nullptr) return absl::InvalidArgumentError(absl::StrCat("no ", RoleName(role), " ", index));
  if (Reap(p, false)) return absl::FailedPreconditionError(absl::StrCat(p->name, " has already exited"));
  if (kill(-p->pid, signo) != 0) {
    return absl::InternalError(absl::StrCat("kill ", p->name, ": ", strerror(errno)));
  }
  if (signo == SIGKILL) Reap(p, true);
  return absl::OkStatus();
}

absl::Status LocalCluster::Restart(Role role, int index) {
  Process* p = Find(role, index);
  if (p == nullptr) return absl::InvalidArgumentError(absl::StrCat("no ", RoleName(role), " ", index));
  if (!Reap(p, false)) return absl::FailedPreconditionError(absl::StrCat(p->name, " is still running"));
  ASSIGN_OR_RETURN(p->pid, SpawnProcess(p->argv, p->log_path));
  p->exited = false;
  p->wait_status = 0;
  ++p->restarts;
  return absl::OkStatus();
}

bool LocalCluster::Running(Role role, int index) {
  Process* p = Find(role, index);
  return p != nullptr && !Reap(p, false);
}

absl::Status LocalCluster::Stop() {
  if (stopped_) return absl::OkStatus();
  stopped_ = true;
  std::vector<std::string> problems;
  // Workers first (they deregister), then the scheduler, then the relay.
  for (Role role : {Role::kPrefill, Role::kDecode, Role::kScheduler, Role::kRelay}) {
    for (auto& p : processes_) {
      // A draining worker has had its SIGTERM (a second one cuts its drain short).
      if (p->role == role && !p->draining && !Reap(p.get(), false)) kill(-p->pid, SIGTERM);
    }
  }
  const absl::Time deadline = absl::Now() + options_.stop_timeout;
  for (auto& p : processes_) {
    while (!Reap(p.get(), false) && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(20));
    if (!p->exited) {
      problems.push_back(absl::StrCat(p->name, " ignored SIGTERM for ", absl::FormatDuration(options_.stop_timeout)));
      kill(-p->pid, SIGKILL);
      Reap(p.get(), true);
    } else if (!(WIFEXITED(p->wait_status) && WEXITSTATUS(p->wait_status) == 0) &&
               !(WIFSIGNALED(p->wait_status) && WTERMSIG(p->wait_status) == SIGKILL) &&
               // Killed by the SIGTERM itself: it was still starting (restarted
               // a moment ago), before its handler: it served nothing yet.
               !(WIFSIGNALED(p->wait_status) && WTERMSIG(p->wait_status) == SIGTERM)) {
      problems.push_back(absl::StrCat(p->name, ": ", DescribeWaitStatus(p->wait_status), " (", p->log_path, ")"));
    }
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("stopping the cluster: ", absl::StrJoin(problems, "; ")));
}

LocalCluster::~LocalCluster() { Stop().IgnoreError(); }

}  // namespace kvcast::cluster
