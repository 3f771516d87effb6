// libFuzzer target for the safetensors header parser (engine/model/safetensors.h):
// any input is either refused with a Status or fully readable (every tensor's
// bytes lie inside the input and widen to float32).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = kvcast::SafetensorsFile::FromBytes(
      std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.safetensors");
  if (!file.ok()) return 0;
  std::vector<float> out;
  for (const std::string& name : (*file)->names()) {
    const kvcast::TensorView* t = (*file)->Find(name);
    if (t == nullptr) __builtin_trap();
    const auto* begin = static_cast<const uint8_t*>(t->data);
    if (begin < data || begin + t->nbytes > data + size) __builtin_trap();
    if (t->numel() > (1 << 20)) continue;
    out.resize(size_t(t->numel()));
    kvcast::ConvertToFloat(*t, out.data());
  }
  return 0;
}
