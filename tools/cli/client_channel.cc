#include "tools/cli/client_channel.h"

#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace kvcast::cli {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeSchedulerChannel(const std::string& address,
                                                                    const TlsFiles& tls) {
  if (address.empty()) return absl::InvalidArgumentError("the scheduler address is empty");
  if (tls.cert.empty() != tls.key.empty()) {
    return absl::InvalidArgumentError("--cert and --key go together");
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  // A call the scheduler never answered (restarting, or not up yet) is
  // tried again, 5 attempts over about 3 s; gRPC stops retrying once the
  // first response arrives, so a stream cut midway still fails. The channel
  // reconnects within a second of the scheduler coming back.
  args.SetServiceConfigJSON(R"({"methodConfig": [{
      "name": [{"service": "kvcast.v1.Generation"}],
      "retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.2s", "maxBackoff": "1.6s",
                      "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]})");
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  if (tls.ca.empty() && tls.cert.empty()) {
    return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  }
  grpc::SslCredentialsOptions ssl;
  if (!tls.ca.empty()) {
    auto ca = ReadFile(tls.ca);
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *ca;
  }
  if (!tls.cert.empty()) {
    auto cert = ReadFile(tls.cert);
    if (!cert.ok()) return cert.status();
    auto key = ReadFile(tls.key);
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = *cert;
    ssl.pem_private_key = *key;
  }
  return grpc::CreateCustomChannel(address, grpc::SslCredentials(ssl), args);
}

absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  // grpc::StatusCode and absl::StatusCode share their numbering.
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

absl::StatusOr<std::vector<int32_t>> ParseTokenIds(absl::string_view csv) {
  std::vector<int32_t> ids;
  for (absl::string_view part : absl::StrSplit(csv, ',', absl::SkipWhitespace())) {
    int32_t id;
    if (!absl::SimpleAtoi(part, &id)) {
      return absl::InvalidArgumentError(absl::StrCat("'", std::string(part), "' is not a token id"));
    }
    ids.push_back(id);
  }
  if (ids.empty()) return absl::InvalidArgumentError("no token ids");
  return ids;
}

void AddApiKey(grpc::ClientContext* ctx, const std::string& api_key) {
  if (!api_key.empty()) ctx->AddMetadata("authorization", "Bearer " + api_key);
}

}  // namespace kvcast::cli
