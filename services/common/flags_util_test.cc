#include "services/common/flags_util.h"

#include <string>

#include "gtest/gtest.h"

namespace kvcast::services {
namespace {

void ExpectParses(const std::string& in, const std::string& host, uint16_t port) {
  auto r = ParseListen(in);
  ASSERT_TRUE(r.ok()) << in << ": " << r.status();
  EXPECT_EQ(r->first, host) << in;
  EXPECT_EQ(r->second, port) << in;
}

void ExpectRejected(const std::string& in, const std::string& why) {
  auto r = ParseListen(in);
  ASSERT_FALSE(r.ok()) << in << " parsed as " << r->first << " " << r->second;
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << in;
  EXPECT_NE(r.status().message().find("\"" + in + "\""), std::string::npos)
      << "message should quote the input: " << r.status();
  EXPECT_NE(r.status().message().find(why), std::string::npos) << r.status();
}

TEST(ParseListenTest, AcceptsHostsAndPortRange) {
  ExpectParses("0.0.0.0:8080", "0.0.0.0", 8080);
  ExpectParses("localhost:0", "localhost", 0);
  ExpectParses("127.0.0.1:65535", "127.0.0.1", 65535);
  ExpectParses("[::]:50051", "::", 50051);
  ExpectParses("[::1]:9", "::1", 9);
  ExpectParses("[fe80::1%eth0]:00080", "fe80::1%eth0", 80);
}

TEST(ParseListenTest, RejectsMalformed) {
  ExpectRejected("", "missing ':PORT'");
  ExpectRejected("localhost", "missing ':PORT'");
  ExpectRejected(":80", "missing host");
  ExpectRejected("::1:80", "needs brackets");
  ExpectRejected("[::1]80", "missing ':PORT' after ']'");
  ExpectRejected("[::1]", "missing ':PORT' after ']'");
  ExpectRejected("[::1:80", "missing ']'");
  ExpectRejected("[]:80", "empty IPv6");
  ExpectRejected("[1.2.3.4]:80", "only for IPv6");
  ExpectRejected("host:", "0..65535");
  ExpectRejected("host:65536", "0..65535");
  ExpectRejected("host:123456", "0..65535");
  ExpectRejected("host:+80", "decimal digits");
  ExpectRejected("host:-1", "decimal digits");
  ExpectRejected("host: 80", "decimal digits");
  ExpectRejected("host:8o", "decimal digits");
}

}  // namespace
}  // namespace kvcast::services
