// Checkpoint: a Hugging Face model directory (config.json plus
// model.safetensors, or shards listed in model.safetensors.index.json), or a
// GGUF file (llama.cpp's format, see gguf_model.h), memory-mapped and
// validated, its tensors under HF names and shapes.
//
// Contract: Open of a regular file reads it as GGUF (config from its
// metadata; Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q4_K / Q5_K / Q6_K / Q8_0 tensors kept as
// blocks, other quantized tensors widened to float32 once, here: see gguf_model.h). Open of a
// directory loads and validates config.json (see ModelConfig), then maps
// model.safetensors if present, else every shard named by the index's
// "weight_map" (each shard opened once). Errors:
//   NotFound        - config.json missing, or neither weight file present
//                     (message names the directory);
//   InvalidArgument - malformed config/index/shard header, shard names that
//                     leave the directory;
//   DataLoss        - a truncated shard, or a weight_map entry whose shard
//                     lacks the tensor (message names tensor and shard).
// Get returns a view whose data lives as long as the Checkpoint.
// Thread safety: immutable after Open; all const methods may be called
// concurrently.
#ifndef KVCAST_ENGINE_MODEL_CHECKPOINT_H_
#define KVCAST_ENGINE_MODEL_CHECKPOINT_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/gguf.h"
#include "engine/model/model_config.h"
#include "engine/model/safetensors.h"

namespace kvcast {

class Checkpoint {
 public:
  // `model_path`: a model directory or a .gguf file.
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Open(const std::string& model_path);

  Checkpoint(const Checkpoint&) = delete;
  Checkpoint& operator=(const Checkpoint&) = delete;

  const ModelConfig& config() const { return config_; }
  // The path Open was given (directory or GGUF file), for messages.
  const std::string& dir() const { return dir_; }

  // The tensor `name`, checked against `expected_shape`:
  //   NotFound "<weights file>: missing tensor '<name>'";
  //   InvalidArgument "<shard>: tensor '<name>' has shape [a, b], expected [c, d]".
  absl::StatusOr<TensorView> Get(std::string_view name,
                                 std::vector<int64_t> expected_shape) const;
  bool Has(std::string_view name) const;
  // Every tensor name the checkpoint maps, sorted.
  std::vector<std::string> names() const;

 private:
  Checkpoint() = default;
  absl::Status OpenSingle(const std::string& path);
  absl::Status OpenSharded(const std::string& index_path);
  absl::Status OpenGguf(const std::string& path);

  std::string dir_;
  std::string weights_name_;  // model.safetensors or its index, for messages.
  ModelConfig config_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::unique_ptr<GgufFile> gguf_;
  std::vector<TensorView> gguf_views_;               // Into gguf_ or gguf_storage_.
  std::vector<std::vector<uint8_t>> gguf_storage_;   // Widened or reordered GGUF tensors.
  std::map<std::string, const TensorView*, std::less<>> tensors_;  // Into files_/gguf_views_.
};

}  // namespace kvcast

#endif  // KVCAST_ENGINE_MODEL_CHECKPOINT_H_
