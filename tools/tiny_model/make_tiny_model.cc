// make_tiny_model: writes a deterministic random HF checkpoint (see
// tools/tiny_model/tiny_model.h), e.g.
//   bazel run //tools/tiny_model:make_tiny_model -- --out=/tmp/tiny --arch=qwen2
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
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
  const absl::Status status = kvcast::WriteTinyModel(o, out);
  if (!status.ok()) {
    std::fprintf(stderr, "make_tiny_model: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
