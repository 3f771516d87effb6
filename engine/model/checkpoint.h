// Checkpoint: a Hugging Face model directory (config.json plus
// model.safetensors, or shards listed in model.safetensors.index.json),
// memory-mapped and validated.
//
// Contract: Open loads and validates config.json (see ModelConfig), then maps
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
#include "engine/model/model_config.h"
#include "engine/model/safetensors.h"

namespace kvcast {

class Checkpoint {
 public:
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Open(const std::string& model_dir);

  Checkpoint(const Checkpoint&) = delete;
  Checkpoint& operator=(const Checkpoint&) = delete;

  const ModelConfig& config() const { return config_; }
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

  std::string dir_;
  std::string weights_name_;  // model.safetensors or its index, for messages.
  ModelConfig config_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*, std::less<>> tensors_;  // Into files_.
};

}  // namespace kvcast

#endif  // KVCAST_ENGINE_MODEL_CHECKPOINT_H_
