// GrpcServer and ClientCredentials over TLS and mutual TLS, with
// certificates made at run time by tools/devcert (a CA, a server certificate
// for localhost/127.0.0.1 and a client certificate).
#include <cstdlib>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/common/grpc_server.h"
#include "services/common/internal/grpc_test_util.h"
#include "tools/devcert/devcert.h"

namespace kvcast::services {
namespace {

using testing::HealthCheck;

class GrpcTlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* tmp = std::getenv("TEST_TMPDIR");
    devcert::DevCertOptions o;
    o.out_dir = std::string(tmp != nullptr ? tmp : "/tmp") + "/grpc_tls_certs";
    o.client_name = "kvcast-scheduler";
    o.reuse_ca = false;
    absl::Status s = devcert::WriteDevCertificates(o);
    ASSERT_TRUE(s.ok()) << s;
    paths_ = new devcert::DevCertPaths(devcert::PathsIn(o.out_dir));
  }
  static void TearDownTestSuite() { delete paths_; }

  std::unique_ptr<GrpcServer> Start(bool require_client_cert) {
    GrpcServerOptions o;
    o.listen = "127.0.0.1:0";
    o.cert_file = paths_->server_cert;
    o.key_file = paths_->server_key;
    if (require_client_cert) o.ca_file = paths_->ca_cert;
    auto server = GrpcServer::Start(o, {});
    EXPECT_TRUE(server.ok()) << server.status();
    if (!server.ok()) return nullptr;
    EXPECT_TRUE((*server)->tls());
    return std::move(*server);
  }

  // Health/Check over a channel with these client credentials files.
  int Check(const GrpcServer& server, const std::string& cert, const std::string& key,
            const std::string& ca, const std::string& tls_name = "") {
    auto creds = ClientCredentials(cert, key, ca);
    EXPECT_TRUE(creds.ok()) << creds.status();
    auto channel = MakeChannel(absl::StrCat("127.0.0.1:", server.port()), *creds, tls_name);
    return HealthCheck(channel, "", absl::Seconds(5)).second;
  }

  static devcert::DevCertPaths* paths_;
};
devcert::DevCertPaths* GrpcTlsTest::paths_ = nullptr;

TEST_F(GrpcTlsTest, ServerTlsVerifiedByTheCa) {
  auto server = Start(false);
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(Check(*server, "", "", paths_->ca_cert), testing::kServing);
  // A plaintext client, or one trusting another CA (the server's own leaf
  // is not a CA), cannot talk to it.
  EXPECT_EQ(Check(*server, "", "", ""), -1);
  EXPECT_EQ(Check(*server, "", "", paths_->client_cert), -1);
}

// Workers are called at pod IPs: the name checked can be set apart from the
// address (the scheduler's --worker_tls_name).
TEST_F(GrpcTlsTest, NameCheckedCanDifferFromTheAddress) {
  auto server = Start(false);
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(Check(*server, "", "", paths_->ca_cert, "localhost"), testing::kServing);
  EXPECT_EQ(Check(*server, "", "", paths_->ca_cert, "kvcast-worker"), -1);
}

TEST_F(GrpcTlsTest, MutualTlsRequiresAClientCertificate) {
  auto server = Start(true);
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(Check(*server, paths_->client_cert, paths_->client_key, paths_->ca_cert),
            testing::kServing);
  EXPECT_EQ(Check(*server, "", "", paths_->ca_cert), -1);
}

TEST_F(GrpcTlsTest, MismatchedKeyIsAnError) {
  GrpcServerOptions o;
  o.listen = "127.0.0.1:0";
  o.cert_file = paths_->server_cert;
  o.key_file = paths_->client_key;
  auto server = GrpcServer::Start(o, {});
  ASSERT_FALSE(server.ok());
  EXPECT_THAT(std::string(server.status().message()), ::testing::HasSubstr("cert_file"));
}

}  // namespace
}  // namespace kvcast::services
