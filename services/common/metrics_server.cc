#include "services/common/metrics_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "services/common/flags_util.h"
#include "services/common/internal/listen_socket.h"

namespace kvcast::services {

struct MetricsServer::Connection {
  enum State { kReading, kWriting, kDraining };
  int fd;
  absl::Time deadline;
  State state = kReading;
  std::string in, out;
  size_t sent = 0;
};

namespace {

std::string HttpResponse(int code, const char* reason, const std::string& content_type,
                         const std::string& body, const std::string& extra_headers = "") {
  return absl::StrCat("HTTP/1.1 ", code, " ", reason, "\r\nContent-Type: ", content_type,
                      "\r\nContent-Length: ", body.size(), "\r\n", extra_headers,
                      "Connection: close\r\n\r\n", body);
}

std::string Plain(int code, const char* reason) {
  return HttpResponse(code, reason, "text/plain; charset=utf-8",
                      absl::StrCat(code, " ", reason, "\n"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& host_port, const MetricsRegistry* registry,
    const MetricsServerOptions& options) {
  ASSIGN_OR_RETURN(auto host_and_port, ParseListen(host_port));
  ASSIGN_OR_RETURN(int fd,
                   internal::ListenTcp(host_and_port.first, host_and_port.second, host_port));
  uint16_t port = internal::LocalPort(fd);
  int wake[2];
  if (port == 0 || pipe2(wake, O_NONBLOCK | O_CLOEXEC) != 0) {
    absl::Status status = absl::ErrnoToStatus(errno, "metrics server setup");
    close(fd);
    return status;
  }
  return std::unique_ptr<MetricsServer>(
      new MetricsServer(fd, wake[0], wake[1], port, registry, options));
}

MetricsServer::MetricsServer(int listen_fd, int wake_read, int wake_write, uint16_t port,
                             const MetricsRegistry* registry,
                             const MetricsServerOptions& options)
    : listen_fd_(listen_fd),
      wake_read_(wake_read),
      wake_write_(wake_write),
      port_(port),
      registry_(registry),
      options_(options) {
  thread_ = std::thread([this] { Loop(); });
}

MetricsServer::~MetricsServer() {
  char byte = 1;
  while (write(wake_write_, &byte, 1) < 0 && errno == EINTR) {
  }
  thread_.join();
  close(listen_fd_);
  close(wake_read_);
  close(wake_write_);
}

std::string MetricsServer::Respond(const std::string& request) const {
  size_t head_end = request.find("\r\n\r\n");
  if (head_end == std::string::npos) return Plain(431, "Request Header Fields Too Large");
  std::string line = request.substr(0, request.find("\r\n"));
  size_t sp1 = line.find(' ');
  size_t sp2 = sp1 == std::string::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp1 == 0 || sp2 == std::string::npos || line.find(' ', sp2 + 1) != std::string::npos ||
      line.compare(sp2 + 1, 7, "HTTP/1.") != 0 || sp2 == sp1 + 1) {
    return Plain(400, "Bad Request");
  }
  std::string method = line.substr(0, sp1);
  std::string path = line.substr(sp1 + 1, sp2 - sp1 - 1);
  path = path.substr(0, path.find('?'));
  if (method != "GET") {
    return HttpResponse(405, "Method Not Allowed", "text/plain; charset=utf-8",
                        "405 Method Not Allowed\n", "Allow: GET\r\n");
  }
  if (path == "/metrics") {
    return HttpResponse(200, "OK", "text/plain; version=0.0.4; charset=utf-8",
                        registry_->Render());
  }
  if (path == "/healthz") return HttpResponse(200, "OK", "text/plain; charset=utf-8", "ok");
  return Plain(404, "Not Found");
}

void MetricsServer::Loop() {
  std::vector<Connection> conns;
  std::vector<pollfd> fds;
  char buf[4096];
  for (;;) {
    absl::Time now = absl::Now();
    // Close expired connections; the nearest deadline bounds the poll.
    absl::Time next = now + absl::Hours(1);
    for (auto it = conns.begin(); it != conns.end();) {
      if (it->deadline <= now) {
        close(it->fd);
        it = conns.erase(it);
      } else {
        next = std::min(next, it->deadline);
        ++it;
      }
    }
    fds.clear();
    fds.push_back({wake_read_, POLLIN, 0});
    bool accepting = static_cast<int>(conns.size()) < options_.max_connections;
    fds.push_back({accepting ? listen_fd_ : -1, POLLIN, 0});
    for (const Connection& c : conns) {
      fds.push_back({c.fd, static_cast<short>(c.state == Connection::kWriting ? POLLOUT : POLLIN),
                     0});
    }
    int timeout_ms = static_cast<int>(absl::ToInt64Milliseconds(next - now)) + 1;
    if (poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) break;
    if (fds[0].revents != 0) break;  // Stop requested.

    // Service existing connections first (indices match fds[2..]).
    size_t n = conns.size();
    std::vector<bool> done(n, false);
    for (size_t i = 0; i < n; ++i) {
      Connection& c = conns[i];
      short ev = fds[i + 2].revents;
      if (ev == 0) continue;
      if (c.state != Connection::kWriting) {
        ssize_t r;
        while ((r = recv(c.fd, buf, sizeof(buf), 0)) > 0) {
          if (c.state != Connection::kReading) continue;
          c.in.append(buf, r);
          if (c.in.size() > options_.max_request_bytes) break;
        }
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
          done[i] = true;  // Peer closed (or error) before or after the response.
          continue;
        }
        if (c.state == Connection::kReading &&
            (c.in.find("\r\n\r\n") != std::string::npos ||
             c.in.size() > options_.max_request_bytes)) {
          if (c.in.size() > options_.max_request_bytes &&
              c.in.find("\r\n\r\n") >= options_.max_request_bytes) {
            c.in.clear();  // Respond() answers 431 for a head without its end.
          }
          c.out = Respond(c.in);
          c.in.clear();
          c.state = Connection::kWriting;
        }
      }
      if (c.state == Connection::kWriting) {
        while (c.sent < c.out.size()) {
          ssize_t w = send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent,
                           MSG_NOSIGNAL | MSG_DONTWAIT);
          if (w > 0) {
            c.sent += w;
          } else if (w < 0 && errno == EINTR) {
            continue;
          } else {
            if (errno != EAGAIN) done[i] = true;
            break;
          }
        }
        if (c.sent == c.out.size()) {
          // Lingering close: half-close, then read until the client closes
          // (or the deadline) so unread input cannot turn into an RST that
          // would discard the response.
          shutdown(c.fd, SHUT_WR);
          c.state = Connection::kDraining;
        }
      }
    }
    for (size_t i = n; i-- > 0;) {
      if (done[i]) {
        close(conns[i].fd);
        conns.erase(conns.begin() + i);
      }
    }
    if (accepting && fds[1].revents != 0) {
      while (static_cast<int>(conns.size()) < options_.max_connections) {
        int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break;  // EAGAIN, or a transient accept error.
        conns.push_back({fd, absl::Now() + options_.connection_timeout});
      }
    }
  }
  for (Connection& c : conns) close(c.fd);
}

}  // namespace kvcast::services
