#include "engine/model/safetensors.h"

#include <sys/mman.h>

#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "engine/model/internal/absl_view.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "engine/model/internal/file_util.h"
#include "engine/model/internal/json_util.h"
#include "nlohmann/json.hpp"

namespace kvcast {

using model_internal::AV;
namespace {

using nlohmann::json;

// Real headers are at most a few MB; anything this large is not a
// safetensors file at all.
constexpr uint64_t kMaxHeaderBytes = 100u << 20;
// Caps numel * element size well below overflow.
constexpr int64_t kMaxTensorBytes = int64_t{1} << 56;

uint64_t ReadLittleEndian64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::string OffsetsString(uint64_t begin, uint64_t end) {
  return absl::StrCat("[", begin, ", ", end, "]");
}

}  // namespace

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

void ConvertToFloat(const TensorView& tensor, float* out) {
  const auto* bytes = static_cast<const unsigned char*>(tensor.data);
  const int64_t n = tensor.numel();
  if (n == 0) return;  // `out` may then be null (an empty vector's data())
  if (tensor.gguf_blocks.has_value()) {
    DequantizeGgml(*tensor.gguf_blocks, tensor.data, n, out);
    return;
  }
  switch (tensor.dtype) {
    case DType::kF32:
      std::memcpy(out, bytes, n * sizeof(float));
      return;
    case DType::kF16:
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t bits;
        std::memcpy(&bits, bytes + 2 * i, 2);
        out[i] = tensor.dtype == DType::kF16 ? HalfToFloat(bits) : BFloat16ToFloat(bits);
      }
      return;
  }
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  ASSIGN_OR_RETURN(model_internal::MappedFile m,
                   model_internal::MapFile(path, 8, "the 8-byte header length"));
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile(path, m.data, m.size, true));
  RETURN_IF_ERROR(file->ParseHeader());
  return file;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::FromBytes(
    std::string_view bytes, const std::string& path) {
  if (bytes.size() < 8) {
    return absl::DataLossError(absl::StrCat(path, ": ", bytes.size(),
                                            " bytes; the 8-byte header length is missing"));
  }
  std::unique_ptr<SafetensorsFile> file(
      new SafetensorsFile(path, bytes.data(), bytes.size(), false));
  RETURN_IF_ERROR(file->ParseHeader());
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (mapped_) ::munmap(const_cast<void*>(base_), size_);
}

