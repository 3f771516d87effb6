#include "services/relay/relay_server.h"

#include "gtest/gtest.h"

namespace kvcast::moqt {
namespace {

RelayServerOptions Valid() {
  RelayServerOptions o;
  o.tls.cert_file = "relay.pem";
  o.tls.key_file = "relay-key.pem";
  o.auth_key_file = "moqt-auth.key";
  return o;
}

std::string Refusal(const RelayServerOptions& o) {
  const absl::Status s = ValidateRelayOptions(o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  return std::string(s.message());
}

TEST(RelayServerTest, EachBadOptionIsRefusedNamingItsFlag) {
  EXPECT_TRUE(ValidateRelayOptions(Valid()).ok());
  RelayServerOptions o = Valid();
  o.tls.key_file.clear();
  EXPECT_NE(Refusal(o).find("--cert and --key are required"), std::string::npos);
  o = Valid();
  o.auth_key_file.clear();
  EXPECT_NE(Refusal(o).find("--auth_key_file is required"), std::string::npos);
  o.insecure = true;  // development only: no tokens
  EXPECT_TRUE(ValidateRelayOptions(o).ok());
  o = Valid();
  o.cache_mb = 0;
  EXPECT_NE(Refusal(o).find("--cache_mb"), std::string::npos);
  o = Valid();
  o.quic_max_udp_payload = 1000;
  EXPECT_NE(Refusal(o).find("--quic_max_udp_payload"), std::string::npos);
  o = Valid();
  o.spill_mb = 64;  // without --spill_dir
  EXPECT_NE(Refusal(o).find("--spill_dir and a positive --spill_mb"), std::string::npos);
  for (int bad : {-1, 129}) {
    o = Valid();
    o.loop_threads = bad;
    EXPECT_NE(Refusal(o).find("--loop_threads"), std::string::npos) << bad;
  }
  o.loop_threads = 4;
  EXPECT_TRUE(ValidateRelayOptions(o).ok());
}

TEST(RelayServerTest, DefaultLoopThreadsAreTheCoresItMayUse) {
  EXPECT_EQ(DefaultLoopThreads(8, ""), 8);                   // no cgroup file
  EXPECT_EQ(DefaultLoopThreads(8, "max 100000\n"), 8);       // no quota
  EXPECT_EQ(DefaultLoopThreads(64, "200000 100000\n"), 2);   // a 2-CPU container limit
  EXPECT_EQ(DefaultLoopThreads(64, "150000 100000"), 2);      // 1.5 CPUs: rounded up
  EXPECT_EQ(DefaultLoopThreads(64, "50000 100000"), 1);
  EXPECT_EQ(DefaultLoopThreads(2, "800000 100000"), 2);       // the affinity is smaller
  EXPECT_EQ(DefaultLoopThreads(0, "garbage"), 1);
}

TEST(RelayServerTest, AnUnparsableListenAddressOrMissingKeysEndItBeforeServing) {
  RelayServerOptions o = Valid();
  o.listen = "nowhere";
  EXPECT_FALSE(RunRelay(o).ok());
  o = Valid();
  o.listen = "127.0.0.1:0";
  o.auth_key_file = "/nonexistent/moqt-auth.key";
  const absl::Status s = RunRelay(o);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("/nonexistent/moqt-auth.key"), std::string::npos) << s;
}

}  // namespace
}  // namespace kvcast::moqt
