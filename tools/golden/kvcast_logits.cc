// kvcast_logits: kvcast's side of the HF oracle comparison, on any backend.
//
// Loads a checkpoint on --backend, runs one forward pass over --tokens and
// records every position's logits, then generates --greedy N tokens (one
// decode step at a time over the paged KV cache, argmax, lowest index on
// ties). Writes the JSON layout of tools/golden/hf_logits.py ("tokens",
// "logits", "greedy_tokens"), so tools/golden/compare_logits.py compares
// the two.
//
//   kvcast_logits --model DIR --backend cuda --tokens 1,2,3 --greedy 64 --out F.json
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "engine/model/checkpoint.h"
#include "engine/transformer.h"
#include "kernels/backend.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, model, "", "model: .gguf file or HF directory");
ABSL_FLAG(std::string, backend, "cpu-f32", "cpu-f32 (float32 weights: the oracle comparison), cpu (Q8 weights) or cuda");
ABSL_FLAG(std::string, tokens, "", "comma-separated prompt token ids");
ABSL_FLAG(int, greedy, 0, "greedy tokens to generate after the prompt");
ABSL_FLAG(std::string, out, "", "output JSON file");
ABSL_FLAG(std::string, logits_file, "",
          "write the logits here as raw little-endian float32 (positions x vocab) instead of "
          "into the JSON");

namespace kvcast {
namespace {

absl::Status Run() {
  const std::string out_path = absl::GetFlag(FLAGS_out);
  if (absl::GetFlag(FLAGS_model).empty() || out_path.empty()) {
    return absl::InvalidArgumentError("--model and --out are required");
  }
  std::vector<int32_t> tokens;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_tokens), ',', absl::SkipEmpty())) {
    int32_t t;
    if (!absl::SimpleAtoi(s, &t)) {
      return absl::InvalidArgumentError(absl::StrCat("--tokens: '", std::string(s),
                                                     "' is not an integer"));
    }
    tokens.push_back(t);
  }
  if (tokens.empty()) return absl::InvalidArgumentError("--tokens is empty");
  const int greedy = absl::GetFlag(FLAGS_greedy);
  if (greedy < 0) return absl::InvalidArgumentError("--greedy must be >= 0");

  ASSIGN_OR_RETURN(auto backend, NewBackend(absl::GetFlag(FLAGS_backend)));
  ASSIGN_OR_RETURN(auto ckpt, Checkpoint::Open(absl::GetFlag(FLAGS_model)));
  ASSIGN_OR_RETURN(auto model, Transformer::Load(*ckpt, backend.get()));
  const int vocab = model->config().vocab_size;
  const int page_tokens = 16;
  const int total = int(tokens.size()) + greedy;
  const int pages = (total + page_tokens - 1) / page_tokens;
  ASSIGN_OR_RETURN(auto pool,
                   KvPagePool::Create(backend.get(), model->kv_layout(page_tokens), pages));
  ASSIGN_OR_RETURN(KvPages held, pool->Allocate(pages));
  const absl::Span<const int32_t> table = held.ids();

  std::vector<float> logits;
  ForwardItem prompt{tokens, 0, table};
  RETURN_IF_ERROR(model->Forward({&prompt, 1}, pool.get(), /*all_logits=*/true, &logits));
  nlohmann::json result;
  result["backend"] = std::string(backend->name());
  result["tokens"] = tokens;
  if (const std::string raw = absl::GetFlag(FLAGS_logits_file); !raw.empty()) {
    std::ofstream lf(raw, std::ios::binary);
    lf.write(reinterpret_cast<const char*>(logits.data()),
             std::streamsize(tokens.size() * vocab * sizeof(float)));
    if (!lf) return absl::InternalError(absl::StrCat(raw, ": write failed"));
    result["logits_file"] = raw;
    result["vocab"] = vocab;
  } else {
    nlohmann::json rows = nlohmann::json::array();
    for (size_t r = 0; r < tokens.size(); ++r) {
      rows.push_back(
          std::vector<float>(logits.begin() + r * vocab, logits.begin() + (r + 1) * vocab));
    }
    result["logits"] = std::move(rows);
  }

  std::vector<int32_t> generated;
  const float* last = logits.data() + (tokens.size() - 1) * vocab;
  std::vector<float> step(last, last + vocab);
  for (int i = 0; i < greedy; ++i) {
    const int32_t next = int32_t(std::max_element(step.begin(), step.end()) - step.begin());
    generated.push_back(next);
    if (i + 1 == greedy) break;
    ForwardItem item{absl::MakeConstSpan(&generated.back(), 1), int(tokens.size()) + i, table};
    RETURN_IF_ERROR(model->Forward({&item, 1}, pool.get(), /*all_logits=*/false, &step));
  }
  if (greedy > 0) result["greedy_tokens"] = generated;
  std::ofstream f(out_path);
  f << result.dump();
  if (!f) return absl::InternalError(absl::StrCat(out_path, ": write failed"));
  std::fprintf(stderr, "wrote %s: %zu positions x %d logits, %d greedy tokens (%s)\n",
               out_path.c_str(), tokens.size(), vocab, greedy, std::string(backend->name()).c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace kvcast

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  absl::Status st = kvcast::Run();
  if (!st.ok()) {
    std::fprintf(stderr, "kvcast_logits: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}
