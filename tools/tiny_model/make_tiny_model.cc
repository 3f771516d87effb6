// make_tiny_model: writes a deterministic random HF checkpoint (see
// tools/tiny_model/tiny_model.h), or with --gguf a GGUF file of it (and its
// HF directory beside it, OUT.hf: tiny_gguf.h), e.g.
//   bazel run //tools/tiny_model:make_tiny_model -- --out=/tmp/tiny --arch=qwen2
//   bazel run //tools/tiny_model:make_tiny_model -- --out=/tmp/llama-q4k.gguf --gguf=Q4_K \
//     --hidden_size=2048 --intermediate_size=5632 --num_layers=8 --num_heads=32 \
//     --num_kv_heads=8 --vocab_size=32000 --dtype=f32
#include <cstdio>
#include <optional>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "engine/model/ggml_types.h"
#include "tools/tiny_model/tiny_gguf.h"
#include "tools/tiny_model/tiny_model.h"

ABSL_FLAG(std::string, out, "", "Output directory (created if missing).");
ABSL_FLAG(std::string, arch, "llama", "llama | mistral | qwen2");
ABSL_FLAG(int, vocab_size, 512, "Vocabulary size (>= 258).");
ABSL_FLAG(int, hidden_size, 64, "Hidden size.");
ABSL_FLAG(int, intermediate_size, 176, "MLP intermediate size.");
ABSL_FLAG(int, num_layers, 2, "Number of decoder layers.");
ABSL_FLAG(int, num_heads, 4, "Attention heads.");
ABSL_FLAG(int, num_kv_heads, 2, "Key/value heads.");
ABSL_FLAG(int, max_position_embeddings, 2048, "Maximum positions.");
ABSL_FLAG(double, rope_theta, 10000.0, "RoPE base.");
ABSL_FLAG(bool, llama3_rope_scaling, false, "Add Llama-3.1 rope_scaling (factor 8).");
ABSL_FLAG(double, linear_rope_factor, 0.0, "> 0: add linear rope_scaling with this factor.");
ABSL_FLAG(bool, tie_embeddings, false, "Tie lm_head to the embeddings.");
ABSL_FLAG(std::string, dtype, "bf16", "f32 | f16 | bf16");
ABSL_FLAG(int, shards, 1, "Number of safetensors shards.");
ABSL_FLAG(uint64_t, seed, 1, "PRNG seed.");
ABSL_FLAG(std::string, gguf, "",
          "F32 | Q8_0 | Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q4_K | Q5_K | Q6_K: write a GGUF file with "
          "matrices of this type");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) {
    std::fprintf(stderr, "make_tiny_model: --out is required\n");
    return 2;
  }
  kvcast::TinyModelOptions o;
  o.arch = absl::GetFlag(FLAGS_arch);
  o.vocab_size = absl::GetFlag(FLAGS_vocab_size);
  o.hidden_size = absl::GetFlag(FLAGS_hidden_size);
  o.intermediate_size = absl::GetFlag(FLAGS_intermediate_size);
  o.num_layers = absl::GetFlag(FLAGS_num_layers);
  o.num_heads = absl::GetFlag(FLAGS_num_heads);
  o.num_kv_heads = absl::GetFlag(FLAGS_num_kv_heads);
  o.max_position_embeddings = absl::GetFlag(FLAGS_max_position_embeddings);
  o.rope_theta = absl::GetFlag(FLAGS_rope_theta);
  o.llama3_rope_scaling = absl::GetFlag(FLAGS_llama3_rope_scaling);
  o.linear_rope_factor = absl::GetFlag(FLAGS_linear_rope_factor);
  o.tie_embeddings = absl::GetFlag(FLAGS_tie_embeddings);
  o.dtype = absl::GetFlag(FLAGS_dtype);
  o.shards = absl::GetFlag(FLAGS_shards);
  o.seed = absl::GetFlag(FLAGS_seed);
  const std::string gguf = absl::GetFlag(FLAGS_gguf);
  std::optional<kvcast::GgmlType> type;
  for (uint32_t id = 0; id < 64; ++id) {
    const auto t = kvcast::GgmlType(id);
    if (kvcast::TinyGgufMatrixType(t) && gguf == kvcast::GgmlTypeName(id)) type = t;
  }
  if (!gguf.empty() && !type) {
    std::fprintf(stderr,
                 "make_tiny_model: --gguf=%s is not F32, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, "
                 "Q5_K or Q6_K\n",
                 gguf.c_str());
    return 2;
  }
  const absl::Status status =
      type ? kvcast::WriteTinyGguf(o, *type, out) : kvcast::WriteTinyModel(o, out);
  if (!status.ok()) {
    std::fprintf(stderr, "make_tiny_model: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
