#include "engine/model/gguf.h"

#include <sys/mman.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/model/internal/absl_view.h"
#include "engine/model/internal/file_util.h"

namespace kvcast {

using model_internal::AV;

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as little-endian u32.
constexpr int kMaxDims = 4;
constexpr int kMaxArrayDepth = 4;
constexpr uint64_t kMaxKeyBytes = 65535;

// Bounds-checked little-endian reader over the file image. Every failure
// says what was being read and at which offset.
class Cursor {
 public:
  Cursor(const std::string& path, const uint8_t* base, size_t size)
      : path_(path), base_(base), size_(size) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  template <typename T>
  absl::StatusOr<T> Read(std::string_view what) {
    if (remaining() < sizeof(T)) return Truncated(what);
    T v;
    std::memcpy(&v, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  absl::StatusOr<std::string> ReadString(std::string_view what, uint64_t max_bytes) {
    ASSIGN_OR_RETURN(uint64_t n, Read<uint64_t>(what));
    if (n > max_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(path_, ": ", AV(what), " at offset ",
                                                     pos_ - 8, " claims ", n, " bytes"));
    }
    if (n > remaining()) return Truncated(what);
    std::string s(reinterpret_cast<const char*>(base_ + pos_), n);
    pos_ += n;
    return s;
  }

  absl::Status Truncated(std::string_view what) const {
    return absl::DataLossError(absl::StrCat(path_, ": file ends at offset ", size_,
                                            " while reading ", AV(what), " at offset ", pos_,
                                            " (truncated?)"));
  }

 private:
  const std::string& path_;
  const uint8_t* base_;
  size_t size_;
  size_t pos_ = 0;
};

// Smallest encoding of one value of `type`, to bound array counts by the
// bytes left before allocating anything.
size_t MinValueBytes(GgufType type) {
  switch (type) {
    case GgufType::kU8: case GgufType::kI8: case GgufType::kBool: return 1;
    case GgufType::kU16: case GgufType::kI16: return 2;
    case GgufType::kU32: case GgufType::kI32: case GgufType::kF32: return 4;
    case GgufType::kArray: return 12;
    default: return 8;
  }
}

bool KnownType(uint32_t t) { return t <= uint32_t(GgufType::kF64); }

absl::StatusOr<GgufValue> ReadValue(Cursor& in, GgufType type, const std::string& key,
                                    const std::string& path, int depth) {
  GgufValue v;
  v.type = type;
  const std::string what = absl::StrCat("metadata '", key, "'");
  switch (type) {
    case GgufType::kU8: { ASSIGN_OR_RETURN(v.u, in.Read<uint8_t>(what)); break; }
    case GgufType::kU16: { ASSIGN_OR_RETURN(v.u, in.Read<uint16_t>(what)); break; }
    case GgufType::kU32: { ASSIGN_OR_RETURN(v.u, in.Read<uint32_t>(what)); break; }
    case GgufType::kU64: { ASSIGN_OR_RETURN(v.u, in.Read<uint64_t>(what)); break; }
    case GgufType::kI8: { ASSIGN_OR_RETURN(v.i, in.Read<int8_t>(what)); break; }
    case GgufType::kI16: { ASSIGN_OR_RETURN(v.i, in.Read<int16_t>(what)); break; }
    case GgufType::kI32: { ASSIGN_OR_RETURN(v.i, in.Read<int32_t>(what)); break; }
    case GgufType::kI64: { ASSIGN_OR_RETURN(v.i, in.Read<int64_t>(what)); break; }
    case GgufType::kF32: { ASSIGN_OR_RETURN(v.f, in.Read<float>(what)); break; }
    case GgufType::kF64: { ASSIGN_OR_RETURN(v.f, in.Read<double>(what)); break; }
    case GgufType::kBool: {
      ASSIGN_OR_RETURN(uint8_t b, in.Read<uint8_t>(what));
      if (b > 1) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": metadata '", key, "' is a BOOL of value ", b));
      }
      v.u = b;
      break;
    }
    case GgufType::kString: {
      ASSIGN_OR_RETURN(v.s, in.ReadString(what, in.remaining()));
      break;
    }
    case GgufType::kArray: {
      if (depth >= kMaxArrayDepth) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": metadata '", key, "' nests arrays deeper than ", kMaxArrayDepth));
      }
      ASSIGN_OR_RETURN(uint32_t element, in.Read<uint32_t>(what));
      if (!KnownType(element)) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ": metadata '", key, "' is an array of unknown value type ", element));
      }
      v.element_type = GgufType(element);
      ASSIGN_OR_RETURN(uint64_t count, in.Read<uint64_t>(what));
      if (count > in.remaining() / MinValueBytes(v.element_type)) {
        return absl::DataLossError(absl::StrCat(path, ": metadata '", key, "' claims ", count,
                                                " elements, more than the ", in.remaining(),
                                                " bytes left hold (truncated?)"));
      }
      v.elements.reserve(count);
      for (uint64_t n = 0; n < count; ++n) {
        ASSIGN_OR_RETURN(GgufValue e, ReadValue(in, v.element_type, key, path, depth + 1));
        v.elements.push_back(std::move(e));
      }
      break;
    }
  }
  return v;
}

}  // namespace

