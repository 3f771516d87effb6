// `kvcast generate --scheduler HOST:PORT`: one streaming
// kvcast.v1.Generation/Generate call.
#ifndef KVCAST_TOOLS_CLI_REMOTE_GENERATE_H_
#define KVCAST_TOOLS_CLI_REMOTE_GENERATE_H_

#include <string>

#include "absl/status/status.h"
#include "kvcast/v1/generation.pb.h"
#include "tools/cli/client_channel.h"
#include "tools/cli/generate_options.h"

namespace kvcast::cli {

struct RemoteOptions {
  std::string scheduler;  // HOST:PORT
  TlsFiles tls;
  std::string api_key;     // empty: none
  std::string stop;        // a stop string; empty: none
  std::string request_id;  // empty: the scheduler makes one
  double deadline_s = 0;   // 0: no deadline
};

// The request `options` describe (text prompt unless prompt_ids is set).
v1::GenerateRequest MakeGenerateRequest(const GenerateOptions& options, const RemoteOptions& remote);

// Streams text deltas (token ids with print_ids) to stdout as they arrive,
// then a summary of the Final message on stderr. Errors: the call's gRPC
// status (same code and message); INTERNAL when the stream ends without a
// Final.
absl::Status RemoteGenerate(const GenerateOptions& options, const RemoteOptions& remote);

// The stderr summary of `final` (several lines, each ending in '\n').
std::string DescribeFinal(const v1::Final& final);

}  // namespace kvcast::cli

#endif  // KVCAST_TOOLS_CLI_REMOTE_GENERATE_H_
