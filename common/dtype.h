// Element types of checkpoint tensors and exact conversions between them.
//
// Contract: the conversion functions are pure; FloatToHalf and
// FloatToBFloat16 round to nearest, ties to even, map overflow to infinity,
// keep NaN a (quiet) NaN and produce subnormals where the value calls for
// them. Thread safety: everything here is stateless and safe to call from
// any thread.
#ifndef KVCAST_COMMON_DTYPE_H_
#define KVCAST_COMMON_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace kvcast {

// The element types the engine reads from safetensors checkpoints.
enum class DType { kF32, kF16, kBF16 };

// Bytes per element: 4, 2, 2.
size_t DTypeSize(DType dtype);

// The safetensors spelling: "F32", "F16", "BF16".
std::string_view DTypeName(DType dtype);

// Inverse of DTypeName; nullopt for any other spelling (e.g. "I64", "F8_E4M3").
std::optional<DType> DTypeFromName(std::string_view name);

float HalfToFloat(uint16_t bits);
float BFloat16ToFloat(uint16_t bits);
uint16_t FloatToHalf(float value);
uint16_t FloatToBFloat16(float value);

}  // namespace kvcast

#endif  // KVCAST_COMMON_DTYPE_H_
