#include "tools/cluster/metrics_scrape.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace kvcast::cluster {
namespace {

constexpr char kText[] = R"(# HELP kvcast_workers Registered workers.
# TYPE kvcast_workers gauge
kvcast_workers{role="prefill"} 2
kvcast_workers{role="decode"} 1
# TYPE kvcast_prefill_tokens_total counter
kvcast_prefill_tokens_total{origin="computed",worker="p-0"} 1024
kvcast_prefill_tokens_total{origin="cached",worker="p-0"} 256
kvcast_prefill_tokens_total{origin="cached",worker="p-1"} 128 1700000000000
kvcast_kv_pages_used 17
kvcast_kv_pages_total 4.096e3
kvcast_kv_pages_used_ratio 0.5
kvcast_odd{path="a\"b\\c,d}"} 3
kvcast_ttft_seconds_bucket{le="+Inf"} 5
kvcast_inf +Inf
)";

TEST(ScrapeMetricTest, ExactLabels) {
  EXPECT_EQ(*ScrapeMetric(kText, "kvcast_workers", {{"role", "prefill"}}), 2);
  EXPECT_EQ(*ScrapeMetric(kText, "kvcast_workers", {{"role", "decode"}}), 1);
}

TEST(ScrapeMetricTest, SumsSeriesMatchingALabelSubset) {
  EXPECT_EQ(*ScrapeMetric(kText, "kvcast_workers"), 3);
  EXPECT_EQ(*ScrapeMetric(kText, "kvcast_prefill_tokens_total", {{"origin", "cached"}}), 384);
  EXPECT_EQ(*ScrapeMetric(kText, "kvcast_prefill_tokens_total",
                          {{"origin", "cached"}, {"worker", "p-1"}}),
            128);
}

TEST(ScrapeMetricTest, NoLabelsAndNamePrefixes) {
  EXPECT_EQ(*ScrapeMetric(kText, "kvcast_kv_pages_used"), 17);  // not _ratio
  EXPECT_EQ(*ScrapeMetric(kText, "kvcast_kv_pages_total"), 4096);
  EXPECT_TRUE(std::isinf(*ScrapeMetric(kText, "kvcast_inf")));
}

TEST(ScrapeMetricTest, EscapedLabelValues) {
  EXPECT_EQ(*ScrapeMetric(kText, "kvcast_odd", {{"path", "a\"b\\c,d}"}}), 3);
  EXPECT_EQ(*ScrapeMetric(kText, "kvcast_ttft_seconds_bucket", {{"le", "+Inf"}}), 5);
}

TEST(ScrapeMetricTest, Errors) {
  EXPECT_EQ(ScrapeMetric(kText, "kvcast_missing").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ScrapeMetric(kText, "kvcast_workers", {{"role", "relay"}}).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(ScrapeMetric(kText, "kvcast_kv_pages").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ScrapeMetric("bad{x=\"1\" 2\n", "bad").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ScrapeMetric("bad 1x\n", "bad").status().code(), absl::StatusCode::kInvalidArgument);
}

// A one-shot HTTP server on 127.0.0.1 answering `response` to one client.
class OneShotServer {
 public:
  explicit OneShotServer(std::string response) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    socklen_t len = sizeof(a);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    listen(fd_, 1);
    thread_ = std::thread([this, response] {
      int c = accept(fd_, nullptr, nullptr);
      char buf[4096];
      std::string req;
      while (req.find("\r\n\r\n") == std::string::npos) {
        ssize_t n = read(c, buf, sizeof(buf));
        if (n <= 0) break;
        req.append(buf, size_t(n));
      }
      request_ = req;
      (void)!write(c, response.data(), response.size());
      close(c);
    });
  }
  ~OneShotServer() {
    thread_.join();
    close(fd_);
  }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  const std::string& request() const { return request_; }

 private:
  int fd_;
  int port_;
  std::thread thread_;
  std::string request_;
};

TEST(HttpGetTest, ReturnsBodyOf200) {
  std::string body;
  {
    OneShotServer server("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello");
    auto got = HttpGet(server.address(), "/metrics");
    ASSERT_TRUE(got.ok()) << got.status();
    body = *got;
  }
  EXPECT_EQ(body, "hello");
}

TEST(HttpGetTest, Non200IsAnError) {
  OneShotServer server("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
  auto got = HttpGet(server.address(), "/nope");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnknown);
  EXPECT_NE(got.status().message().find("404"), absl::string_view::npos);
}

TEST(HttpGetTest, BadAddressAndRefusedConnection) {
  EXPECT_EQ(HttpGet("nope", "/").status().code(), absl::StatusCode::kInvalidArgument);
  // Find a port nobody listens on.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  EXPECT_EQ(HttpGet(absl::StrCat("127.0.0.1:", ntohs(a.sin_port)), "/").status().code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace kvcast::cluster
