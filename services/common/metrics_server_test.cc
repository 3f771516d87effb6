#include "services/common/metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvcast::services {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

int Connect(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << strerror(errno);
  return fd;
}

// Reads until EOF; "<timeout>" appended if the server kept it open 5 s.
std::string ReadAll(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 5000) <= 0) return out + "<timeout>";
    ssize_t r = recv(fd, buf, sizeof(buf), 0);
    if (r <= 0) return out;
    out.append(buf, r);
  }
}

std::string Exchange(uint16_t port, const std::string& request) {
  int fd = Connect(port);
  EXPECT_EQ(send(fd, request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  std::string response = ReadAll(fd);
  close(fd);
  return response;
}

std::string Body(const std::string& response) {
  size_t p = response.find("\r\n\r\n");
  return p == std::string::npos ? "<no head end>" : response.substr(p + 4);
}

class MetricsServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    registry_.AddCounter("kvcast_requests_total", "Requests.", {{"role", "prefill"}})
        ->Increment(3);
    registry_.AddHistogram("kvcast_step_seconds", "Step.", {0.01, 0.1})->Observe(0.05);
    auto server = MetricsServer::Start("127.0.0.1:0", &registry_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    ASSERT_NE(server_->port(), 0);
  }
  MetricsRegistry registry_;
  std::unique_ptr<MetricsServer> server_;
};

TEST_F(MetricsServerTest, ServesMetrics) {
  std::string r = Exchange(server_->port(),
                           "GET /metrics?format=text HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n");
  EXPECT_THAT(r, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(r, HasSubstr("\r\nContent-Type: text/plain; version=0.0.4"));
  EXPECT_THAT(r, HasSubstr("\r\nConnection: close\r\n"));
  std::string body = Body(r);
  EXPECT_EQ(body, registry_.Render());
  EXPECT_THAT(r, HasSubstr(absl::StrCat("\r\nContent-Length: ", body.size(), "\r\n")));
  EXPECT_THAT(body, HasSubstr("kvcast_requests_total{role=\"prefill\"} 3\n"));
  EXPECT_THAT(body, HasSubstr("kvcast_step_seconds_bucket{le=\"0.1\"} 1\n"));
}

TEST_F(MetricsServerTest, HealthzNotFoundAndMethodNotAllowed) {
  std::string r = Exchange(server_->port(), "GET /healthz HTTP/1.0\r\n\r\n");
  EXPECT_THAT(r, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_EQ(Body(r), "ok");
  EXPECT_THAT(Exchange(server_->port(), "GET /metricsx HTTP/1.1\r\n\r\n"),
              StartsWith("HTTP/1.1 404 Not Found\r\n"));
  r = Exchange(server_->port(), "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
  EXPECT_THAT(r, StartsWith("HTTP/1.1 405 Method Not Allowed\r\n"));
  EXPECT_THAT(r, HasSubstr("\r\nAllow: GET\r\n"));
}

TEST_F(MetricsServerTest, RejectsGarbageAndOversizedRequests) {
  for (const char* bad : {"hello\r\n\r\n", "GET /metrics\r\n\r\n", "GET  HTTP/1.1\r\n\r\n",
                          "GET /metrics SPDY/3\r\n\r\n", "GET / x HTTP/1.1\r\n\r\n"}) {
    EXPECT_THAT(Exchange(server_->port(), bad), StartsWith("HTTP/1.1 400 Bad Request\r\n"))
        << bad;
  }
  // 9 KiB of header without its end: answered 431 (the lingering close keeps
  // the unread rest from resetting the connection before the client reads it).
  std::string huge = "GET /metrics HTTP/1.1\r\nX-Pad: " + std::string(9000, 'a');
  EXPECT_THAT(Exchange(server_->port(), huge),
              StartsWith("HTTP/1.1 431 Request Header Fields Too Large\r\n"));
  // Still serving.
  EXPECT_THAT(Exchange(server_->port(), "GET /healthz HTTP/1.1\r\n\r\n"),
              StartsWith("HTTP/1.1 200 OK\r\n"));
}

TEST(MetricsServerTimeoutTest, ClosesIdleAndSlowConnectionsAndStaysAvailable) {
  MetricsRegistry registry;
  MetricsServerOptions options;
  options.connection_timeout = absl::Milliseconds(300);
  options.max_connections = 8;
  auto server = MetricsServer::Start("127.0.0.1:0", &registry, options);
  ASSERT_TRUE(server.ok()) << server.status();
  uint16_t port = (*server)->port();

  absl::Time start = absl::Now();
  int slow = Connect(port);
  ASSERT_EQ(send(slow, "GET /metr", 9, MSG_NOSIGNAL), 9);
  EXPECT_EQ(ReadAll(slow), "");  // Closed without a response, not timed out.
  absl::Duration took = absl::Now() - start;
  EXPECT_GE(took, absl::Milliseconds(250));
  EXPECT_LT(took, absl::Seconds(3));
  close(slow);

  // More idle clients than max_connections: a real request still gets served
  // once the idle ones time out.
  std::vector<int> idle;
  for (int i = 0; i < 12; ++i) idle.push_back(Connect(port));
  start = absl::Now();
  EXPECT_THAT(Exchange(port, "GET /healthz HTTP/1.1\r\n\r\n"),
              StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(4));
  for (int fd : idle) close(fd);

  // Destruction is prompt even with a client connected.
  int pending = Connect(port);
  start = absl::Now();
  server->reset();
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(200));
  close(pending);
}

TEST(MetricsServerStartTest, ReportsBadAddressesAndBindConflicts) {
  MetricsRegistry registry;
  auto bad = MetricsServer::Start("nonsense", &registry);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("nonsense"));

  auto first = MetricsServer::Start("127.0.0.1:0", &registry);
  ASSERT_TRUE(first.ok()) << first.status();
  std::string taken = absl::StrCat("127.0.0.1:", (*first)->port());
  auto second = MetricsServer::Start(taken, &registry);
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("bind " + taken));
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("ddress already in use"));
}

TEST(MetricsServerStartTest, WildcardAddressesAcceptIpv4) {
  MetricsRegistry registry;
  for (const char* listen : {"0.0.0.0:0", "[::]:0"}) {
    auto server = MetricsServer::Start(listen, &registry);
    if (!server.ok() && std::string(listen) == "[::]:0") {
      GTEST_SKIP() << "no IPv6 here: " << server.status();
    }
    ASSERT_TRUE(server.ok()) << listen << ": " << server.status();
    EXPECT_THAT(Exchange((*server)->port(), "GET /healthz HTTP/1.1\r\n\r\n"),
                StartsWith("HTTP/1.1 200 OK\r\n"))
        << listen;
  }
}

}  // namespace
}  // namespace kvcast::services
