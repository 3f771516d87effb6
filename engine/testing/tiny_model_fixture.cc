#include "engine/testing/tiny_model_fixture.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "engine/kv/prefix_hash.h"

namespace kvcast {
namespace {

[[noreturn]] void Die(const absl::Status& s) {
  std::fprintf(stderr, "tiny model fixture: %s\n", s.ToString().c_str());
  std::abort();
}

}  // namespace

std::string TinyModelDir(const TinyModelOptions& options) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string key = absl::StrCat(
      options.arch, "|", options.dtype, "|", options.vocab_size, "|", options.hidden_size, "|",
      options.intermediate_size, "|", options.num_layers, "|", options.num_heads, "|",
      options.num_kv_heads, "|", options.max_position_embeddings, "|", options.rope_theta, "|",
      options.llama3_rope_scaling, "|", options.linear_rope_factor, "|", options.tie_embeddings, "|", options.shards, "|",
      options.seed);
  std::string dir = absl::StrCat(tmp ? tmp : "/tmp", "/tiny_", HashBytes(key.data(), key.size()).ToHex());
  if (std::FILE* f = std::fopen((dir + "/config.json").c_str(), "r")) {
    std::fclose(f);
    return dir;
  }
  absl::Status s = WriteTinyModel(options, dir);
  if (!s.ok()) Die(s);
  return dir;
}

LoadedTinyModel LoadTinyModel(const TinyModelOptions& options) {
  LoadedTinyModel m;
  auto ckpt = Checkpoint::Open(TinyModelDir(options));
  if (!ckpt.ok()) Die(ckpt.status());
  m.checkpoint = std::move(*ckpt);
  m.backend = NewCpuBackend();
  auto model = Transformer::Load(*m.checkpoint, m.backend.get());
  if (!model.ok()) Die(model.status());
  m.model = std::move(*model);
  return m;
}

}  // namespace kvcast
