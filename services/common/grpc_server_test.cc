#include "services/common/grpc_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/common/internal/grpc_test_util.h"

namespace kvcast::services {
namespace {

using ::testing::HasSubstr;
using testing::HealthCheck;
using testing::RawCall;
using testing::SleepService;

std::shared_ptr<grpc::Channel> Insecure(int port) {
  return MakeChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials());
}

std::unique_ptr<GrpcServer> MustStart(SleepService* service) {
  GrpcServerOptions options;
  options.listen = "127.0.0.1:0";
  auto server = GrpcServer::Start(options, {{SleepService::kName, service}});
  EXPECT_TRUE(server.ok()) << server.status();
  if (!server.ok()) return nullptr;
  EXPECT_GT((*server)->port(), 0);
  EXPECT_FALSE((*server)->tls());
  return std::move(*server);
}

TEST(GrpcServerTest, HealthServiceFollowsSetServingAndShutdown) {
  SleepService service;
  auto server = MustStart(&service);
  ASSERT_NE(server, nullptr);
  auto channel = Insecure(server->port());
  for (const std::string name : {"", SleepService::kName}) {
    auto [status, serving] = HealthCheck(channel, name);
    EXPECT_TRUE(status.ok()) << name << ": " << status.error_message();
    EXPECT_EQ(serving, testing::kServing) << name;
  }
  EXPECT_EQ(HealthCheck(channel, "no.Such").first.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(RawCall(channel, SleepService::kMethod, "1", absl::Seconds(5)).response, "done");

  server->SetServing(false);
  EXPECT_EQ(HealthCheck(channel, "").second, testing::kNotServing);
  EXPECT_EQ(HealthCheck(channel, SleepService::kName).second, testing::kNotServing);
  server->SetServing(true);
  EXPECT_EQ(HealthCheck(channel, SleepService::kName).second, testing::kServing);

  server->Shutdown(absl::Seconds(1));
  server->SetServing(true);  // No effect, no crash.
  server->Shutdown(absl::Seconds(1));  // Idempotent.
  auto [status, serving] = HealthCheck(channel, "", absl::Seconds(2));
  EXPECT_FALSE(status.ok());
  EXPECT_NE(serving, testing::kServing);
}

TEST(GrpcServerTest, ShutdownDrainsCallsWithinGrace) {
  SleepService service;
  auto server = MustStart(&service);
  ASSERT_NE(server, nullptr);
  auto channel = Insecure(server->port());
  testing::CallResult result;
  std::thread call([&] { result = RawCall(channel, SleepService::kMethod, "400", absl::Seconds(10)); });
  while (service.started == 0) absl::SleepFor(absl::Milliseconds(2));
  absl::Time start = absl::Now();
  server->Shutdown(absl::Seconds(5));
  absl::Duration took = absl::Now() - start;
  call.join();
  EXPECT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_EQ(result.response, "done");
  EXPECT_GE(took, absl::Milliseconds(300));
  EXPECT_LT(took, absl::Seconds(3));
}

TEST(GrpcServerTest, ShutdownCancelsCallsAfterGrace) {
  SleepService service;
  auto server = MustStart(&service);
  ASSERT_NE(server, nullptr);
  auto channel = Insecure(server->port());
  testing::CallResult result;
  std::thread call([&] { result = RawCall(channel, SleepService::kMethod, "-1", absl::Seconds(20)); });
  while (service.started == 0) absl::SleepFor(absl::Milliseconds(2));
  absl::Time start = absl::Now();
  server->Shutdown(absl::Milliseconds(200));
  absl::Duration took = absl::Now() - start;
  call.join();
  EXPECT_FALSE(result.status.ok());
  EXPECT_GE(took, absl::Milliseconds(150));
  EXPECT_LT(took, absl::Seconds(3));
}

// Forwards TCP between a client and `target_port` until Freeze(), after
// which it neither reads nor writes nor closes: a peer that vanished
// without a FIN or RST (host down, cable cut).
class FreezableProxy {
 public:
  explicit FreezableProxy(int target_port) : target_port_(target_port) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a = Loopback(0);
    EXPECT_EQ(bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(listen(listen_fd_, 8), 0);
    socklen_t len = sizeof(a);
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { Run(); });
  }
  ~FreezableProxy() {
    stop_ = true;
    thread_.join();
    for (int fd : fds_) close(fd);
    close(listen_fd_);
  }
  int port() const { return port_; }
  void Freeze() { frozen_ = true; }

 private:
  static sockaddr_in Loopback(int port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
  }
  void Run() {
    char buf[16384];
    while (!stop_) {
      std::vector<pollfd> p = {{listen_fd_, POLLIN, 0}};
      if (!frozen_) {
        for (int fd : fds_) p.push_back({fd, POLLIN, 0});
      }
      if (poll(p.data(), p.size(), 20) <= 0) continue;
      if (p[0].revents & POLLIN) {
        int client = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        int upstream = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in a = Loopback(target_port_);
        connect(upstream, reinterpret_cast<sockaddr*>(&a), sizeof(a));
        fds_.push_back(client);
        fds_.push_back(upstream);  // Pairs: fds_[2k] <-> fds_[2k+1].
      }
      for (size_t i = 1; i < p.size(); ++i) {
        if (!(p[i].revents & (POLLIN | POLLHUP))) continue;
        ssize_t n = recv(p[i].fd, buf, sizeof(buf), 0);
        if (n > 0) send(fds_[(i - 1) ^ 1], buf, n, MSG_NOSIGNAL);
      }
    }
  }
  const int target_port_;
  int listen_fd_, port_;
  std::vector<int> fds_;  // Only touched by the thread until it is joined.
  std::atomic<bool> stop_{false}, frozen_{false};
  std::thread thread_;
};

TEST(MakeChannelTest, KeepaliveFailsACallToAVanishedPeerWithinSeconds) {
  SleepService service;
  auto server = MustStart(&service);
  ASSERT_NE(server, nullptr);
  FreezableProxy proxy(server->port());
  auto channel = Insecure(proxy.port());
  ASSERT_EQ(HealthCheck(channel, "").second, testing::kServing);
  testing::CallResult result;
  absl::Time start;
  std::thread call([&] {
    start = absl::Now();
    result = RawCall(channel, SleepService::kMethod, "-1", absl::Seconds(30));
  });
  while (service.started == 0) absl::SleepFor(absl::Milliseconds(2));
  proxy.Freeze();
  call.join();
  absl::Duration took = absl::Now() - start;
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << result.status.error_message();
  EXPECT_LT(took, absl::Seconds(15)) << "keepalive did not notice the dead peer";
  server->Shutdown(absl::ZeroDuration());
}

std::string WriteFile(const std::string& name, const std::string& content) {
  const char* dir = std::getenv("TEST_TMPDIR");
  std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
  std::ofstream(path) << content;
  return path;
}

absl::Status StartError(const GrpcServerOptions& options) {
  auto server = GrpcServer::Start(options, {});
  return server.ok() ? absl::OkStatus() : server.status();
}

TEST(GrpcServerStartTest, ClearErrors) {
  GrpcServerOptions o;
  o.listen = "127.0.0.1";
  EXPECT_EQ(StartError(o).code(), absl::StatusCode::kInvalidArgument);
  o.listen = "127.0.0.1:0";
  o.cert_file = WriteFile("cert.pem", "-----BEGIN CERTIFICATE-----\n");
  absl::Status s = StartError(o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("key_file"));
  o.cert_file.clear();
  o.ca_file = WriteFile("ca.pem", "x");
  EXPECT_EQ(StartError(o).code(), absl::StatusCode::kInvalidArgument);
  o.ca_file.clear();
  o.cert_file = "/nonexistent/server.pem";
  o.key_file = WriteFile("key.pem", "-----BEGIN PRIVATE KEY-----\n");
  s = StartError(o);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("cert_file /nonexistent/server.pem"));
  o.cert_file = WriteFile("notpem.pem", "hello");
  s = StartError(o);
  EXPECT_THAT(std::string(s.message()), HasSubstr(o.cert_file + " is not a PEM file"));

  SleepService service;
  auto first = MustStart(&service);
  ASSERT_NE(first, nullptr);
  GrpcServerOptions taken;
  taken.listen = absl::StrCat("127.0.0.1:", first->port());
  s = StartError(taken);
  EXPECT_THAT(std::string(s.message()), HasSubstr("bind " + taken.listen)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("ddress already in use")) << s;
}

TEST(ClientCredentialsTest, InsecureWhenEmptyAndErrorsForHalfPairs) {
  auto creds = ClientCredentials("", "", "");
  ASSERT_TRUE(creds.ok());
  EXPECT_NE(*creds, nullptr);
  EXPECT_EQ(ClientCredentials("a.pem", "", "").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(ClientCredentials("", "", "/nonexistent/ca.pem").status().message()),
              HasSubstr("/nonexistent/ca.pem"));
}

}  // namespace
}  // namespace kvcast::services
