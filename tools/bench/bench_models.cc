// The benchmarks' random checkpoints: see bench_models.h.
#include "tools/bench/bench_models.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "tools/tiny_model/tiny_model.h"

namespace kvcast {

absl::StatusOr<std::string> WriteBenchModel(const std::string& preset) {
  TinyModelOptions o;
  if (preset == "100m") {
    o.vocab_size = 32000;
    o.hidden_size = 768;
    o.intermediate_size = 2048;
    o.num_layers = 12;
    o.num_heads = 12;
    o.num_kv_heads = 4;
  } else if (preset != "tiny") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown model preset \"", preset, "\" (tiny, 100m)"));
  }
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = absl::StrCat(tmp ? tmp : "/tmp", "/kvcast-bench-", preset);
  RETURN_IF_ERROR(WriteTinyModel(o, dir));
  return dir;
}

}  // namespace kvcast