std::string_view GgufTypeName(GgufType type) {
  static constexpr std::string_view kNames[] = {"UINT8",  "INT8",   "UINT16", "INT16", "UINT32",
                                                "INT32",  "FLOAT32", "BOOL",  "STRING", "ARRAY",
                                                "UINT64", "INT64",  "FLOAT64"};
  return KnownType(uint32_t(type)) ? kNames[uint32_t(type)] : "UNKNOWN";
}

int64_t GgufTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  ASSIGN_OR_RETURN(model_internal::MappedFile m,
                   model_internal::MapFile(path, 24, "a GGUF header"));
  void* mapping = m.data;
  const size_t size = m.size;
  std::unique_ptr<GgufFile> file(new GgufFile(path, mapping, size, /*mapped=*/true));
  RETURN_IF_ERROR(file->Parse());
  return file;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::FromBytes(std::string_view bytes,
                                                              const std::string& path) {
  std::unique_ptr<GgufFile> file(new GgufFile(path, bytes.data(), bytes.size(), false));
  RETURN_IF_ERROR(file->Parse());
  return file;
}

GgufFile::~GgufFile() {
  if (mapped_) ::munmap(const_cast<void*>(base_), size_);
}

absl::Status GgufFile::Parse() {
  const auto* base = static_cast<const uint8_t*>(base_);
  Cursor in(path_, base, size_);
  ASSIGN_OR_RETURN(uint32_t magic, in.Read<uint32_t>("the magic"));
  if (magic != kMagic) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": not a GGUF file (the first 4 bytes are not \"GGUF\")"));
  }
  ASSIGN_OR_RETURN(version_, in.Read<uint32_t>("the version"));
  if (version_ != 2 && version_ != 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        path_, ": GGUF version ", version_, " is not supported (2 and 3 are; a big-endian file "
        "shows as a huge version)"));
  }
  ASSIGN_OR_RETURN(uint64_t tensor_count, in.Read<uint64_t>("the tensor count"));
  ASSIGN_OR_RETURN(uint64_t kv_count, in.Read<uint64_t>("the metadata count"));
  // Each entry needs at least 12 (metadata) or 24 (tensor) bytes.
  if (kv_count > in.remaining() / 12 || tensor_count > in.remaining() / 24) {
    return absl::DataLossError(absl::StrCat(path_, ": header claims ", kv_count,
                                            " metadata entries and ", tensor_count,
                                            " tensors, more than the file holds (truncated?)"));
  }
  for (uint64_t n = 0; n < kv_count; ++n) {
    ASSIGN_OR_RETURN(std::string key, in.ReadString("a metadata key", kMaxKeyBytes));
    ASSIGN_OR_RETURN(uint32_t type, in.Read<uint32_t>(absl::StrCat("the type of '", key, "'")));
    if (!KnownType(type)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path_, ": metadata '", key, "' has unknown value type ", type));
    }
    ASSIGN_OR_RETURN(GgufValue value, ReadValue(in, GgufType(type), key, path_, 0));
    if (!metadata_.emplace(key, std::move(value)).second) {
      return absl::InvalidArgumentError(absl::StrCat(path_, ": metadata key '", key,
                                                     "' appears twice"));
    }
  }
  if (Find("general.alignment") != nullptr) {
    ASSIGN_OR_RETURN(uint64_t alignment, GetUint("general.alignment"));
    if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > (1u << 20)) {
      return absl::InvalidArgumentError(absl::StrCat(
          path_, ": metadata 'general.alignment' is ", alignment, ", not a power of two"));
    }
    alignment_ = uint32_t(alignment);
  }

  std::vector<uint64_t> offsets;
  tensors_.reserve(tensor_count);
  for (uint64_t n = 0; n < tensor_count; ++n) {
    GgufTensor t;
    ASSIGN_OR_RETURN(t.name, in.ReadString("a tensor name", kMaxKeyBytes));
    auto bad = [&](const std::string& what) {
      return absl::InvalidArgumentError(absl::StrCat(path_, ": tensor '", t.name, "' ", what));
    };
    const std::string what = absl::StrCat("tensor '", t.name, "'");
    ASSIGN_OR_RETURN(uint32_t n_dims, in.Read<uint32_t>(what));
    if (n_dims < 1 || n_dims > kMaxDims) {
      return bad(absl::StrCat("has ", n_dims, " dimensions (1 to ", kMaxDims, " allowed)"));
    }
    int64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      ASSIGN_OR_RETURN(uint64_t dim, in.Read<uint64_t>(what));
      if (dim == 0 || dim > (uint64_t{1} << 40) || uint64_t(numel) > (uint64_t{1} << 42) / dim) {
        return bad(absl::StrCat("has dimension ", d, " of size ", dim, " (empty or implausible)"));
      }
      t.dims.push_back(int64_t(dim));
      numel *= int64_t(dim);
    }
    ASSIGN_OR_RETURN(uint32_t type, in.Read<uint32_t>(what));
    std::optional<GgmlTypeInfo> info = GgmlTypeInfoOf(type);
    if (!info) {
      return bad(absl::StrCat("has tensor type ", GgmlTypeName(type),
                              ", which kvcast cannot read (it reads F32, F16, BF16, Q8_0, Q4_0, "
                              "Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K)"));
    }
    t.type = *info;
    if (t.dims[0] % info->block_elems != 0) {
      return bad(absl::StrCat("has rows of ", t.dims[0], " values, not a whole number of ",
                              info->name, " blocks of ", info->block_elems));
    }
    t.nbytes = GgmlRowBytes(*info, numel);
    ASSIGN_OR_RETURN(uint64_t offset, in.Read<uint64_t>(what));
    if (offset % alignment_ != 0) {
      return bad(absl::StrCat("starts at data offset ", offset, ", not a multiple of the ",
                              alignment_, "-byte alignment"));
    }
    if (tensor_index_.count(t.name) != 0) return bad("appears twice");
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
    offsets.push_back(offset);
  }
  const size_t data_start = (in.pos() + alignment_ - 1) / alignment_ * alignment_;
  for (size_t n = 0; n < tensors_.size(); ++n) {
    GgufTensor& t = tensors_[n];
    const uint64_t offset = offsets[n];
    if (data_start > size_ || offset > size_ - data_start ||
        t.nbytes > size_ - data_start - offset) {
      return absl::DataLossError(absl::StrCat(
          path_, ": tensor '", t.name, "' (", t.nbytes, " bytes at data offset ", offset,
          ") ends past the end of the file (", size_, " bytes; truncated?)"));
    }
    t.data = base + data_start + offset;
  }
  return absl::OkStatus();
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

