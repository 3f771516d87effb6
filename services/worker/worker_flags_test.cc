// WorkerConfigFromFlags (worker_flags.cc): the flags of kvcast-prefill and
// kvcast-decode become a WorkerConfig, and every value that cannot work is
// refused with InvalidArgument naming its flag, before anything starts.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "services/worker/worker_runtime.h"

ABSL_DECLARE_FLAG(std::string, model);
ABSL_DECLARE_FLAG(std::string, backend);
ABSL_DECLARE_FLAG(double, kv_cache_fraction);
ABSL_DECLARE_FLAG(std::string, kv_cache_precision);
ABSL_DECLARE_FLAG(int, kv_host_tier_mb);
ABSL_DECLARE_FLAG(std::string, kv_host_tier_track);
ABSL_DECLARE_FLAG(std::string, kv_host_tier_policy);
ABSL_DECLARE_FLAG(std::string, kv_disk_tier_dir);
ABSL_DECLARE_FLAG(int, kv_disk_tier_mb);
ABSL_DECLARE_FLAG(std::string, grpc_listen);
ABSL_DECLARE_FLAG(std::string, grpc_cert);
ABSL_DECLARE_FLAG(std::string, grpc_key);
ABSL_DECLARE_FLAG(std::string, grpc_ca);
ABSL_DECLARE_FLAG(std::string, advertise_host);
ABSL_DECLARE_FLAG(int32_t, quic_max_udp_payload);
ABSL_DECLARE_FLAG(std::string, quic_cert);
ABSL_DECLARE_FLAG(std::string, quic_key);
ABSL_DECLARE_FLAG(std::string, quic_ca);
ABSL_DECLARE_FLAG(bool, insecure);
ABSL_DECLARE_FLAG(std::string, moqt_auth_key_file);
ABSL_DECLARE_FLAG(double, heartbeat_s);

namespace kvcast::worker {
namespace {

class WorkerFlagsTest : public ::testing::Test {
 protected:
  // The least a development worker needs.
  void SetUp() override {
    absl::SetFlag(&FLAGS_model, "/models/m.gguf");
    absl::SetFlag(&FLAGS_quic_cert, "worker.pem");
    absl::SetFlag(&FLAGS_quic_key, "worker-key.pem");
    absl::SetFlag(&FLAGS_insecure, true);
  }
  absl::StatusOr<WorkerConfig> Config() {
    return WorkerConfigFromFlags(v1::WORKER_ROLE_DECODE, "0.0.0.0:50052");
  }
  // InvalidArgument whose message names `flag`.
  ::testing::AssertionResult RefusedNaming(const std::string& flag) {
    const absl::StatusOr<WorkerConfig> c = Config();
    if (c.ok()) return ::testing::AssertionFailure() << "accepted";
    if (!absl::IsInvalidArgument(c.status()) ||
        c.status().message().find(flag) == std::string::npos) {
      return ::testing::AssertionFailure() << c.status();
    }
    return ::testing::AssertionSuccess();
  }

