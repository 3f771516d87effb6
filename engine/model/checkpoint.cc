#include "engine/model/checkpoint.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/model/gguf_model.h"
#include "engine/model/internal/absl_view.h"
#include "common/status_macros.h"
#include "engine/model/internal/file_util.h"
#include "engine/model/internal/json_util.h"
#include "nlohmann/json.hpp"

namespace kvcast {

using model_internal::AV;

using model_internal::JoinPath;

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& model_dir) {
  std::unique_ptr<Checkpoint> checkpoint(new Checkpoint());
  checkpoint->dir_ = model_dir;
  if (model_internal::FileExists(model_dir)) {
    RETURN_IF_ERROR(checkpoint->OpenGguf(model_dir));
    return checkpoint;
  }
  ASSIGN_OR_RETURN(checkpoint->config_, ModelConfig::Load(JoinPath(model_dir, "config.json")));
  const std::string single = JoinPath(model_dir, "model.safetensors");
  const std::string index = JoinPath(model_dir, "model.safetensors.index.json");
  if (model_internal::FileExists(single)) {
    RETURN_IF_ERROR(checkpoint->OpenSingle(single));
  } else if (model_internal::FileExists(index)) {
    RETURN_IF_ERROR(checkpoint->OpenSharded(index));
  } else {
    return absl::NotFoundError(absl::StrCat(
        model_dir, ": neither model.safetensors nor model.safetensors.index.json exists"));
  }
  return checkpoint;
}

absl::Status Checkpoint::OpenSingle(const std::string& path) {
  weights_name_ = path;
  ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, SafetensorsFile::Open(path));
  for (const std::string& name : file->names()) tensors_.emplace(name, file->Find(name));
  files_.push_back(std::move(file));
  return absl::OkStatus();
}

absl::Status Checkpoint::OpenGguf(const std::string& path) {
  weights_name_ = path;
  ASSIGN_OR_RETURN(gguf_, GgufFile::Open(path));
  ASSIGN_OR_RETURN(config_, GgufModelConfig(*gguf_));
  ASSIGN_OR_RETURN(gguf_views_, GgufTensorsAsHf(*gguf_, config_, &gguf_storage_));
  for (const TensorView& view : gguf_views_) tensors_.emplace(view.name, &view);
  return absl::OkStatus();
}

absl::Status Checkpoint::OpenSharded(const std::string& index_path) {
  weights_name_ = index_path;
  ASSIGN_OR_RETURN(std::string text, model_internal::ReadFile(index_path));
  ASSIGN_OR_RETURN(nlohmann::json index, model_internal::ParseJson(text, index_path));
  auto weight_map = index.is_object() ? index.find("weight_map") : index.end();
  if (weight_map == index.end() || !weight_map->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(index_path, ": field 'weight_map' is missing or not an object"));
  }
  std::map<std::string, SafetensorsFile*> shards;
  for (const auto& [name, shard_value] : weight_map->items()) {
    if (!shard_value.is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(
          index_path, ": field 'weight_map' entry for tensor '", name, "' is not a string"));
    }
    const std::string shard = shard_value.get<std::string>();
    if (shard.empty() || shard.find('/') != std::string::npos || shard == "..") {
      return absl::InvalidArgumentError(absl::StrCat(
          index_path, ": tensor '", name, "' names shard '", shard, "' outside the model directory"));
    }
    auto it = shards.find(shard);
    if (it == shards.end()) {
      ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file,
                       SafetensorsFile::Open(JoinPath(dir_, shard)));
      it = shards.emplace(shard, file.get()).first;
      files_.push_back(std::move(file));
    }
    const TensorView* view = it->second->Find(name);
    if (view == nullptr) {
      return absl::DataLossError(absl::StrCat(index_path, ": tensor '", name, "' is mapped to ",
                                              it->second->path(), ", which does not contain it"));
    }
    tensors_.emplace(name, view);
  }
  return absl::OkStatus();
}

absl::StatusOr<TensorView> Checkpoint::Get(std::string_view name,
                                           std::vector<int64_t> expected_shape) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    return absl::NotFoundError(absl::StrCat(weights_name_, ": missing tensor '", AV(name), "'"));
  }
  const TensorView& view = *it->second;
  if (view.shape != expected_shape) {
    return absl::InvalidArgumentError(absl::StrCat(view.file, ": tensor '", AV(name), "' has shape ",
                                                   ShapeString(view.shape), ", expected ",
                                                   ShapeString(expected_shape)));
  }
  return view;
}

bool Checkpoint::Has(std::string_view name) const { return tensors_.find(name) != tensors_.end(); }

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& entry : tensors_) out.push_back(entry.first);
  return out;
}

}  // namespace kvcast
