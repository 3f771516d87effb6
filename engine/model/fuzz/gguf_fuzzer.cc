// libFuzzer target for the GGUF parser (engine/model/gguf.h): any input is
// either refused with a Status or fully readable (every tensor dequantizes
// inside its bytes, every metadata getter answers).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = kvcast::GgufFile::FromBytes(
      std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.gguf");
  if (!file.ok()) return 0;
  for (const auto& [key, value] : (*file)->metadata()) {
    (void)(*file)->GetUint(key);
    (void)(*file)->GetFloat(key);
    (void)(*file)->GetString(key);
    (void)(*file)->GetArray(key, value.element_type);
  }
  std::vector<float> out;
  for (const kvcast::GgufTensor& t : (*file)->tensors()) {
    if (t.numel() > (1 << 20)) continue;  // Valid but too large to widen here.
    out.resize(size_t(t.numel()));
    kvcast::DequantizeGgml(t.type.type, t.data, t.numel(), out.data());
  }
  return 0;
}
