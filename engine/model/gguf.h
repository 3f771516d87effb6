// GgufFile: a GGUF model file (llama.cpp's format, versions 2 and 3),
// memory-mapped and validated.
//
// Layout: "GGUF", u32 version, u64 tensor count, u64 metadata count; each
// metadata entry a string key, a u32 value type and the value (u8..i64, f32,
// f64, bool, string = u64 length + bytes, or array = u32 element type, u64
// count, elements); each tensor a name, u32 dimension count (1..4), u64
// dimensions (fastest-varying first, as ggml's ne[]), u32 ggml type and u64
// offset into the data section, which starts at the next multiple of
// `general.alignment` (default 32) after the tensor table. Version 1 (u32
// counts) is refused.
//
// Contract: Open maps the file read-only and validates all of it before
// returning: every count and length against the bytes left, every tensor's
// type readable (GgmlTypeInfoOf), its first dimension a whole number of
// blocks, its offset aligned and its bytes inside the file, names unique.
// Errors name the file and the key or tensor at fault:
//   InvalidArgument - bad magic, unsupported version, malformed entries,
//                     unknown value or tensor types, bad shapes;
//   DataLoss        - the file ends before what its header describes;
//   NotFound / PermissionDenied / Internal - it cannot be opened or mapped.
// The typed metadata getters return NotFound "<file>: no metadata key 'k'"
// for a missing key and InvalidArgument "<file>: metadata 'k' is <type>,
// expected <type>" for a value of another type.
// Thread safety: immutable after Open; all const methods may be called
// concurrently. Tensor data lives as long as the GgufFile.
#ifndef KVCAST_ENGINE_MODEL_GGUF_H_
#define KVCAST_ENGINE_MODEL_GGUF_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/ggml_types.h"

namespace kvcast {

enum class GgufType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6,
  kBool = 7, kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};

// "UINT32", "STRING", ... as the GGUF specification names them.
std::string_view GgufTypeName(GgufType type);

// One metadata value. Integers keep their exact value in `i` (signed types)
// or `u` (unsigned and bool), floats in `f`; arrays hold their elements.
struct GgufValue {
  GgufType type = GgufType::kU8;
  uint64_t u = 0;
  int64_t i = 0;
  double f = 0;
  std::string s;
  GgufType element_type = GgufType::kU8;  // Arrays only.
  std::vector<GgufValue> elements;        // Arrays only.
};

struct GgufTensor {
  std::string name;
  GgmlTypeInfo type;
  std::vector<int64_t> dims;  // ggml order: dims[0] is the contiguous one.
  const void* data = nullptr;
  size_t nbytes = 0;

  int64_t numel() const;
};

class GgufFile {
 public:
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // Parses an in-memory image (borrowed; must outlive the GgufFile). `path`
  // is used only in messages. For fuzzing and tests.
  static absl::StatusOr<std::unique_ptr<GgufFile>> FromBytes(std::string_view bytes,
                                                             const std::string& path);

  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;
  ~GgufFile();

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }

  // nullptr when absent.
  const GgufValue* Find(std::string_view key) const;
  // Any integer type whose value is >= 0 (bool excluded).
  absl::StatusOr<uint64_t> GetUint(std::string_view key) const;
  // FLOAT32 or FLOAT64.
  absl::StatusOr<double> GetFloat(std::string_view key) const;
  absl::StatusOr<bool> GetBool(std::string_view key) const;
  absl::StatusOr<std::string> GetString(std::string_view key) const;
  // An ARRAY of `element` values.
  absl::StatusOr<const GgufValue*> GetArray(std::string_view key, GgufType element) const;
  const std::map<std::string, GgufValue, std::less<>>& metadata() const { return metadata_; }

  // nullptr when absent.
  const GgufTensor* FindTensor(std::string_view name) const;
  // In file order.
  const std::vector<GgufTensor>& tensors() const { return tensors_; }

 private:
  GgufFile(std::string path, const void* base, size_t size, bool mapped)
      : path_(std::move(path)), base_(base), size_(size), mapped_(mapped) {}
  absl::Status Parse();
  // The value of `key`, or NotFound naming the file and key.
  absl::StatusOr<const GgufValue*> Require(std::string_view key) const;

  std::string path_;
  const void* base_;
  size_t size_;
  bool mapped_;
  uint32_t version_ = 0;
  uint32_t alignment_ = 32;
  std::map<std::string, GgufValue, std::less<>> metadata_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace kvcast

#endif  // KVCAST_ENGINE_MODEL_GGUF_H_
