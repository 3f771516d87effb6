// Certificate verification, mutual TLS and ALPN: every failure must surface
// as OnClosed with a Status that names the problem.
#include <cstdio>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "transport/quic/quic_test_util.h"

namespace kvcast::quic {
namespace {

using testing::MakeTestCerts;
using testing::QuicTestEnv;
using testing::RecordingHandler;

constexpr absl::Duration kWait = absl::Seconds(20);

// Connects and returns the client's close status if the connection failed
// (nullopt if the handshake succeeded).
std::optional<absl::Status> ConnectExpectingFailure(
    QuicTestEnv& env, const TlsOptions& tls,
    const TransportOptions& transport = {},
    const std::string& host = "127.0.0.1") {
  absl::StatusOr<size_t> c = env.Connect(tls, transport, host);
  EXPECT_TRUE(c.ok()) << c.status();
  if (!c.ok()) return c.status();
  std::optional<absl::Status> closed =
      env.client_handler(*c)->WaitClosed(kWait);
  EXPECT_TRUE(closed.has_value()) << "no OnClosed within the deadline";
  EXPECT_FALSE(env.client_handler(*c)->handshake_done());
  if (closed.has_value()) std::printf("client OnClosed: %s\n", closed->ToString().c_str());
  return closed;
}

TEST(QuicTlsTest, ClientTrustingTheCaConnectsByNameAndByIp) {
  QuicTestEnv env;
  ASSERT_TRUE(env.StartServer(env.ServerTls(), {}).ok());
  for (const char* host : {"127.0.0.1", "localhost"}) {
    absl::StatusOr<size_t> c = env.Connect(env.ClientTls(), {}, host);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_TRUE(env.client_handler(*c)->WaitHandshake(kWait)) << host;
  }
}

TEST(QuicTlsTest, UnknownCaIsRejectedWithCertificateProblem) {
  QuicTestEnv env;
  ASSERT_TRUE(env.StartServer(env.ServerTls(), {}).ok());
  devcert::DevCertPaths other = MakeTestCerts("other-ca");
  TlsOptions tls;
  tls.ca_file = other.ca_cert;
  std::optional<absl::Status> st = ConnectExpectingFailure(env, tls);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->code(), absl::StatusCode::kUnauthenticated) << *st;
  EXPECT_TRUE(absl::StrContains(st->message(), "certificate")) << *st;
  EXPECT_TRUE(absl::StrContains(st->message(), "issuer is unknown")) << *st;
  // The server learns why from the client's alert.
  RecordingHandler* server = env.ServerHandler(0);
  ASSERT_NE(server, nullptr);
  std::optional<absl::Status> server_st = server->WaitClosed(kWait);
  ASSERT_TRUE(server_st.has_value());
  EXPECT_EQ(server_st->code(), absl::StatusCode::kUnauthenticated) << *server_st;
}

TEST(QuicTlsTest, NameMismatchIsRejected) {
  QuicTestEnv env;
  ASSERT_TRUE(env.StartServer(env.ServerTls(), {}).ok());
  TlsOptions tls = env.ClientTls();
  tls.server_name = "relay.example.com";
  std::optional<absl::Status> st = ConnectExpectingFailure(env, tls);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->code(), absl::StatusCode::kUnauthenticated) << *st;
  EXPECT_TRUE(absl::StrContains(st->message(), "does not match")) << *st;
}

TEST(QuicTlsTest, InsecureSkipVerifyConnectsWithoutCa) {
  QuicTestEnv env;
  ASSERT_TRUE(env.StartServer(env.ServerTls(), {}).ok());
  TlsOptions tls;
  tls.insecure_skip_verify = true;
  tls.server_name = "not-in-the-cert.example";
  absl::StatusOr<size_t> c = env.Connect(tls, {});
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(env.client_handler(*c)->WaitHandshake(kWait));
}

TEST(QuicTlsTest, MutualTls) {
  QuicTestEnv env;
  TlsOptions server_tls = env.ServerTls();
  server_tls.require_client_cert = true;
  ASSERT_TRUE(env.StartServer(server_tls, {}).ok());

  // No client certificate: rejected, and the client never sees the
  // connection as established.
  std::optional<absl::Status> st = ConnectExpectingFailure(env, env.ClientTls());
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->code(), absl::StatusCode::kUnauthenticated) << *st;
  EXPECT_TRUE(absl::StrContains(st->message(), "certificate")) << *st;
  std::optional<absl::Status> server_st =
      env.ServerHandler(0)->WaitClosed(kWait);
  ASSERT_TRUE(server_st.has_value());
  EXPECT_EQ(server_st->code(), absl::StatusCode::kUnauthenticated)
      << *server_st;
  EXPECT_FALSE(env.ServerHandler(0)->handshake_done());

  // A certificate from another CA: rejected.
  devcert::DevCertPaths other = MakeTestCerts("other-client-ca");
  TlsOptions foreign = env.ClientTls();
  foreign.cert_file = other.client_cert;
  foreign.key_file = other.client_key;
  st = ConnectExpectingFailure(env, foreign);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->code(), absl::StatusCode::kUnauthenticated) << *st;

  // A certificate from the server's CA: accepted.
  TlsOptions good = env.ClientTls();
  good.cert_file = env.certs().client_cert;
  good.key_file = env.certs().client_key;
  absl::StatusOr<size_t> c = env.Connect(good, {});
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(env.client_handler(*c)->WaitHandshake(kWait));
}

TEST(QuicTlsTest, AlpnMismatchFailsBothSides) {
  QuicTestEnv env;
  ASSERT_TRUE(env.StartServer(env.ServerTls(), {}).ok());
  TransportOptions h3;
  h3.alpn = "h3";
  std::optional<absl::Status> st =
      ConnectExpectingFailure(env, env.ClientTls(), h3);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->code(), absl::StatusCode::kUnavailable) << *st;
  EXPECT_TRUE(absl::StrContains(st->message(), "no_application_protocol"))
      << *st;
  std::optional<absl::Status> server_st =
      env.ServerHandler(0)->WaitClosed(kWait);
  ASSERT_TRUE(server_st.has_value());
  EXPECT_FALSE(server_st->ok());
}

TEST(QuicTlsTest, BadFilesFailAtCreation) {
  QuicTestEnv env;
  TlsOptions tls = env.ServerTls();
  tls.key_file = "/nonexistent/key.pem";
  absl::Status st = env.StartServer(tls, {});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(st.message(), "/nonexistent/key.pem")) << st;

  tls = env.ServerTls();
  tls.cert_file = env.certs().ca_key;  // Not a certificate.
  st = env.StartServer(tls, {});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;

  tls = env.ServerTls();
  tls.require_client_cert = true;
  tls.ca_file = "";
  EXPECT_EQ(env.StartServer(tls, {}).code(),
            absl::StatusCode::kInvalidArgument);

  ASSERT_TRUE(env.StartServer(env.ServerTls(), {}).ok());
  TlsOptions client_tls;
  client_tls.ca_file = "/nonexistent/ca.pem";
  EXPECT_EQ(env.Connect(client_tls, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(env.Connect(env.ClientTls(), {}, "no such host!", 1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvcast::quic
