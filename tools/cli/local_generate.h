// `kvcast generate --model DIR`: runs the engine in this process.
#ifndef KVCAST_TOOLS_CLI_LOCAL_GENERATE_H_
#define KVCAST_TOOLS_CLI_LOCAL_GENERATE_H_

#include <string>

#include "absl/status/status.h"
#include "tools/cli/generate_options.h"

namespace kvcast::cli {

// Loads the model in `model_dir` on the CPU backend with a KV pool of
// `kv_cache_mb`, streams the generated text to stdout and timings (prefill,
// decode tokens/s, cached prompt tokens) to stderr.
absl::Status LocalGenerate(const std::string& model_dir, int kv_cache_mb,
                           const GenerateOptions& options);

}  // namespace kvcast::cli

#endif  // KVCAST_TOOLS_CLI_LOCAL_GENERATE_H_
