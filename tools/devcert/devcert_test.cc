#include "tools/devcert/devcert.h"

#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace kvcast::devcert {
namespace {

std::string TempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  return std::string(base != nullptr ? base : "/tmp") + "/" + name;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

gnutls_x509_crt_t LoadCrt(const std::string& path) {
  std::string pem = Slurp(path);
  gnutls_x509_crt_t crt;
  gnutls_x509_crt_init(&crt);
  gnutls_datum_t d{reinterpret_cast<unsigned char*>(pem.data()),
                   static_cast<unsigned>(pem.size())};
  EXPECT_EQ(gnutls_x509_crt_import(crt, &d, GNUTLS_X509_FMT_PEM), 0) << path;
  return crt;
}

// Verifies `leaf` against `ca` the way a TLS peer would.
unsigned Verify(const std::string& leaf, const std::string& ca) {
  gnutls_x509_crt_t l = LoadCrt(leaf);
  gnutls_x509_crt_t c = LoadCrt(ca);
  unsigned status = ~0u;
  EXPECT_EQ(gnutls_x509_crt_verify(l, &c, 1, 0, &status), 0);
  gnutls_x509_crt_deinit(l);
  gnutls_x509_crt_deinit(c);
  return status;
}

TEST(DevCertTest, WritesCaServerAndClientThatVerify) {
  DevCertOptions options;
  options.out_dir = TempDir("certs/a");
  options.names = {"localhost", "127.0.0.1", "::1", "relay.kvcast.test"};
  options.client_name = "decode-0";
  ASSERT_TRUE(WriteDevCertificates(options).ok());
  DevCertPaths p = PathsIn(options.out_dir);
  EXPECT_EQ(Verify(p.server_cert, p.ca_cert), 0u);
  EXPECT_EQ(Verify(p.client_cert, p.ca_cert), 0u);

  gnutls_x509_crt_t server = LoadCrt(p.server_cert);
  EXPECT_TRUE(gnutls_x509_crt_check_hostname(server, "localhost"));
  EXPECT_TRUE(gnutls_x509_crt_check_hostname(server, "127.0.0.1"));
  EXPECT_TRUE(gnutls_x509_crt_check_hostname(server, "::1"));
  EXPECT_TRUE(gnutls_x509_crt_check_hostname(server, "relay.kvcast.test"));
  EXPECT_FALSE(gnutls_x509_crt_check_hostname(server, "example.com"));
  EXPECT_EQ(gnutls_x509_crt_get_pk_algorithm(server, nullptr), GNUTLS_PK_ECDSA);
  gnutls_x509_crt_deinit(server);

  struct stat st;
  ASSERT_EQ(stat(p.server_key.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(stat(p.moqt_auth_key.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  std::string key = Slurp(p.moqt_auth_key);
  ASSERT_EQ(key.size(), 65u);
  EXPECT_EQ(key.find_first_not_of("0123456789abcdef"), 64u);
}

TEST(DevCertTest, ReusesExistingCaUnlessAskedNotTo) {
  DevCertOptions options;
  options.out_dir = TempDir("certs/b");
  ASSERT_TRUE(WriteDevCertificates(options).ok());
  DevCertPaths p = PathsIn(options.out_dir);
  std::string ca1 = Slurp(p.ca_cert);
  options.names = {"other.test"};
  std::string key1 = Slurp(p.moqt_auth_key);
  ASSERT_TRUE(WriteDevCertificates(options).ok());
  EXPECT_EQ(Slurp(p.ca_cert), ca1);
  EXPECT_EQ(Slurp(p.moqt_auth_key), key1);
  EXPECT_EQ(Verify(p.server_cert, p.ca_cert), 0u);

  options.reuse_ca = false;
  ASSERT_TRUE(WriteDevCertificates(options).ok());
  EXPECT_NE(Slurp(p.ca_cert), ca1);
  EXPECT_NE(Slurp(p.moqt_auth_key), key1);
  EXPECT_EQ(Verify(p.server_cert, p.ca_cert), 0u);
}

TEST(DevCertTest, LeafFromOneCaFailsAgainstAnother) {
  DevCertOptions a, b;
  a.out_dir = TempDir("certs/c1");
  b.out_dir = TempDir("certs/c2");
  ASSERT_TRUE(WriteDevCertificates(a).ok());
  ASSERT_TRUE(WriteDevCertificates(b).ok());
  unsigned status = Verify(PathsIn(a.out_dir).server_cert,
                           PathsIn(b.out_dir).ca_cert);
  EXPECT_NE(status & GNUTLS_CERT_INVALID, 0u);
}

TEST(DevCertTest, ClearErrors) {
  DevCertOptions options;
  EXPECT_EQ(WriteDevCertificates(options).code(),
            absl::StatusCode::kInvalidArgument);
  options.out_dir = TempDir("certs/d");
  options.names = {};
  EXPECT_EQ(WriteDevCertificates(options).code(),
            absl::StatusCode::kInvalidArgument);
  options.names = {"bad name!"};
  absl::Status st = WriteDevCertificates(options);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("bad name!"), std::string::npos);
  options.names = {"localhost"};
  options.out_dir = "/proc/kvcast-no-such-dir";
  st = WriteDevCertificates(options);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_NE(st.message().find("/proc/kvcast-no-such-dir"), std::string::npos);
}

TEST(DevCertTest, CommandLineTool) {
  std::string dir = TempDir("certs/cli");
  std::string cmd = "tools/devcert/kvcast-devcert --out " + dir +
                    " --names localhost,127.0.0.1 --client c1 > /dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  DevCertPaths p = PathsIn(dir);
  EXPECT_EQ(Verify(p.server_cert, p.ca_cert), 0u);
  EXPECT_EQ(Verify(p.client_cert, p.ca_cert), 0u);
  // Missing --out: usage error, non-zero exit.
  EXPECT_NE(std::system("tools/devcert/kvcast-devcert 2> /dev/null"), 0);
}

}  // namespace
}  // namespace kvcast::devcert
