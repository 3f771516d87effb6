// `kvcast generate --model DIR`: runs the engine in this process.
#ifndef KVCAST_TOOLS_CLI_LOCAL_GENERATE_H_
#define KVCAST_TOOLS_CLI_LOCAL_GENERATE_H_

#include <string>

#include "absl/status/status.h"
#include "tools/cli/generate_options.h"

namespace kvcast::cli {

struct LocalEngineOptions {
  std::string model_dir;
  int kv_cache_mb = 256;
  std::string backend = "cpu";  // NewBackend's names: cpu, cuda (where built)
  int device = 0;               // GPU index for cuda
  bool kv_fp16_values = false;  // EngineOptions::kv_fp16_values (the workers' default)
};

// Loads the model on the chosen backend with a KV pool of `kv_cache_mb`,
// streams the generated text to stdout and timings (prefill, decode
// tokens/s, cached prompt tokens) to stderr.
absl::Status LocalGenerate(const LocalEngineOptions& engine, const GenerateOptions& options);

}  // namespace kvcast::cli

#endif  // KVCAST_TOOLS_CLI_LOCAL_GENERATE_H_