namespace {

absl::Status WrongType(const std::string& path, std::string_view key, const GgufValue& v,
                       std::string_view expected) {
  std::string got(GgufTypeName(v.type));
  if (v.type == GgufType::kArray) absl::StrAppend(&got, " of ", AV(GgufTypeName(v.element_type)));
  return absl::InvalidArgumentError(absl::StrCat(path, ": metadata '", AV(key), "' is ", got,
                                                 ", expected ", AV(expected)));
}

}  // namespace

absl::StatusOr<const GgufValue*> GgufFile::Require(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) {
    return absl::NotFoundError(absl::StrCat(path_, ": no metadata key '", AV(key), "'"));
  }
  return v;
}

absl::StatusOr<uint64_t> GgufFile::GetUint(std::string_view key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, Require(key));
  switch (v->type) {
    case GgufType::kU8: case GgufType::kU16: case GgufType::kU32: case GgufType::kU64:
      return v->u;
    case GgufType::kI8: case GgufType::kI16: case GgufType::kI32: case GgufType::kI64:
      if (v->i >= 0) return uint64_t(v->i);
      return absl::InvalidArgumentError(
          absl::StrCat(path_, ": metadata '", AV(key), "' is negative (", v->i, ")"));
    default:
      return WrongType(path_, key, *v, "an integer");
  }
}

absl::StatusOr<double> GgufFile::GetFloat(std::string_view key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, Require(key));
  if (v->type == GgufType::kF32 || v->type == GgufType::kF64) return v->f;
  return WrongType(path_, key, *v, "FLOAT32 or FLOAT64");
}

absl::StatusOr<bool> GgufFile::GetBool(std::string_view key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, Require(key));
  if (v->type == GgufType::kBool) return v->u != 0;
  return WrongType(path_, key, *v, "BOOL");
}

absl::StatusOr<std::string> GgufFile::GetString(std::string_view key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, Require(key));
  if (v->type == GgufType::kString) return v->s;
  return WrongType(path_, key, *v, "STRING");
}

absl::StatusOr<const GgufValue*> GgufFile::GetArray(std::string_view key,
                                                    GgufType element) const {
  ASSIGN_OR_RETURN(const GgufValue* v, Require(key));
  if (v->type == GgufType::kArray && v->element_type == element) return v;
  return WrongType(path_, key, *v, absl::StrCat("ARRAY of ", AV(GgufTypeName(element))));
}

const GgufTensor* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace kvcast
