// Tensor element types of GGML/GGUF files and their exact dequantization.
//
// Block formats (little-endian; `d`/`m` are IEEE half floats). Each type
// stores a row as consecutive blocks of `block_elems` values:
//   Q8_0  32 values, 34 B: d, int8 q[32]                  x = d*q
//   Q4_0  32 values, 18 B: d, u8 qs[16]                   x = d*(nibble-8)
//   Q4_1  32 values, 20 B: d, m, u8 qs[16]                x = d*nibble + m
//   Q5_0  32 values, 22 B: d, u8 qh[4], u8 qs[16]         x = d*(q5-16)
//   Q5_1  32 values, 24 B: d, m, u8 qh[4], u8 qs[16]      x = d*q5 + m
//     (value j < 16 is the low nibble of qs[j], value j+16 the high one; the
//     fifth bit of value j is bit j of the 32-bit qh)
//   Q4_K  256 values, 144 B: d, dmin, u8 scales[12], u8 qs[128]
//   Q5_K  256 values, 176 B: d, dmin, u8 scales[12], u8 qh[32], u8 qs[128]
//     (8 sub-blocks of 32 with 6-bit scale s and min n packed in `scales`;
//     x = (d*s)*q - (dmin*n))
//   Q6_K  256 values, 210 B: u8 ql[128], u8 qh[64], int8 scales[16], d
//     (16 sub-blocks of 16; x = (d*scale)*(q6-32))
// The arithmetic is float32, in exactly the order written above (no fused
// multiply-add), so results equal ggml's reference dequantization and the
// `gguf` Python package bit for bit.
//
// Thread safety: stateless; safe from any thread.
#ifndef KVCAST_ENGINE_MODEL_GGML_TYPES_H_
#define KVCAST_ENGINE_MODEL_GGML_TYPES_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace kvcast {

// The ggml type ids this engine reads (values as in the GGUF file).
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kBF16 = 30,
};

struct GgmlTypeInfo {
  GgmlType type;
  const char* name;  // "Q4_1", as ggml spells it.
  int block_elems;   // Values per block (1 for plain floats).
  int block_bytes;   // Bytes per block.
};

// The layout of type id `id`, or nullopt when this engine cannot read it.
std::optional<GgmlTypeInfo> GgmlTypeInfoOf(uint32_t id);

// ggml's name of any type id it defines ("Q2_K", "IQ4_XS", ...), readable
// or not; "type <id>" for an id ggml does not define.
std::string GgmlTypeName(uint32_t id);

// Bytes of `count` values of `info` (count a multiple of block_elems).
inline size_t GgmlRowBytes(const GgmlTypeInfo& info, int64_t count) {
  return size_t(count / info.block_elems) * size_t(info.block_bytes);
}

// Widens `count` values stored as `type` at `src` to float32 `out`. `count`
// must be a multiple of the type's block_elems.
void DequantizeGgml(GgmlType type, const void* src, int64_t count, float* out);

}  // namespace kvcast

#endif  // KVCAST_ENGINE_MODEL_GGML_TYPES_H_
