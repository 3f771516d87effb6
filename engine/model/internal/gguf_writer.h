// GgufWriter: builds GGUF file images, for tests, fuzz seeds and the tiny
// model generator. It writes what it is given (any key, any value, tensors
// whose bytes the caller already encoded), so tests can also write files
// that GgufFile must refuse.
// Thread safety: none; one writer per thread.
#ifndef KVCAST_ENGINE_MODEL_INTERNAL_GGUF_WRITER_H_
#define KVCAST_ENGINE_MODEL_INTERNAL_GGUF_WRITER_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/model/gguf.h"

namespace kvcast {
namespace model_internal {

class GgufWriter {
 public:
  void Add(std::string key, GgufValue value) {
    metadata_.emplace_back(std::move(key), std::move(value));
  }
  void AddUint32(std::string key, uint32_t v);
  void AddFloat32(std::string key, float v);
  void AddBool(std::string key, bool v);
  void AddString(std::string key, std::string v);
  void AddStringArray(std::string key, const std::vector<std::string>& v);
  void AddInt32Array(std::string key, const std::vector<int32_t>& v);
  void AddFloat32Array(std::string key, const std::vector<float>& v);

  // `dims` in ggml order (contiguous first); `bytes` already in `type`'s
  // encoding. `type` is a raw id so that unreadable types can be written.
  void AddTensor(std::string name, uint32_t type, std::vector<int64_t> dims, std::string bytes);

  // The whole file: header, metadata, tensor table, data aligned to
  // `alignment` (general.alignment is not added; Add it to change it).
  std::string Build(uint32_t version = 3, uint32_t alignment = 32) const;

 private:
  struct Tensor {
    std::string name;
    uint32_t type;
    std::vector<int64_t> dims;
    std::string bytes;
  };
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::vector<Tensor> tensors_;
};

}  // namespace model_internal
}  // namespace kvcast

#endif  // KVCAST_ENGINE_MODEL_INTERNAL_GGUF_WRITER_H_
