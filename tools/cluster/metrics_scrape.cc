#include "tools/cluster/metrics_scrape.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace kvcast::cluster {
namespace {

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

// Milliseconds left until `deadline`, at least 0.
int MsLeft(absl::Time deadline) {
  return int(std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now())));
}

absl::Status WaitFd(int fd, short events, absl::Time deadline, const std::string& what) {
  for (;;) {
    pollfd p{fd, events, 0};
    int n = poll(&p, 1, MsLeft(deadline));
    if (n > 0) return absl::OkStatus();
    if (n == 0) return absl::DeadlineExceededError(absl::StrCat(what, ": timed out"));
    if (errno != EINTR) return absl::UnavailableError(absl::StrCat(what, ": poll: ", strerror(errno)));
  }
}

}  // namespace

absl::StatusOr<std::string> HttpGet(const std::string& host_port, const std::string& path,
                                    absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  size_t colon = host_port.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == host_port.size()) {
    return absl::InvalidArgumentError(absl::StrCat("'", host_port, "' is not HOST:PORT"));
  }
  std::string host = host_port.substr(0, colon), port = host_port.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    return absl::UnavailableError(absl::StrCat("resolve ", host_port, ": ", gai_strerror(rc)));
  }
  Fd s;
  std::string connect_error = "no address";
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    Fd c;
    c.fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (c.fd < 0) continue;
    if (connect(c.fd, a->ai_addr, a->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        connect_error = strerror(errno);
        continue;
      }
      absl::Status w = WaitFd(c.fd, POLLOUT, deadline, "connect " + host_port);
      if (!w.ok()) {
        freeaddrinfo(res);
        return w;
      }
      int err = 0;
      socklen_t len = sizeof(err);
      getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        connect_error = strerror(err);
        continue;
      }
    }
    std::swap(s.fd, c.fd);
    break;
  }
  freeaddrinfo(res);
  if (s.fd < 0) return absl::UnavailableError(absl::StrCat("connect ", host_port, ": ", connect_error));

  const std::string request = absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: ", host_port,
                                           "\r\nConnection: close\r\n\r\n");
  for (size_t sent = 0; sent < request.size();) {
    ssize_t n = send(s.fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += size_t(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      absl::Status w = WaitFd(s.fd, POLLOUT, deadline, "send to " + host_port);
      if (!w.ok()) return w;
    } else {
      return absl::UnavailableError(absl::StrCat("send to ", host_port, ": ", strerror(errno)));
    }
  }
  std::string response;
  char buf[16384];
  for (;;) {
    ssize_t n = recv(s.fd, buf, sizeof(buf), 0);
    if (n > 0) {
      response.append(buf, size_t(n));
    } else if (n == 0) {
      break;
    } else if (errno == EAGAIN || errno == EINTR) {
      absl::Status w = WaitFd(s.fd, POLLIN, deadline, "read from " + host_port);
      if (!w.ok()) return w;
    } else {
      return absl::UnavailableError(absl::StrCat("read from ", host_port, ": ", strerror(errno)));
    }
  }
  size_t head_end = response.find("\r\n\r\n");
  if (head_end == std::string::npos) {
    return absl::UnknownError(absl::StrCat("GET ", host_port, path, ": malformed response"));
  }
  const std::string head = response.substr(0, head_end);
  std::string body = response.substr(head_end + 4);
  std::vector<std::string> lines = absl::StrSplit(head, "\r\n");
  const std::string& status_line = lines[0];
  std::vector<std::string> parts = absl::StrSplit(status_line, ' ');
  if (parts.size() < 2 || !absl::StartsWith(parts[0], "HTTP/") || parts[1] != "200") {
    return absl::UnknownError(absl::StrCat("GET ", host_port, path, ": ", status_line));
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    size_t c = lines[i].find(':');
    if (c == std::string::npos) continue;
    if (!absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(lines[i].substr(0, c)), "content-length")) continue;
    size_t length;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(lines[i].substr(c + 1)), &length) &&
        length < body.size()) {
      body.resize(length);
    }
  }
  return body;
}

namespace {

// Parses `{k="v",...}` at text[*pos] (which is '{'); advances *pos past '}'.
bool ParseLabels(absl::string_view text, size_t* pos, Labels* out) {
  size_t i = *pos + 1;
  for (;;) {
    while (i < text.size() && (text[i] == ' ' || text[i] == ',')) ++i;
    if (i >= text.size()) return false;
    if (text[i] == '}') break;
    size_t eq = text.find('=', i);
    if (eq == absl::string_view::npos || eq + 1 >= text.size() || text[eq + 1] != '"') return false;
    std::string key(absl::StripAsciiWhitespace(text.substr(i, eq - i)));
    std::string value;
    size_t j = eq + 2;
    for (; j < text.size() && text[j] != '"'; ++j) {
      if (text[j] == '\\' && j + 1 < text.size()) {
        ++j;
        value.push_back(text[j] == 'n' ? '\n' : text[j]);
      } else {
        value.push_back(text[j]);
      }
    }
    if (j >= text.size()) return false;
    out->emplace_back(std::move(key), std::move(value));
    i = j + 1;
  }
  *pos = i + 1;
  return true;
}

bool ParseValue(absl::string_view s, double* v) {
  if (s == "+Inf" || s == "Inf") {
    *v = HUGE_VAL;
  } else if (s == "-Inf") {
    *v = -HUGE_VAL;
  } else if (s == "NaN") {
    *v = std::nan("");
  } else {
    return absl::SimpleAtod(s, v);
  }
  return true;
}

}  // namespace

absl::StatusOr<double> ScrapeMetric(absl::string_view text, absl::string_view name,
                                    const Labels& labels) {
  double sum = 0;
  bool found = false;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#' || !absl::StartsWith(line, name)) continue;
    size_t pos = name.size();
    if (pos < line.size() && line[pos] != '{' && line[pos] != ' ' && line[pos] != '\t') continue;
    Labels have;
    if (pos < line.size() && line[pos] == '{' && !ParseLabels(line, &pos, &have)) {
      return absl::InvalidArgumentError(absl::StrCat("malformed sample: ", std::string(line)));
    }
    std::vector<absl::string_view> rest =
        absl::StrSplit(line.substr(std::min(pos, line.size())), absl::ByAnyChar(" \t"), absl::SkipEmpty());
    double v;
    if (rest.empty() || !ParseValue(rest[0], &v)) {
      return absl::InvalidArgumentError(absl::StrCat("malformed sample: ", std::string(line)));
    }
    bool match = true;
    for (const auto& want : labels) {
      bool hit = false;
      for (const auto& h : have) hit = hit || h == want;
      match = match && hit;
    }
    if (!match) continue;
    sum += v;
    found = true;
  }
  if (!found) {
    std::string want;
    for (const auto& [k, v] : labels) absl::StrAppend(&want, want.empty() ? "" : ",", k, "=\"", v, "\"");
    return absl::NotFoundError(absl::StrCat("no sample ", std::string(name), "{", want, "}"));
  }
  return sum;
}

}  // namespace kvcast::cluster
