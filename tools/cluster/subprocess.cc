#include "tools/cluster/subprocess.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kvcast::cluster {

absl::StatusOr<int> PickFreePort(int type) {
  int fd = socket(AF_INET, type | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::FailedPreconditionError(absl::StrCat("socket: ", strerror(errno)));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    int e = errno;
    close(fd);
    return absl::FailedPreconditionError(absl::StrCat("bind 127.0.0.1:0: ", strerror(e)));
  }
  close(fd);
  return int(ntohs(a.sin_port));
}

absl::StatusOr<pid_t> SpawnProcess(const std::vector<std::string>& argv,
                                   const std::string& log_path) {
  if (argv.empty()) return absl::InvalidArgumentError("empty argv");
  // Everything the child touches is prepared here: after fork only
  // async-signal-safe calls are allowed.
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log < 0) {
    return absl::FailedPreconditionError(absl::StrCat("open ", log_path, ": ", strerror(errno)));
  }
  int null_in = open("/dev/null", O_RDONLY | O_CLOEXEC);
  int err_pipe[2];  // the child writes its exec errno here; CLOEXEC closes it on success
  if (null_in < 0 || pipe2(err_pipe, O_CLOEXEC) != 0) {
    int e = errno;
    close(log);
    if (null_in >= 0) close(null_in);
    return absl::FailedPreconditionError(absl::StrCat("open/pipe: ", strerror(e)));
  }
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    struct sigaction dfl;
    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGCHLD}) sigaction(sig, &dfl, nullptr);
    if (dup2(null_in, 0) < 0 || dup2(log, 1) < 0 || dup2(log, 2) < 0) {
      int e = errno;
      (void)!write(err_pipe[1], &e, sizeof(e));
      _exit(127);
    }
    execv(args[0], args.data());
    int e = errno;
    (void)!write(err_pipe[1], &e, sizeof(e));
    _exit(127);
  }
  int fork_errno = errno;
  close(log);
  close(null_in);
  close(err_pipe[1]);
  if (pid < 0) {
    close(err_pipe[0]);
    return absl::FailedPreconditionError(absl::StrCat("fork: ", strerror(fork_errno)));
  }
  setpgid(pid, pid);  // also in the parent: no race with a kill(-pid) right after
  int child_errno = 0;
  ssize_t n;
  do {
    n = read(err_pipe[0], &child_errno, sizeof(child_errno));
  } while (n < 0 && errno == EINTR);
  close(err_pipe[0]);
  if (n == sizeof(child_errno)) {
    waitpid(pid, nullptr, 0);
    std::string msg = absl::StrCat("exec ", argv[0], ": ", strerror(child_errno));
    if (child_errno == ENOENT) return absl::NotFoundError(msg);
    if (child_errno == EACCES) return absl::PermissionDeniedError(msg);
    return absl::UnknownError(msg);
  }
  return pid;
}

std::string FileTail(const std::string& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::StrCat("(cannot read ", path, ")");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  if (s.size() <= max_bytes) return s;
  s = s.substr(s.size() - max_bytes);
  size_t nl = s.find('\n');
  if (nl != std::string::npos && nl + 1 < s.size()) s = s.substr(nl + 1);
  return absl::StrCat("...\n", s);
}

std::string DescribeWaitStatus(int wait_status) {
  if (WIFEXITED(wait_status)) return absl::StrCat("exit status ", WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    return absl::StrCat("killed by signal ", WTERMSIG(wait_status), " (",
                        strsignal(WTERMSIG(wait_status)), ")");
  }
  return absl::StrCat("wait status ", wait_status);
}

absl::StatusOr<std::string> FindExecutable(const std::string& name, const std::string& package) {
  namespace fs = std::filesystem;
  std::vector<fs::path> tried;
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    tried.push_back(exe.parent_path() / name);
    fs::path dir = exe.parent_path();
    for (int up = 0; up < 4 && dir.has_parent_path() && dir != dir.root_path(); ++up) {
      dir = dir.parent_path();
      tried.push_back(dir / package / name);
    }
  }
  tried.push_back(fs::path("bazel-bin") / package / name);
  for (const fs::path& p : tried) {
    if (access(p.c_str(), X_OK) == 0 && fs::is_regular_file(p, ec)) return fs::absolute(p).string();
  }
  std::vector<std::string> names;
  for (const fs::path& p : tried) names.push_back(p.string());
  return absl::NotFoundError(absl::StrCat("no executable ", name, " (tried ", absl::StrJoin(names, ", "),
                                          "); build it with bazel build //", package, ":", name));
}

}  // namespace kvcast::cluster
