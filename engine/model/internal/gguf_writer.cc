#include "engine/model/internal/gguf_writer.h"

#include <cstring>

namespace kvcast {
namespace model_internal {
namespace {

template <typename T>
void Put(std::string* out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out->append(b, sizeof(T));
}

void PutString(std::string* out, const std::string& s) {
  Put<uint64_t>(out, s.size());
  out->append(s);
}

void PutValue(std::string* out, const GgufValue& v) {
  switch (v.type) {
    case GgufType::kU8: return Put<uint8_t>(out, uint8_t(v.u));
    case GgufType::kU16: return Put<uint16_t>(out, uint16_t(v.u));
    case GgufType::kU32: return Put<uint32_t>(out, uint32_t(v.u));
    case GgufType::kU64: return Put<uint64_t>(out, v.u);
    case GgufType::kBool: return Put<uint8_t>(out, uint8_t(v.u));
    case GgufType::kI8: return Put<int8_t>(out, int8_t(v.i));
    case GgufType::kI16: return Put<int16_t>(out, int16_t(v.i));
    case GgufType::kI32: return Put<int32_t>(out, int32_t(v.i));
    case GgufType::kI64: return Put<int64_t>(out, v.i);
    case GgufType::kF32: return Put<float>(out, float(v.f));
    case GgufType::kF64: return Put<double>(out, v.f);
    case GgufType::kString: return PutString(out, v.s);
    case GgufType::kArray:
      Put<uint32_t>(out, uint32_t(v.element_type));
      Put<uint64_t>(out, v.elements.size());
      for (const GgufValue& e : v.elements) PutValue(out, e);
      return;
  }
}

GgufValue Scalar(GgufType type) {
  GgufValue v;
  v.type = type;
  return v;
}

template <typename T, typename Fill>
GgufValue Array(GgufType element, const std::vector<T>& items, Fill fill) {
  GgufValue v = Scalar(GgufType::kArray);
  v.element_type = element;
  for (const T& item : items) {
    GgufValue e = Scalar(element);
    fill(&e, item);
    v.elements.push_back(std::move(e));
  }
  return v;
}

}  // namespace

void GgufWriter::AddUint32(std::string key, uint32_t x) {
  GgufValue v = Scalar(GgufType::kU32);
  v.u = x;
  Add(std::move(key), std::move(v));
}

void GgufWriter::AddFloat32(std::string key, float x) {
  GgufValue v = Scalar(GgufType::kF32);
  v.f = x;
  Add(std::move(key), std::move(v));
}

void GgufWriter::AddBool(std::string key, bool x) {
  GgufValue v = Scalar(GgufType::kBool);
  v.u = x;
  Add(std::move(key), std::move(v));
}

void GgufWriter::AddString(std::string key, std::string x) {
  GgufValue v = Scalar(GgufType::kString);
  v.s = std::move(x);
  Add(std::move(key), std::move(v));
}

void GgufWriter::AddStringArray(std::string key, const std::vector<std::string>& x) {
  Add(std::move(key), Array(GgufType::kString, x, [](GgufValue* e, const std::string& s) {
        e->s = s;
      }));
}

void GgufWriter::AddInt32Array(std::string key, const std::vector<int32_t>& x) {
  Add(std::move(key), Array(GgufType::kI32, x, [](GgufValue* e, int32_t i) { e->i = i; }));
}

void GgufWriter::AddFloat32Array(std::string key, const std::vector<float>& x) {
  Add(std::move(key), Array(GgufType::kF32, x, [](GgufValue* e, float f) { e->f = f; }));
}

void GgufWriter::AddTensor(std::string name, uint32_t type, std::vector<int64_t> dims,
                           std::string bytes) {
  tensors_.push_back({std::move(name), type, std::move(dims), std::move(bytes)});
}

std::string GgufWriter::Build(uint32_t version, uint32_t alignment) const {
  std::string out = "GGUF";
  Put<uint32_t>(&out, version);
  Put<uint64_t>(&out, tensors_.size());
  Put<uint64_t>(&out, metadata_.size());
  for (const auto& [key, value] : metadata_) {
    PutString(&out, key);
    Put<uint32_t>(&out, uint32_t(value.type));
    PutValue(&out, value);
  }
  auto aligned = [alignment](size_t n) { return (n + alignment - 1) / alignment * alignment; };
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    PutString(&out, t.name);
    Put<uint32_t>(&out, uint32_t(t.dims.size()));
    for (int64_t d : t.dims) Put<uint64_t>(&out, uint64_t(d));
    Put<uint32_t>(&out, t.type);
    Put<uint64_t>(&out, offset);
    offset = aligned(offset + t.bytes.size());
  }
  out.resize(aligned(out.size()), '\0');
  for (const Tensor& t : tensors_) {
    out.append(t.bytes);
    out.resize(aligned(out.size()), '\0');
  }
  return out;
}

}  // namespace model_internal
}  // namespace kvcast
