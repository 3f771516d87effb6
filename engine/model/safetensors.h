// Reading and writing Hugging Face safetensors files.
//
// Format: an 8-byte little-endian header length N, N bytes of JSON mapping
// tensor name -> {"dtype", "shape", "data_offsets": [begin, end]} (offsets
// relative to the byte after the header) plus an optional "__metadata__"
// string map, then the raw little-endian tensor data.
//
// Contract: SafetensorsFile::Open maps the file read-only and validates the
// whole header before returning, so every TensorView it hands out points at
// numel * DTypeSize(dtype) readable bytes. Errors name the file and, where
// one is at fault, the tensor:
//   InvalidArgument - malformed header (bad JSON, wrong types, negative
//                     shape, unsupported dtype, inconsistent offsets);
//   DataLoss        - the file is shorter than its header says (truncated);
//   NotFound / PermissionDenied / Internal - the file cannot be opened/mapped.
// Tensor data pointers are only as aligned as the file makes them (files
// written by WriteSafetensors keep every tensor 8-byte aligned when all
// element counts are even) - read through memcpy or ConvertToFloat.
// Thread safety: a SafetensorsFile is immutable after Open; all const methods
// may be called concurrently. WriteSafetensors is stateless.
#ifndef KVCAST_ENGINE_MODEL_SAFETENSORS_H_
#define KVCAST_ENGINE_MODEL_SAFETENSORS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/dtype.h"
#include "engine/model/ggml_types.h"

namespace kvcast {

// A borrowed view of one tensor inside a mapped file. `data` stays valid as
// long as the SafetensorsFile (or Checkpoint) that produced the view lives.
struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t nbytes = 0;
  std::string file;  // Path of the file the bytes live in, for messages.
  // Set when `data` holds a GGUF file's quantized blocks of this type, kept
  // as stored (nbytes = GgmlRowBytes of numel() values); `dtype` is then
  // kF32, the type ConvertToFloat widens them to.
  std::optional<GgmlType> gguf_blocks;

  int64_t numel() const;
};

// Formats a shape as "[a, b]" for error messages.
std::string ShapeString(const std::vector<int64_t>& shape);

// Widens `tensor` to float32 into `out`, which must hold tensor.numel() floats.
void ConvertToFloat(const TensorView& tensor, float* out);

class SafetensorsFile {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  // The same over bytes in memory (borrowed: they must outlive the object
  // and its views); `path` names them in messages. For tests and fuzzing.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> FromBytes(std::string_view bytes,
                                                                    const std::string& path);

  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();  // Unmaps the file; outstanding TensorViews dangle.

  // nullptr if the file holds no tensor called `name`; the pointer lives as
  // long as this object.
  const TensorView* Find(std::string_view name) const;
  // All tensor names, sorted.
  std::vector<std::string> names() const;
  // The "__metadata__" map (non-string values kept as their JSON text).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return path_; }

 private:
  SafetensorsFile(std::string path, const void* base, size_t size, bool mapped)
      : path_(std::move(path)), base_(base), size_(size), mapped_(mapped) {}
  absl::Status ParseHeader();

  std::string path_;
  const void* base_;
  size_t size_;
  bool mapped_;  // base_ is our mmap of the file (else borrowed bytes)
  std::map<std::string, TensorView, std::less<>> tensors_;
  std::map<std::string, std::string> metadata_;
};

struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::string bytes;  // numel * DTypeSize(dtype) little-endian bytes.
};

// Writes `tensors` (in the given order, contiguous) with "__metadata__":
// {"format": "pt"} and the header padded with spaces to a multiple of 8.
// The output is a pure function of the arguments. InvalidArgument for an
// empty, duplicate or reserved name or a byte count that does not match the
// shape; I/O errors name the path. The file is written to `path`.tmp and
// renamed into place.
absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors);

}  // namespace kvcast

#endif  // KVCAST_ENGINE_MODEL_SAFETENSORS_H_
