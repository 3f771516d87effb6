// The random checkpoints the benchmarks run on (no model hub here).
#ifndef KVCAST_TOOLS_BENCH_BENCH_MODELS_H_
#define KVCAST_TOOLS_BENCH_BENCH_MODELS_H_

#include <string>

#include "absl/status/statusor.h"

namespace kvcast {

// Writes the preset's model under $TMPDIR (or /tmp) and returns its
// directory: "tiny" (the test model: 2 layers, 2 KV heads x 16) or "100m"
// (a ~125M-parameter Llama: 12 layers, 4 KV heads x 64, vocab 32000).
// InvalidArgument for any other name.
absl::StatusOr<std::string> WriteBenchModel(const std::string& preset);

}  // namespace kvcast

#endif  // KVCAST_TOOLS_BENCH_BENCH_MODELS_H_