  absl::FlagSaver saver_;  // every test's flags are undone after it
};

TEST_F(WorkerFlagsTest, FlagsBecomeTheConfig) {
  absl::SetFlag(&FLAGS_kv_host_tier_mb, 512);
  absl::SetFlag(&FLAGS_kv_host_tier_track, "int8");
  absl::SetFlag(&FLAGS_kv_host_tier_policy, "lfu");
  absl::SetFlag(&FLAGS_kv_cache_precision, "fp32");
  absl::SetFlag(&FLAGS_grpc_cert, "g.pem");
  absl::SetFlag(&FLAGS_grpc_key, "g-key.pem");
  absl::SetFlag(&FLAGS_grpc_ca, "ca.pem");
  absl::SetFlag(&FLAGS_quic_max_udp_payload, 8952);
  absl::SetFlag(&FLAGS_heartbeat_s, 0.5);
  const absl::StatusOr<WorkerConfig> c = Config();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->role, v1::WORKER_ROLE_DECODE);
  EXPECT_EQ(c->model_dir, "/models/m.gguf");
  EXPECT_EQ(c->backend, "cpu");
  EXPECT_EQ(c->grpc.listen, "0.0.0.0:50052");  // the role's default
  EXPECT_EQ(c->kv_host_tier_mb, 512);
  EXPECT_EQ(c->kv_host_tier_format, KvFormat::kInt8);
  EXPECT_EQ(c->kv_host_tier_policy, HostKvTier::Policy::kLfu);
  EXPECT_FALSE(c->kv_fp16_values);
  // --grpc_ca: mutual TLS, the worker presents its certificate to the scheduler.
  EXPECT_EQ(c->grpc_client_cert, "g.pem");
  EXPECT_EQ(c->grpc_client_key, "g-key.pem");
  EXPECT_EQ(c->quic_max_udp_payload, 8952u);
  EXPECT_EQ(c->heartbeat, absl::Milliseconds(500));
  // --insecure: peers not verified, no client certificates, no tokens.
  EXPECT_TRUE(c->quic_client.insecure_skip_verify);
  EXPECT_FALSE(c->quic_server.require_client_cert);
  EXPECT_EQ(c->moqt_auth, nullptr);
}

TEST_F(WorkerFlagsTest, SecureWorkersVerifyPeersAndCheckTokens) {
  const std::string keys = ::testing::TempDir() + "/moqt_keys";
  std::ofstream(keys) << std::string(40, 'k') << "\n";
  absl::SetFlag(&FLAGS_insecure, false);
  absl::SetFlag(&FLAGS_quic_ca, "ca.pem");
  absl::SetFlag(&FLAGS_moqt_auth_key_file, keys);
  const absl::StatusOr<WorkerConfig> c = Config();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->quic_client.insecure_skip_verify);
  EXPECT_TRUE(c->quic_server.require_client_cert);
  EXPECT_EQ(c->quic_client.ca_file, "ca.pem");
  EXPECT_NE(c->moqt_auth, nullptr);
  // A key file that cannot be read is named.
  absl::SetFlag(&FLAGS_moqt_auth_key_file, ::testing::TempDir() + "/no_such_keys");
  const absl::StatusOr<WorkerConfig> missing = Config();
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("--moqt_auth_key_file"), std::string::npos)
      << missing.status();
}

TEST_F(WorkerFlagsTest, WithoutInsecureTheCaAndTheKeysAreRequired) {
  absl::SetFlag(&FLAGS_insecure, false);
  EXPECT_TRUE(RefusedNaming("--quic_ca"));
  absl::SetFlag(&FLAGS_quic_ca, "ca.pem");
  EXPECT_TRUE(RefusedNaming("--moqt_auth_key_file"));
}

TEST_F(WorkerFlagsTest, ValuesThatCannotWorkAreRefusedNamingTheirFlag) {
  struct Case {
    std::function<void()> set;
    std::string named;  // in the error message
  };
  const std::vector<Case> cases = {
      {[] { absl::SetFlag(&FLAGS_model, ""); }, "--model"},
      {[] { absl::SetFlag(&FLAGS_backend, "tpu"); }, "--backend=tpu"},
      {[] { absl::SetFlag(&FLAGS_kv_cache_fraction, 0.99); }, "--kv_cache_fraction"},
      {[] { absl::SetFlag(&FLAGS_kv_cache_precision, "fp8"); }, "--kv_cache_precision"},
      // Arithmetic coding: a wire track, not a host tier's format.
      {[] { absl::SetFlag(&FLAGS_kv_host_tier_track, "ac"); }, "--kv_host_tier_track"},
      {[] { absl::SetFlag(&FLAGS_kv_host_tier_policy, "mru"); }, "--kv_host_tier_policy"},
      // A disk tier needs a directory and a host tier above it.
      {[] {
         absl::SetFlag(&FLAGS_kv_disk_tier_mb, 100);
         absl::SetFlag(&FLAGS_kv_disk_tier_dir, "/tmp/kv");
       },
       "--kv_disk_tier_mb"},
      {[] { absl::SetFlag(&FLAGS_quic_max_udp_payload, 900); }, "--quic_max_udp_payload"},
      {[] { absl::SetFlag(&FLAGS_advertise_host, ""); }, "--advertise_host"},
      {[] { absl::SetFlag(&FLAGS_quic_key, ""); }, "--quic_cert and --quic_key"},
      {[] { absl::SetFlag(&FLAGS_heartbeat_s, 0); }, "--heartbeat_s"},
  };
  for (const Case& c : cases) {
    absl::FlagSaver undo;
    c.set();
    EXPECT_TRUE(RefusedNaming(c.named)) << c.named;
  }
  EXPECT_TRUE(Config().ok());  // and nothing else was wrong
}

}  // namespace
}  // namespace kvcast::worker
