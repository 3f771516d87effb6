// Client-side helpers shared by `kvcast generate --scheduler` and
// `kvcast bench`: the channel to the scheduler, gRPC status conversion and
// token-id lists.
#ifndef KVCAST_TOOLS_CLI_CLIENT_CHANNEL_H_
#define KVCAST_TOOLS_CLI_CLIENT_CHANNEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/grpcpp.h"

namespace kvcast::cli {

// PEM files for TLS to the scheduler; all empty: plaintext. `ca` verifies
// the server (empty: the system roots); `cert` + `key` (both or neither)
// are the client certificate for mutual TLS.
struct TlsFiles {
  std::string ca, cert, key;
};

// Calls that get UNAVAILABLE before any response (a scheduler restarting)
// are retried: 5 attempts over about 3 s.
// Errors: INVALID_ARGUMENT for an empty address or only one of cert/key;
// NOT_FOUND when a PEM file cannot be read.
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeSchedulerChannel(const std::string& address,
                                                                    const TlsFiles& tls);

// Adds "authorization: Bearer KEY" to a call (the scheduler's
// --api_keys_file); nothing when `api_key` is empty.
void AddApiKey(grpc::ClientContext* ctx, const std::string& api_key);

// The same code and message as an absl::Status.
absl::Status FromGrpc(const grpc::Status& status);

// "1,2,3" -> {1, 2, 3}. INVALID_ARGUMENT names a part that is not an int.
absl::StatusOr<std::vector<int32_t>> ParseTokenIds(absl::string_view csv);

}  // namespace kvcast::cli

#endif  // KVCAST_TOOLS_CLI_CLIENT_CHANNEL_H_