absl::Status SafetensorsFile::ParseHeader() {
  const auto* base = static_cast<const unsigned char*>(base_);
  const uint64_t header_size = ReadLittleEndian64(base);
  if (header_size > kMaxHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        path_, ": header length ", header_size, " is implausible (not a safetensors file?)"));
  }
  if (header_size > size_ - 8) {
    return absl::DataLossError(absl::StrCat(path_, ": header length ", header_size,
                                            " exceeds the ", size_ - 8,
                                            " bytes after the length field (truncated?)"));
  }
  const std::string_view header_text(reinterpret_cast<const char*>(base + 8), header_size);
  ASSIGN_OR_RETURN(json header, model_internal::ParseJson(header_text, path_ + " header"));
  if (!header.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": header is not a JSON object"));
  }
  const unsigned char* data = base + 8 + header_size;
  const uint64_t data_size = size_ - 8 - header_size;

  for (const auto& [name, entry] : header.items()) {
    auto bad = [&, name = name](std::string_view what) {
      return absl::InvalidArgumentError(absl::StrCat(path_, ": tensor '", name, "' ", AV(what)));
    };
    if (name == "__metadata__") {
      if (!entry.is_object()) {
        return absl::InvalidArgumentError(absl::StrCat(path_, ": __metadata__ is not an object"));
      }
      for (const auto& [key, value] : entry.items()) {
        metadata_[key] = value.is_string() ? value.get<std::string>() : value.dump();
      }
      continue;
    }
    if (!entry.is_object()) return bad("is not a JSON object");
    auto dtype_it = entry.find("dtype");
    if (dtype_it == entry.end() || !dtype_it->is_string()) return bad("has no string 'dtype'");
    const std::string dtype_name = dtype_it->get<std::string>();
    std::optional<DType> dtype = DTypeFromName(dtype_name);
    if (!dtype) {
      return bad(absl::StrCat("has unsupported dtype '", dtype_name, "' (supported: F32, F16, BF16)"));
    }
    TensorView view;
    view.name = name;
    view.dtype = *dtype;
    view.file = path_;
    auto shape_it = entry.find("shape");
    if (shape_it == entry.end() || !shape_it->is_array()) return bad("has no 'shape' list");
    int64_t expected_bytes = static_cast<int64_t>(DTypeSize(*dtype));
    for (const json& dim : *shape_it) {
      std::optional<int64_t> d = model_internal::JsonInteger(dim, 0, kMaxTensorBytes);
      if (!d) return bad("has a shape entry that is not a non-negative integer");
      view.shape.push_back(*d);
      if (*d != 0 && expected_bytes > kMaxTensorBytes / *d) return bad("is implausibly large");
      expected_bytes *= *d;
    }
    auto offsets_it = entry.find("data_offsets");
    if (offsets_it == entry.end() || !offsets_it->is_array() || offsets_it->size() != 2) {
      return bad("has no 'data_offsets' pair");
    }
    std::optional<int64_t> begin = model_internal::JsonInteger((*offsets_it)[0], 0, INT64_MAX);
    std::optional<int64_t> end = model_internal::JsonInteger((*offsets_it)[1], 0, INT64_MAX);
    if (!begin || !end) return bad("has data_offsets that are not non-negative integers");
    if (*begin > *end) return bad(absl::StrCat("has data_offsets ", OffsetsString(*begin, *end), " with begin > end"));
    if (*end - *begin != expected_bytes) {
      return bad(absl::StrCat("has data_offsets ", OffsetsString(*begin, *end), " spanning ",
                              *end - *begin, " bytes, but shape ", ShapeString(view.shape), " of ",
                              dtype_name, " needs ", expected_bytes));
    }
    if (static_cast<uint64_t>(*end) > data_size) {
      return absl::DataLossError(absl::StrCat(
          path_, ": tensor '", name, "' has data_offsets ", OffsetsString(*begin, *end),
          " past the end of the ", data_size, "-byte data section (truncated?)"));
    }
    view.data = data + *begin;
    view.nbytes = static_cast<size_t>(expected_bytes);
    tensors_.emplace(name, std::move(view));
  }
  return absl::OkStatus();
}

const TensorView* SafetensorsFile::Find(std::string_view name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& entry : tensors_) out.push_back(entry.first);
  return out;
}

absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors) {
  nlohmann::ordered_json header;
  header["__metadata__"] = {{"format", "pt"}};
  std::set<std::string_view> seen;
  uint64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    auto bad = [&](std::string_view what) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": tensor '", t.name, "' ", AV(what)));
    };
    if (t.name.empty() || t.name == "__metadata__") return bad("has a reserved or empty name");
    for (char c : t.name) {
      if (c < 0x20 || c > 0x7e) return bad("has a name that is not printable ASCII");
    }
    if (!seen.insert(t.name).second) return bad("appears twice");
    int64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0) return bad(absl::StrCat("has negative shape ", ShapeString(t.shape)));
      numel *= d;
    }
    const uint64_t nbytes = static_cast<uint64_t>(numel) * DTypeSize(t.dtype);
    if (t.bytes.size() != nbytes) {
      return bad(absl::StrCat("has ", t.bytes.size(), " bytes, but shape ", ShapeString(t.shape),
                              " of ", AV(DTypeName(t.dtype)), " needs ", nbytes));
    }
    header[t.name] = {{"dtype", DTypeName(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  std::string header_text = header.dump();
  header_text.append((8 - header_text.size() % 8) % 8, ' ');
  std::string contents;
  contents.reserve(8 + header_text.size() + offset);
  for (int i = 0; i < 8; ++i) contents.push_back(static_cast<char>((header_text.size() >> (8 * i)) & 0xff));
  contents += header_text;
  for (const TensorToWrite& t : tensors) contents += t.bytes;
  return model_internal::WriteFile(path, contents);
}

}  // namespace kvcast
