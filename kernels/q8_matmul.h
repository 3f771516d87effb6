// Q8 weights on the CPU: a [n, k] float matrix kept as int8 in blocks of 32
// along k, one float32 scale per block (the shape of ggml's Q8_0, in the
// backend's own layout), and the matrix product against it.
//
// Layout of a Q8 matrix (Q8MatrixBytes(n, k) bytes, 64-byte aligned by the
// caller): rows are grouped in panels of 16 (the last padded with zero
// rows), P = ceil(n / 16) panels, B = k / 32 blocks. Byte
// ((p * B + b) * 8 + j) * 64 + 4 * i + t holds q[16p + i, 32b + 4j + t] + 128
// as uint8 (i < 16, j < 8, t < 4: four bytes of k for each of the panel's 16
// rows, the layout the AVX-512 lanes and the AMX tile unit read); then, at
// Q8ScalesOffset = P * B * 512, float scale[(p * B + b) * 16 + i]. Block b of
// row r holds x[r, 32b .. 32b + 31] ~= scale * q, where scale = absmax / 127
// and q = round-to-nearest-even(x / scale) (0 for an all-zero block), so
// |q| <= 127.
//
// Q8Linear computes y = x W^T the way llama.cpp's Q8_0 x Q8_0 dot does:
// each 32-value block of each activation row is quantized the same way, the
// integer block dot product is exact, and each block is added in order as
// acc = fma(scale_x * scale_w, float(integer block dot), acc), starting from
// acc = 0. Every implementation (scalar, AVX2, AVX-VNNI, AVX-512 VNNI, and
// AMX for groups of 16 activation rows, chosen at run time) follows this
// exact sequence, so the result is bit-identical across them, across thread
// counts, and for a row whatever the other rows of its batch are
// (batch-invariant). KVCAST_Q8_AMX=0 in the environment keeps AMX unused.
//
// Requires k % 32 == 0 (Q8Supported). Thread safety: stateless; Q8Linear
// runs on the calling thread plus an OpenMP team, and may be called from
// several threads at once.
#ifndef KVCAST_KERNELS_Q8_MATMUL_H_
#define KVCAST_KERNELS_Q8_MATMUL_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kvcast {

constexpr int kQ8Block = 32;

inline bool Q8Supported(int64_t k) { return k > 0 && k % kQ8Block == 0; }
size_t Q8MatrixBytes(int64_t n, int64_t k);
// Offset of the scales inside a Q8 matrix of n * k values.
size_t Q8ScalesOffset(int64_t n, int64_t k);

// Quantizes the row-major float matrix `w` [n, k] into `out`.
void QuantizeQ8Matrix(const float* w, int64_t n, int64_t k, void* out);
// Packs n rows of k values stored as GGUF Q8_0 blocks (34 bytes a 32 values:
// fp16 d, int8 q[32]; x = d * q; row r is k / 32 consecutive blocks) into
// `out`, keeping each block's d (widened to float32) and q exactly, so the
// matrix holds the file's values; a q of -128 (which ggml's quantizer never
// writes) becomes -127, the kernels' range.
void PackQ8_0Matrix(const void* blocks, int64_t n, int64_t k, void* out);
// Widens rows `rows[i]` of the Q8 matrix `w` [n, k] into out[i, :].
void DequantizeQ8Rows(const void* w, int64_t n, int64_t k, const int32_t* rows, int num_rows,
                      float* out);
// y[m, n] = x[m, k] W^T for the Q8 matrix `w` [n, k]; y rows are n apart.
void Q8Linear(const float* x, int m, int64_t k, const void* w, int64_t n, float* y);

// "avx512-vnni", "avx-vnni", "avx2" or "scalar", with "+amx" when AMX takes
// groups of 16 rows: the kernels Q8Linear uses on this CPU.
std::string_view Q8KernelName();

}  // namespace kvcast

#endif  // KVCAST_KERNELS_Q8_MATMUL_H_
